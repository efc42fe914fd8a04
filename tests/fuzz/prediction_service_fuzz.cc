// The prediction server's handlers (serving/prediction_server_handlers.h) on outside bytes, over a
// real model: a small tabular model trained and exported once per process
// (tests/prediction/tabular_export.h), served by the same versions, batcher and handlers the
// server runs. An input's first byte picks what it drives:
//   0: PredictionService calls (ServeFuzzCalls: method byte, cut byte, u16-length request), so
//      the model's own parsing of every field is fuzzed too;
//   1: an HTTP predict body (the next byte picks the model name in the path), through the JSON
//      parser and the model;
//   2: the HTTP status of a model name (the rest).
// Nothing may crash; an answer that is OK has outputs.size() predictions per example; an error
// is a refusal of the request (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, NOT_FOUND, UNIMPLEMENTED),
// never another code; every HTTP answer is JSON.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "nlohmann/json.hpp"
#include "proto/prediction_service.pb.h"
#include "serving/prediction_server_batcher.h"
#include "serving/prediction_server_handlers.h"
#include "serving/prediction_server_models.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/prediction/tabular_export.h"

namespace pstrain {
namespace {

constexpr int64_t kMaxExamples = 64;

// The served model and the handlers over it, made once (training takes a fraction of a second).
struct Served {
  std::unique_ptr<ModelVersions> versions;
  std::unique_ptr<PredictionBatcher> batcher;
  std::unique_ptr<PredictionHandlers> handlers;
  TrainedTabular trained;
};

const Served& Server() {
  static const Served* served = [] {
    auto s = new Served;
    const std::string dir = FuzzDir() + "/model";
    std::filesystem::create_directories(dir + "/base");
    SmallTabularOptions small;
    small.train_rows = 300;
    small.test_rows = 8;
    absl::StatusOr<TrainedTabular> trained = TrainSmallTabular(dir, small);
    if (!trained.ok()) {
      std::fprintf(stderr, "training the fuzz model: %s\n", trained.status().ToString().c_str());
      __builtin_trap();
    }
    s->trained = *std::move(trained);
    if (!ExportSmallTabular(s->trained, dir + "/base/1").ok()) __builtin_trap();
    ModelVersionsOptions v;
    v.base = dir + "/base";
    v.poll_period = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<ModelVersions>> versions = ModelVersions::Start(v);
    if (!versions.ok()) __builtin_trap();
    s->versions = *std::move(versions);
    PredictionBatcherOptions b;
    b.max_batch_wait = absl::ZeroDuration();
    b.threads = 1;
    s->batcher = std::make_unique<PredictionBatcher>(b, s->versions->Source());
    PredictionLimits limits;
    limits.max_request_examples = kMaxExamples;
    limits.max_request_bytes = 1 << 16;
    s->handlers = std::make_unique<PredictionHandlers>("tabular", s->versions.get(),
                                                       s->batcher.get(), limits);
    return s;
  }();
  return *served;
}

int MethodNumber(absl::string_view name) {
  const google::protobuf::MethodDescriptor* m =
      PredictionHandlers::Service()->FindMethodByName(std::string(name));
  return m == nullptr ? 0 : m->index();
}

void AddCall(FuzzInputBuilder* b, absl::string_view method, const google::protobuf::Message& m,
             uint8_t cut = 0) {
  const std::string bytes = m.SerializeAsString();
  b->Byte(static_cast<uint8_t>(MethodNumber(method))).Byte(cut).U16(bytes.size()).Bytes(bytes);
}

// Rows of the test file as a request (the label column too: ignored, as in a CSV).
PredictRequest Request(const RawExamples& test, size_t rows) {
  PredictRequest r;
  for (const std::string& c : test.columns) r.mutable_examples()->add_columns(c);
  for (size_t i = 0; i < rows && i < test.rows.size(); ++i) {
    TextRow* row = r.mutable_examples()->add_rows();
    for (const std::string& f : test.rows[i]) row->add_fields(f);
  }
  return r;
}

std::string Http(uint8_t mode, uint8_t name, const std::string& body) {
  return FuzzInputBuilder().Byte(mode).Byte(name).Bytes(body).str();
}

bool IsRefusal(absl::StatusCode code) {
  return code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kResourceExhausted || code == absl::StatusCode::kNotFound ||
         code == absl::StatusCode::kUnimplemented;
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  // Seeds are built from the same test rows the model serves (the model is trained here too).
  const RawExamples& test = Server().trained.test;
  std::vector<std::string> seeds;
  FuzzInputBuilder grpc;
  grpc.Byte(0);
  AddCall(&grpc, "Predict", Request(test, 4), 9);
  AddCall(&grpc, "ModelStatus", ModelStatusRequest());
  PredictRequest missing = Request(test, 2);
  missing.mutable_examples()->set_columns(0, "town");
  AddCall(&grpc, "Predict", missing);
  PredictRequest bad = Request(test, 2);
  bad.mutable_examples()->mutable_rows(1)->set_fields(2, "lots");
  bad.mutable_examples()->mutable_rows(0)->set_fields(3, "2001-13-45");
  AddCall(&grpc, "Predict", bad, 30);
  PredictRequest short_rows = Request(test, 3);
  short_rows.mutable_examples()->mutable_rows(1)->mutable_fields()->RemoveLast();
  short_rows.set_model_name("tabular");
  AddCall(&grpc, "Predict", short_rows);
  PredictRequest other = Request(test, 1);
  other.set_model_name("other");
  AddCall(&grpc, "Predict", other);
  AddCall(&grpc, "Predict", Request(test, 0));
  seeds.push_back(grpc.str());

  seeds.push_back(Http(1, 0, R"({"instances": [
      {"city": "Oslo", "tag": "t1", "income": 512, "when": "2001-03-11"},
      {"city": "Rome", "tag": "t4", "income": "17", "when": "2001-09-11", "label": 1},
      {"city": null, "income": 1e3, "when": "2001-01-01", "extra": true}]})"));
  seeds.push_back(Http(1, 0, R"({"signature_name": "serving_default", "instances": []})"));
  seeds.push_back(Http(1, 0, R"({"instances": [{"city": "Oslo", "income": "lots"}]})"));
  seeds.push_back(Http(1, 0, R"({"instances": [{"city": {"a": 1}}]})"));
  seeds.push_back(Http(1, 0, R"({"instances": [{"city": "Oslo", "city": "Rome"}]})"));
  seeds.push_back(Http(1, 1, R"({"instances": [{"city": "Oslo"}]})"));
  seeds.push_back(Http(1, 0, R"({"instances": [{"when": "2001-02-30", "income": -1e308}], )"));
  seeds.push_back(FuzzInputBuilder().Byte(2).Bytes("tabular").str());
  return seeds;
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  const Served& served = Server();
  PredictionHandlers& handlers = *served.handlers;
  FuzzInput in(data, size);
  const uint8_t mode = in.TakeByte() % 3;
  if (mode == 0) {
    const int predict = MethodNumber("Predict");
    ServeFuzzCalls(&in, PredictionHandlers::Service()->method_count(), /*max_calls=*/8,
                   [&](int method, const std::vector<absl::string_view>& request,
                       const std::function<char*(size_t)>& reply) {
                     char* at = nullptr;
                     size_t reply_bytes = 0;
                     absl::Status s = handlers.Serve(method, request, [&](size_t bytes) {
                       reply_bytes = bytes;
                       return at = reply(bytes);
                     });
                     if (!s.ok() && !IsRefusal(s.code())) __builtin_trap();
                     if (s.ok() && method == predict) {
                       // One prediction per example.
                       std::string bytes;
                       for (absl::string_view p : request) bytes.append(p.data(), p.size());
                       PredictRequest parsed;
                       PredictResponse answer;
                       if (!parsed.ParseFromString(bytes)) __builtin_trap();
                       if (at != nullptr &&
                           !answer.ParseFromArray(at, static_cast<int>(reply_bytes))) {
                         __builtin_trap();
                       }
                       if (answer.predictions_size() !=
                           parsed.examples().rows_size() * answer.outputs_size()) {
                         __builtin_trap();
                       }
                     }
                     return s;
                   });
  } else if (mode == 1) {
    const std::string name = in.TakeByte() % 2 == 0 ? "tabular" : "other";
    const std::string body = in.TakeRest();
    const HttpReply reply = handlers.HttpPredict(name, body);
    const nlohmann::json parsed =
        nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) __builtin_trap();  // every answer is JSON
    if (FuzzVerbose()) std::fprintf(stderr, "HTTP %d %s\n", reply.status, reply.body.c_str());
    if (reply.status == 200) {
      absl::StatusOr<RawExamples> examples = ParsePredictJson(body, kMaxExamples);
      if (!examples.ok()) __builtin_trap();
      if (!parsed.contains("predictions") ||
          parsed["predictions"].size() != examples->rows.size()) {
        __builtin_trap();
      }
    } else if (reply.status != 400 && reply.status != 404 && reply.status != 413) {
      __builtin_trap();
    }
  } else {
    const HttpReply reply = handlers.HttpModelStatus(in.TakeRest());
    if (reply.status != 200 && reply.status != 404) __builtin_trap();
    if (nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false).is_discarded()) {
      __builtin_trap();
    }
  }
  return 0;
}
