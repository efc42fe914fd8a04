// The prediction server over a small tabular model trained and exported once for the suite
// (tests/prediction/tabular_export.h): gRPC and HTTP predictions equal Predictor::Predict's for
// the same rows; concurrent requests of both protocols are merged into batches; a new version
// exported under load is switched to with no request failing; a corrupt new version is skipped;
// bad requests get their codes and the server goes on; TLS and the token hold on both protocols.
#include "serving/prediction_server.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_status.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "common/test_util.h"
#include "common/transport_security.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "proto/prediction_service.grpc.pb.h"
#include "serving/predictor.h"
#include "tests/prediction/tabular_export.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr double kTolerance = 1e-6;

// The model for every test: trained once, exported as version 1 and (only the two most frequent
// keys of each table: other predictions) as version 2.
struct Shared {
  std::string dir;
  TrainedTabular trained;
  std::string v1, v2;            // the exported directories, copied into each test's base
  std::vector<float> expect_v1;  // Predictor::Predict on the test rows
  std::vector<float> expect_v2;
};
Shared* shared = nullptr;

class PredictionServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared = new Shared;
    shared->dir = FreshTempDir("prediction_server_model");
    absl::StatusOr<TrainedTabular> trained = TrainSmallTabular(shared->dir);
    ASSERT_TRUE(trained.ok()) << trained.status();
    shared->trained = *std::move(trained);
    shared->v1 = shared->dir + "/exports/1";
    shared->v2 = shared->dir + "/exports/2";
    ASSERT_TRUE(ExportSmallTabular(shared->trained, shared->v1).ok());
    ASSERT_TRUE(ExportSmallTabular(shared->trained, shared->v2, /*top_k=*/2).ok());
    for (auto [dir, out] : {std::pair{shared->v1, &shared->expect_v1},
                            std::pair{shared->v2, &shared->expect_v2}}) {
      absl::StatusOr<std::unique_ptr<Predictor>> p = Predictor::Load(dir);
      ASSERT_TRUE(p.ok()) << p.status();
      ASSERT_TRUE((*p)->Predict(shared->trained.test, out).ok());
    }
    ASSERT_NE(shared->expect_v1, shared->expect_v2);
  }
  static void TearDownTestSuite() {
    delete shared;
    shared = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(shared, nullptr);
    base_ = FreshTempDir("prediction_server_base") + "/tabular";
    fs::create_directories(base_);
    fs::copy(shared->v1, base_ + "/1", fs::copy_options::recursive);
  }

  PredictionServerOptions Options() const {
    PredictionServerOptions o;
    o.model_base = base_;
    o.http_host = "127.0.0.1";
    o.poll_period = absl::ZeroDuration();  // tests check for versions themselves, or set it
    return o;
  }

  std::unique_ptr<PredictionServer> StartServer(const PredictionServerOptions& options) {
    absl::StatusOr<std::unique_ptr<PredictionServer>> server = PredictionServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  static const RawExamples& Test() { return shared->trained.test; }

  // Rows [begin, end) of the test set as a request.
  static PredictRequest GrpcRequest(size_t begin, size_t end) {
    PredictRequest r;
    for (const std::string& c : Test().columns) r.mutable_examples()->add_columns(c);
    for (size_t i = begin; i < end; ++i) {
      TextRow* row = r.mutable_examples()->add_rows();
      for (const std::string& f : Test().rows[i]) row->add_fields(f);
    }
    return r;
  }
  // The same as an HTTP body; `numbers`: income as a JSON number, as a client would send it.
  static std::string HttpBody(size_t begin, size_t end, bool numbers = false) {
    Json instances = Json::array();
    for (size_t i = begin; i < end; ++i) {
      Json instance = Json::object();
      for (size_t c = 0; c < Test().columns.size(); ++c) {
        const std::string& column = Test().columns[c];
        const std::string& field = Test().rows[i][c];
        if (numbers && column == "income") {
          instance[column] = std::stoll(field);
        } else {
          instance[column] = field;
        }
      }
      instances.push_back(std::move(instance));
    }
    return Json{{"instances", std::move(instances)}}.dump();
  }

  static absl::Status GrpcPredict(PredictionService::Stub* stub, const PredictRequest& request,
                                  PredictResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return FromGrpcStatus(stub->Predict(&context, request, response));
  }

  // Sends `bytes` as a call of /pstrain.PredictionService/<method>.
  static grpc::Status CallRaw(const std::string& address, const std::string& method,
                              const std::string& bytes) {
    grpc::GenericStub stub(CreateChannel(address));
    grpc::ClientContext context;
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer reply;
    grpc::Status status;
    absl::Notification done;
    stub.UnaryCall(&context, "/pstrain.PredictionService/" + method, grpc::StubOptions(),
                   &request, &reply, [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    return status;
  }

  static void ExpectPredictions(const std::vector<float>& got, const std::vector<float>& expected,
                                size_t begin, size_t end) {
    ASSERT_EQ(got.size(), end - begin);
    for (size_t i = begin; i < end; ++i) {
      EXPECT_NEAR(got[i - begin], expected[i], kTolerance) << "row " << i;
    }
  }
  static std::vector<float> HttpPredictions(const Json& reply) {
    std::vector<float> out;
    for (const Json& p : reply.at("predictions")) out.push_back(p.at(0).get<float>());
    return out;
  }

  std::string base_;
};

TEST_F(PredictionServerTest, Predict_GrpcAndHttp_EqualPredictor) {
  std::unique_ptr<PredictionServer> server = StartServer(Options());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->model_name(), "tabular");
  EXPECT_EQ(server->version(), 1);
  const size_t n = Test().rows.size();

  auto stub = PredictionService::NewStub(CreateChannel(server->grpc_address()));
  PredictResponse response;
  ASSERT_TRUE(GrpcPredict(stub.get(), GrpcRequest(0, n), &response).ok());
  EXPECT_EQ(response.model_name(), "tabular");
  EXPECT_EQ(response.version(), 1);
  EXPECT_THAT(response.outputs(), ::testing::ElementsAre("probability"));
  EXPECT_GT(response.latency_us(), 0);
  ExpectPredictions({response.predictions().begin(), response.predictions().end()},
                    shared->expect_v1, 0, n);

  httplib::Client http("127.0.0.1", server->http_port());
  for (bool numbers : {false, true}) {
    httplib::Result got =
        http.Post("/v1/models/tabular:predict", HttpBody(0, n, numbers), "application/json");
    ASSERT_TRUE(got) << httplib::to_string(got.error());
    ASSERT_EQ(got->status, 200) << got->body;
    const Json reply = Json::parse(got->body);
    EXPECT_EQ(reply.at("version"), 1);
    EXPECT_EQ(reply.at("outputs"), Json::array({"probability"}));
    EXPECT_EQ(reply.at("model_name"), "tabular");
    ExpectPredictions(HttpPredictions(reply), shared->expect_v1, 0, n);
  }

  // The status, both ways.
  httplib::Result status = http.Get("/v1/models/tabular");
  ASSERT_TRUE(status);
  ASSERT_EQ(status->status, 200) << status->body;
  const Json s = Json::parse(status->body);
  EXPECT_EQ(s.at("model_version_status").at(0).at("version"), "1");
  EXPECT_EQ(s.at("model_version_status").at(0).at("state"), "AVAILABLE");
  EXPECT_EQ(s.at("model"), "tabular");
  EXPECT_EQ(s.at("latency").at("samples"), 3);
  EXPECT_GT(s.at("latency").at("p50_us").get<int64_t>(), 0);
  grpc::ClientContext context;
  ModelStatusResponse model_status;
  ASSERT_TRUE(stub->ModelStatus(&context, ModelStatusRequest(), &model_status).ok());
  EXPECT_EQ(model_status.version(), 1);
  EXPECT_EQ(model_status.requests(), 3);
  EXPECT_EQ(model_status.versions(0).state(), ModelVersionStatus::AVAILABLE);
  EXPECT_THAT(model_status.columns(),
              ::testing::UnorderedElementsAre("city", "tag", "income", "when"));
  const LatencyStats latency = server->latency();
  EXPECT_EQ(latency.samples, 3);
  EXPECT_LE(latency.p50, latency.p99);
}

TEST_F(PredictionServerTest, Predict_ConcurrentRequestsBothProtocols_MergedIntoBatches) {
  PredictionServerOptions options = Options();
  // A batch closes when it holds all eight one-row requests (or after a long wait).
  options.batching.max_batch_examples = 8;
  options.batching.max_batch_wait = absl::Seconds(1);
  options.batching.threads = 1;
  std::unique_ptr<PredictionServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = PredictionService::NewStub(CreateChannel(server->grpc_address()));
  std::vector<std::vector<float>> got(8);
  std::vector<absl::Status> errors(8);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      if (i % 2 == 0) {
        PredictResponse response;
        errors[i] = GrpcPredict(stub.get(), GrpcRequest(i, i + 1), &response);
        got[i].assign(response.predictions().begin(), response.predictions().end());
      } else {
        httplib::Client http("127.0.0.1", server->http_port());
        httplib::Result r = http.Post("/v1/models/tabular:predict", HttpBody(i, i + 1),
                                      "application/json");
        if (!r || r->status != 200) {
          errors[i] = absl::InternalError(r ? r->body : httplib::to_string(r.error()));
          return;
        }
        got[i] = HttpPredictions(Json::parse(r->body));
      }
    });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(errors[i].ok()) << i << ": " << errors[i];
    ExpectPredictions(got[i], shared->expect_v1, i, i + 1);
  }
  const BatchStats stats = server->batch_stats();
  EXPECT_EQ(stats.requests, 8);
  EXPECT_EQ(stats.examples, 8);
  EXPECT_GE(stats.merged_batches, 1);
  EXPECT_LT(stats.batches, 8);
  EXPECT_GT(stats.largest_batch_requests, 1);
  EXPECT_EQ(stats.alone, 0);
}

