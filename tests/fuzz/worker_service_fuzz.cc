// Every WorkerService method, driven through the handlers the worker server runs for each call
// (worker/worker_service_handlers.h), with the real registry of a worker binary (the built-in
// closures and every model's closures and datasets, models/registry.h): an input is a sequence of
// calls, each a method number and request bytes, served by a fresh worker. The worker has no ps
// tasks: a closure that reaches for one fails as it would with every ps down.
#include <cstdio>

#include "models/registry.h"
#include "proto/worker_service.pb.h"
#include "common/tensor_proto.h"
#include "tests/fuzz/fuzz_target.h"
#include "worker/worker_service_handlers.h"

namespace pstrain {
namespace {

int MethodNumber(absl::string_view name) {
  const google::protobuf::MethodDescriptor* m =
      WorkerServiceHandlers::Service()->FindMethodByName(std::string(name));
  return m == nullptr ? 0 : m->index();
}

void AddCall(FuzzInputBuilder* b, absl::string_view method, const google::protobuf::Message& m) {
  const std::string bytes = m.SerializeAsString();
  b->Byte(static_cast<uint8_t>(MethodNumber(method))).Byte(0).U16(bytes.size()).Bytes(bytes);
}

const std::shared_ptr<const ClosureRegistry>& Registry() {
  static const auto* registry = [] {
    absl::StatusOr<std::shared_ptr<const ClosureRegistry>> r =
        TrainingRegistry(std::make_shared<ReplicaGroups>());
    if (!r.ok()) __builtin_trap();
    return new std::shared_ptr<const ClosureRegistry>(*r);
  }();
  return *registry;
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> seeds;
  FuzzInputBuilder builtin;
  AddCall(&builtin, "Health", HealthRequest());
  CreateResourceRequest range;
  range.set_dataset("range");
  range.set_resource_id(1);
  range.set_num_workers(2);
  ToProto(Tensor::Scalar<int64_t>(10), range.add_args());
  AddCall(&builtin, "CreateResource", range);
  RunClosureRequest echo;
  echo.set_closure("echo");
  ToProto(Tensor::FromVector<float>({1, 2, 3}, {3}), echo.add_args());
  ToProto(Tensor::String("text"), echo.add_args());
  echo.add_resource_ids(1);
  AddCall(&builtin, "RunClosure", echo);
  RunClosureRequest add;
  add.set_closure("add_range");
  ToProto(Tensor::Scalar<int64_t>(0), add.add_args());
  ToProto(Tensor::Scalar<int64_t>(100), add.add_args());
  AddCall(&builtin, "RunClosure", add);
  seeds.push_back(builtin.str());
  // Every model's closures and datasets, with arguments they don't expect.
  for (const std::string& name : Registry()->closure_names()) {
    FuzzInputBuilder b;
    AddCall(&b, "CreateResource", range);
    RunClosureRequest run;
    run.set_closure(name);
    ToProto(Tensor::Scalar<int64_t>(3), run.add_args());
    run.add_resource_ids(1);
    AddCall(&b, "RunClosure", run);
    seeds.push_back(b.str());
  }
  for (const std::string& name : Registry()->dataset_names()) {
    FuzzInputBuilder b;
    CreateResourceRequest create;
    create.set_dataset(name);
    create.set_resource_id(1);
    ToProto(Tensor::String(R"({"spec": {}, "plan": {"files": []}})"), create.add_args());
    AddCall(&b, "CreateResource", create);
    seeds.push_back(b.str());
  }
  return seeds;
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  WorkerServiceHandlers worker(Registry(), PsConnection::ToAddresses({}), /*num_workers=*/2);
  worker.SetIdentity(TaskIdentity::New("worker", 0, "localhost:1"));
  FuzzInput in(data, size);
  ServeFuzzCalls(&in, WorkerServiceHandlers::Service()->method_count(), /*max_calls=*/8,
                 [&](int method, const std::vector<absl::string_view>& request,
                     const std::function<char*(size_t)>& reply) {
                   return worker.Serve(method, request, reply);
                 });
  return 0;
}
