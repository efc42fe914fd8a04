// Every CollectiveRendezvous method (collective/rendezvous_service.h), driven through the handlers
// its server runs for each call: an input is a sequence of calls, each a method number and
// request bytes, served by a fresh rendezvous whose waits are cut to a millisecond (a request may
// ask for minutes) and whose limits are small, so both the parsing and the limits are reached.
#include <cstdio>

#include "collective/rendezvous_service.h"
#include "proto/collective.pb.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {
namespace {

int MethodNumber(absl::string_view name) {
  const google::protobuf::MethodDescriptor* m =
      RendezvousHandlers::Service()->FindMethodByName(std::string(name));
  return m == nullptr ? 0 : m->index();
}

void AddCall(FuzzInputBuilder* b, absl::string_view method, const google::protobuf::Message& m) {
  const std::string bytes = m.SerializeAsString();
  b->Byte(static_cast<uint8_t>(MethodNumber(method))).Byte(0).U16(bytes.size()).Bytes(bytes);
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  FuzzInputBuilder b;
  RendezvousJoinRequest join;
  join.set_group("train");
  join.set_generation(1);
  join.set_rank(0);
  join.set_size(1);
  join.set_name("worker:0");
  join.set_timeout_ms(1000);
  AddCall(&b, "Join", join);
  RendezvousSetRequest set;
  set.set_group("train");
  set.set_generation(1);
  set.set_key("gloo/0");
  set.set_value(std::string("\x01\x02\x00\x03", 4));
  AddCall(&b, "Set", set);
  RendezvousGetRequest get;
  get.set_group("train");
  get.set_generation(1);
  get.set_key("gloo/0");
  get.set_timeout_ms(5000);
  AddCall(&b, "Get", get);
  RendezvousHeartbeatRequest beat;
  beat.set_group("train");
  beat.set_generation(1);
  beat.set_rank(0);
  AddCall(&b, "Heartbeat", beat);
  RendezvousAbortRequest abort;
  abort.set_group("train");
  abort.set_generation(1);
  abort.set_rank(0);
  abort.set_reason("all_reduce: connection reset");
  abort.set_wait_ms(4000);
  AddCall(&b, "Abort", abort);
  FuzzInputBuilder newer;
  set.set_generation(2);
  AddCall(&newer, "Set", set);
  join.set_generation(1);
  AddCall(&newer, "Join", join);
  return {b.str(), newer.str()};
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  RendezvousOptions options;
  options.max_wait = absl::Milliseconds(1);
  options.stale_after = absl::Milliseconds(1);
  options.max_value_bytes = 256;
  options.max_total_bytes = 1024;
  options.max_keys = 8;
  options.max_ranks = 16;
  RendezvousHandlers rendezvous(options);
  FuzzInput in(data, size);
  ServeFuzzCalls(&in, RendezvousHandlers::Service()->method_count(), /*max_calls=*/16,
                 [&](int method, const std::vector<absl::string_view>& request,
                     const std::function<char*(size_t)>& reply) {
                   return rendezvous.Serve(method, request, reply);
                 });
  return 0;
}