TEST_F(PredictionServerTest, HotReload_UnderLoad_EveryRequestSucceeds_ThenVersion2) {
  PredictionServerOptions options = Options();
  options.poll_period = absl::Milliseconds(20);
  std::unique_ptr<PredictionServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = PredictionService::NewStub(CreateChannel(server->grpc_address()));

  absl::Mutex mu;
  int answers = 0, v2_answers = 0;  // guarded by mu
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, out_of_order{0};
  std::vector<std::string> first_failure(4);
  std::vector<std::vector<float>> last_v2(4);
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client http("127.0.0.1", server->http_port());
      const size_t begin = 4 * c, end = begin + 4;
      int64_t last_version = 1;
      while (!stop.load()) {
        int64_t version = 0;
        std::vector<float> predictions;
        if (c % 2 == 0) {
          PredictResponse response;
          absl::Status s = GrpcPredict(stub.get(), GrpcRequest(begin, end), &response);
          if (!s.ok()) {
            if (failures.fetch_add(1) == 0) first_failure[c] = s.ToString();
            continue;
          }
          version = response.version();
          predictions.assign(response.predictions().begin(), response.predictions().end());
        } else {
          httplib::Result r =
              http.Post("/v1/models/tabular:predict", HttpBody(begin, end), "application/json");
          if (!r || r->status != 200) {
            if (failures.fetch_add(1) == 0) {
              first_failure[c] = r ? r->body : httplib::to_string(r.error());
            }
            continue;
          }
          const Json reply = Json::parse(r->body);
          version = reply.at("version").get<int64_t>();
          predictions = HttpPredictions(reply);
        }
        if (version < last_version) out_of_order.fetch_add(1);  // never back to version 1
        last_version = version;
        if (version == 2) last_v2[c] = predictions;
        absl::MutexLock lock(&mu);
        ++answers;
        if (version == 2) ++v2_answers;
      }
    });
  }
  // Let the clients get going on version 1, then export version 2 into the base directory (the
  // export writes it aside and renames it into place, as a real one does).
  {
    absl::MutexLock lock(&mu);
    auto some = [&] { return answers >= 8; };
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&some), absl::Seconds(30)));
  }
  ASSERT_TRUE(ExportSmallTabular(shared->trained, base_ + "/2", /*top_k=*/2).ok());
  EXPECT_TRUE(server->WaitForVersion(2, absl::Seconds(30)));
  {
    absl::MutexLock lock(&mu);
    auto enough = [&] { return v2_answers >= 20; };
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30)));
  }
  stop = true;
  for (std::thread& t : clients) t.join();

  EXPECT_EQ(failures.load(), 0) << first_failure[0] << first_failure[1] << first_failure[2]
                                << first_failure[3];
  EXPECT_EQ(out_of_order.load(), 0);
  EXPECT_EQ(server->version(), 2);
  for (int c = 0; c < 4; ++c) {
    ExpectPredictions(last_v2[c], shared->expect_v2, 4 * c, 4 * c + 4);
  }
  // Every answer is done: version 1 is gone.
  const std::vector<VersionStatus> versions = server->versions();
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[0].version, 2);
  EXPECT_EQ(versions[0].state, VersionState::kAvailable);
  EXPECT_EQ(versions[1].version, 1);
  EXPECT_EQ(versions[1].state, VersionState::kEnd);
  EXPECT_EQ(server->failed_requests(), 0);
}

TEST_F(PredictionServerTest, NewVersions_CorruptSkipped_IncompleteIgnored_GoodOneServed) {
  std::unique_ptr<PredictionServer> server = StartServer(Options());
  ASSERT_NE(server, nullptr);
  // 3: a corrupt manifest. 4: no manifest yet (a copy in progress). 5.tmp-1: not a version.
  fs::copy(shared->v1, base_ + "/3", fs::copy_options::recursive);
  std::ofstream(base_ + "/3/MANIFEST.json", std::ios::trunc) << "{\"manifest\": ";
  fs::create_directories(base_ + "/4/db");
  fs::copy(shared->v2, base_ + "/5.tmp-1", fs::copy_options::recursive);
  EXPECT_EQ(server->CheckForNewVersion(), 1);
  std::vector<VersionStatus> versions = server->versions();
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[0].version, 3);
  EXPECT_EQ(versions[0].state, VersionState::kFailed);
  EXPECT_THAT(versions[0].error,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("MANIFEST.json")));
  // Version 1 still serves.
  auto stub = PredictionService::NewStub(CreateChannel(server->grpc_address()));
  PredictResponse response;
  ASSERT_TRUE(GrpcPredict(stub.get(), GrpcRequest(0, 4), &response).ok());
  EXPECT_EQ(response.version(), 1);
  // Checked again, unchanged: not loaded again.
  EXPECT_EQ(server->CheckForNewVersion(), 1);
  // A good newer one is served; the corrupt one stays skipped.
  fs::rename(base_ + "/5.tmp-1", base_ + "/5");
  EXPECT_EQ(server->CheckForNewVersion(), 5);
  ASSERT_TRUE(GrpcPredict(stub.get(), GrpcRequest(0, 4), &response).ok());
  EXPECT_EQ(response.version(), 5);
  ExpectPredictions({response.predictions().begin(), response.predictions().end()},
                    shared->expect_v2, 0, 4);
}

TEST_F(PredictionServerTest, BadRequests_RightCodes_ServerKeepsServing) {
  PredictionServerOptions options = Options();
  options.limits.max_request_examples = 16;
  options.limits.max_request_bytes = 8 << 10;
  std::unique_ptr<PredictionServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = PredictionService::NewStub(CreateChannel(server->grpc_address()));
  PredictResponse response;

  // gRPC. A column missing: the model's message names it.
  PredictRequest missing = GrpcRequest(0, 2);
  missing.mutable_examples()->set_columns(0, "town");
  EXPECT_THAT(GrpcPredict(stub.get(), missing, &response),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'city'")));
  // A value of the wrong type.
  PredictRequest wrong = GrpcRequest(0, 2);
  wrong.mutable_examples()->mutable_rows(1)->set_fields(2, "lots");
  EXPECT_THAT(GrpcPredict(stub.get(), wrong, &response),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("row 1"), HasSubstr("income"), HasSubstr("lots"))));
  EXPECT_THAT(GrpcPredict(stub.get(), GrpcRequest(0, 17), &response),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("17 examples"), HasSubstr("limit of 16"))));
  PredictRequest big = GrpcRequest(0, 1);
  big.mutable_examples()->mutable_rows(0)->set_fields(0, std::string(9 << 10, 'x'));
  EXPECT_THAT(GrpcPredict(stub.get(), big, &response),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_request_bytes")));
  PredictRequest other = GrpcRequest(0, 1);
  other.set_model_name("flights");
  EXPECT_THAT(GrpcPredict(stub.get(), other, &response),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"flights\"")));
  for (const std::string method : {"Predict", "ModelStatus"}) {
    // A field 1 of wire type 2 whose length runs past the end: no message parses it.
    grpc::Status s = CallRaw(server->grpc_address(), method, std::string("\x0a\x10" "ab", 4));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(s.error_message(), AllOf(HasSubstr(method), HasSubstr("malformed request")));
  }

  // HTTP.
  httplib::Client http("127.0.0.1", server->http_port());
  auto post = [&](const std::string& path, const std::string& body) {
    httplib::Result r = http.Post(path, body, "application/json");
    EXPECT_TRUE(r) << httplib::to_string(r.error());
    return r ? std::make_pair(r->status, Json::parse(r->body, nullptr, /*allow_exceptions=*/false))
             : std::make_pair(0, Json());
  };
  auto [status, reply] = post("/v1/models/tabular:predict",
                              R"({"instances": [{"town": "Oslo", "tag": "t1", "income": 5,
                                                 "when": "2001-03-11"}]})");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(reply["code"], "INVALID_ARGUMENT");
  EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("'city'"));
  std::tie(status, reply) = post("/v1/models/tabular:predict",
                                 R"({"instances": [{"city": "Oslo", "tag": "t1", "income": "lots",
                                                    "when": "2001-03-11"}]})");
  EXPECT_EQ(status, 400);
  EXPECT_THAT(reply["error"].get<std::string>(), AllOf(HasSubstr("income"), HasSubstr("lots")));
  std::tie(status, reply) = post("/v1/models/tabular:predict", HttpBody(0, 17));
  EXPECT_EQ(status, 413) << reply.dump();
  EXPECT_EQ(reply["code"], "RESOURCE_EXHAUSTED");
  std::tie(status, reply) = post("/v1/models/tabular:predict", R"({"instances": [{"city": )");
  EXPECT_EQ(status, 400);
  EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("malformed JSON"));
  std::tie(status, reply) =
      post("/v1/models/tabular:predict", std::string(9 << 10, ' ') + HttpBody(0, 1));
  EXPECT_EQ(status, 413);
  EXPECT_EQ(reply["code"], "RESOURCE_EXHAUSTED");
  std::tie(status, reply) = post("/v1/models/flights:predict", HttpBody(0, 1));
  EXPECT_EQ(status, 404);
  EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("\"flights\""));
  std::tie(status, reply) = post("/v2/anything", "{}");
  EXPECT_EQ(status, 404);
  EXPECT_THAT(reply["error"].get<std::string>(), HasSubstr("no such endpoint"));

  // Still serving, both ways.
  ASSERT_TRUE(GrpcPredict(stub.get(), GrpcRequest(0, 4), &response).ok());
  ExpectPredictions({response.predictions().begin(), response.predictions().end()},
                    shared->expect_v1, 0, 4);
  std::tie(status, reply) = post("/v1/models/tabular:predict", HttpBody(0, 4));
  ASSERT_EQ(status, 200) << reply.dump();
  ExpectPredictions(HttpPredictions(reply), shared->expect_v1, 0, 4);
  EXPECT_EQ(server->requests(), 2);
  EXPECT_EQ(server->failed_requests(), 11);
}

TEST_F(PredictionServerTest, Security_MutualTlsAndToken_BothProtocols) {
  const std::string certs = FreshTempDir("prediction_server_certs");
  const std::string command = absl::StrCat("bash tools/make_certs.sh ", certs, " >/dev/null");
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ofstream(certs + "/token") << "s3cret-token";
  absl::StatusOr<TransportSecurity> security =
      LoadTransportSecurity(certs + "/task.pem", certs + "/task.key", certs + "/ca.pem",
                            certs + "/token");
  ASSERT_TRUE(security.ok()) << security.status();
  SetTransportSecurity(*security);
  std::unique_ptr<PredictionServer> server = StartServer(Options());
  ASSERT_NE(server, nullptr);

  // gRPC with the process's TLS and token.
  auto stub = PredictionService::NewStub(CreateChannel(server->grpc_address()));
  PredictResponse response;
  EXPECT_TRUE(GrpcPredict(stub.get(), GrpcRequest(0, 2), &response).ok());
  // Without the token: refused.
  TransportSecurity no_token = *security;
  no_token.auth_token.clear();
  auto tokenless = PredictionService::NewStub(CreateChannel(server->grpc_address(), no_token));
  EXPECT_THAT(GrpcPredict(tokenless.get(), GrpcRequest(0, 2), &response),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("no auth token")));

  // HTTPS with a client certificate and the token.
  auto https = [&](bool with_token) {
    auto client = std::make_unique<httplib::SSLClient>("127.0.0.1", server->http_port(),
                                                       certs + "/task.pem", certs + "/task.key");
    client->set_ca_cert_path((certs + "/ca.pem").c_str());
    client->enable_server_certificate_verification(true);
    if (with_token) client->set_bearer_token_auth("s3cret-token");
    return client;
  };
  httplib::Result r = https(true)->Post("/v1/models/tabular:predict", HttpBody(0, 2),
                                        "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200) << r->body;
  r = https(false)->Post("/v1/models/tabular:predict", HttpBody(0, 2), "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 401);
  EXPECT_THAT(r->body, HasSubstr("UNAUTHENTICATED"));
  // Plain HTTP, and HTTPS without a client certificate: no answer.
  httplib::Client plain("127.0.0.1", server->http_port());
  EXPECT_FALSE(plain.Post("/v1/models/tabular:predict", HttpBody(0, 2), "application/json"));
  httplib::SSLClient anonymous("127.0.0.1", server->http_port());
  anonymous.set_ca_cert_path((certs + "/ca.pem").c_str());
  anonymous.set_bearer_token_auth("s3cret-token");
  EXPECT_FALSE(anonymous.Post("/v1/models/tabular:predict", HttpBody(0, 2), "application/json"));

  server.reset();
  SetTransportSecurity(TransportSecurity());
}

TEST_F(PredictionServerTest, Start_BadBaseOrOptions_Errors) {
  PredictionServerOptions options = Options();
  options.model_base = base_ + "/nowhere";
  EXPECT_THAT(PredictionServer::Start(options).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nowhere")));
  const std::string empty = FreshTempDir("prediction_server_empty");
  options.model_base = empty;
  EXPECT_THAT(PredictionServer::Start(options).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no complete version")));
  // Only a corrupt version: its error.
  fs::copy(shared->v1, empty + "/7", fs::copy_options::recursive);
  fs::remove_all(empty + "/7/db");
  EXPECT_THAT(PredictionServer::Start(options).status(),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("version 7"),
                                                          HasSubstr("/db"))));
  options = Options();
  options.model_name = "a/b";
  EXPECT_THAT(PredictionServer::Start(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model_name")));
  options = Options();
  options.batching.max_batch_examples = 0;
  EXPECT_THAT(PredictionServer::Start(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_batch_examples")));
}

TEST_F(PredictionServerTest, Metrics_ServedVersionRequestsAndCalls) {
  MetricsRegistry metrics;
  PredictionServerOptions options = Options();
  options.metrics = &metrics;
  std::unique_ptr<PredictionServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = PredictionService::NewStub(CreateChannel(server->grpc_address()));
  PredictResponse response;
  ASSERT_TRUE(GrpcPredict(stub.get(), GrpcRequest(0, 2), &response).ok());
  const std::string text = metrics.Render();
  EXPECT_THAT(text, HasSubstr("pstrain_prediction_model_version 1"));
  EXPECT_THAT(text, HasSubstr("pstrain_prediction_requests_total 1"));
  EXPECT_THAT(text, HasSubstr("pstrain_prediction_grpc_requests_total{method=\"Predict\"} 1"));
  server.reset();
  // The server's collector is gone with it.
  EXPECT_THAT(metrics.Render(), ::testing::Not(HasSubstr("pstrain_prediction_model_version")));
}

}  // namespace
}  // namespace pstrain
