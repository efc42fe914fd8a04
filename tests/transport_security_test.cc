// Transport security end to end: a whole training job over mutual TLS (every channel and server of
// the in-process cluster with certificates from tools/make_certs.sh), and what is refused: a
// plaintext client, a client that trusts another CA, a client whose certificate another CA signed,
// and calls without the shared token or with a wrong one.
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_util.h"
#include "common/test_util.h"
#include "common/transport_security.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "models/tabular/tabular_model.h"
#include "ps/ps_server.h"
#include "tests/train_in_process.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// A CA and a task certificate in `dir`, made by the script users run.
TransportSecurity MakeCerts(const std::string& dir) {
  const std::string command = absl::StrCat("bash tools/make_certs.sh ", dir, " >/dev/null");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(
      dir + "/task.pem", dir + "/task.key", dir + "/ca.pem", /*auth_token_path=*/"");
  EXPECT_TRUE(security.ok()) << security.status();
  return security.ok() ? *security : TransportSecurity();
}

// A Health call to a ps at `address` over a channel with `security`.
grpc::Status Health(const std::string& address, const TransportSecurity& security) {
  grpc::GenericStub stub(CreateChannel(address, security));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty;
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer reply;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/pstrain.PsService/Health", grpc::StubOptions(), &request, &reply,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  return status;
}

class TransportSecurityTest : public ::testing::Test {
 protected:
  void TearDown() override { SetTransportSecurity(TransportSecurity()); }
};

TEST_F(TransportSecurityTest, TrainingJobOverMutualTls) {
  const std::string dir = FreshTempDir("mtls_job");
  SetTransportSecurity(MakeCerts(dir + "/certs"));
  // A small separable table: y = (x > 0.5).
  std::mt19937 rng(5);
  std::ofstream csv(dir + "/t.csv");
  csv << "x,noise,y\n";
  for (int i = 0; i < 1500; ++i) {
    const double x = (rng() % 1000) / 1000.0;
    csv << x << "," << rng() % 7 << "," << (x > 0.5 ? 1 : 0) << "\n";
  }
  csv.close();
  std::ofstream(dir + "/spec.json")
      << R"({"label": {"column": "y"}, "features": [{"name": "x", "type": "numeric", )"
         R"("column": "x"}, {"name": "noise", "column": "noise"}]})";
  ModelOptions o;
  o.data = dir + "/t.csv";
  o.epochs = 3;
  o.batch_size = 32;
  o.extra["feature_spec"] = dir + "/spec.json";
  absl::StatusOr<std::unique_ptr<Model>> model = CreateTabular(o);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<TrainResult> result = TrainInProcess(
      *TrainingRegistry(std::make_shared<ReplicaGroups>()), /*workers=*/2, /*ps=*/2, model->get());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->metrics.values.at("test_auc"), 0.95);
}

TEST_F(TransportSecurityTest, PlaintextAndOtherCasAreRefused) {
  const std::string dir = FreshTempDir("mtls_refused");
  const TransportSecurity ours = MakeCerts(dir + "/a");
  const TransportSecurity theirs = MakeCerts(dir + "/b");
  SetTransportSecurity(ours);
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(PsServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();

  EXPECT_TRUE(Health(address, ours).ok());
  // Plaintext: the handshake never completes.
  EXPECT_EQ(Health(address, TransportSecurity()).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A client trusting another CA refuses the server's certificate.
  EXPECT_EQ(Health(address, theirs).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A client presenting a certificate another CA signed is refused by the server.
  TransportSecurity forged = theirs;
  forged.tls_ca = ours.tls_ca;
  EXPECT_EQ(Health(address, forged).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TransportSecurityTest, CallsWithoutTheTokenAreUnauthenticated) {
  TransportSecurity with_token;
  with_token.auth_token = "s3cret-token";
  SetTransportSecurity(with_token);
  absl::StatusOr<std::unique_ptr<PsServer>> server = PsServer::Start(PsServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();

  EXPECT_TRUE(Health(address, with_token).ok());
  grpc::Status none = Health(address, TransportSecurity());
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(none.error_message(), HasSubstr("Health"));
  TransportSecurity wrong;
  wrong.auth_token = "s3cret-tokeN";
  EXPECT_EQ(Health(address, wrong).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST(LoadTransportSecurityTest, BadFlagsNameTheProblem) {
  const std::string dir = FreshTempDir("tls_flags");
  std::ofstream(dir + "/not_pem") << "hello";
  std::ofstream(dir + "/token") << "  two words \n";
  std::ofstream(dir + "/empty") << "\n";
  auto message = [](absl::StatusOr<TransportSecurity> s) {
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.status().message());
  };
  EXPECT_THAT(message(LoadTransportSecurity(dir + "/x.pem", "", "", "")), HasSubstr("--tls_key"));
  EXPECT_THAT(message(LoadTransportSecurity(dir + "/not_pem", dir + "/not_pem", dir + "/not_pem",
                                            "")),
              HasSubstr("not PEM"));
  EXPECT_THAT(message(LoadTransportSecurity("", "", "", dir + "/missing")),
              HasSubstr("can't read"));
  EXPECT_THAT(message(LoadTransportSecurity("", "", "", dir + "/token")),
              HasSubstr("without spaces"));
  EXPECT_THAT(message(LoadTransportSecurity("", "", "", dir + "/empty")), HasSubstr("empty"));
  absl::StatusOr<TransportSecurity> none = LoadTransportSecurity("", "", "", "");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->Describe(), "plaintext, no token");
}

}  // namespace
}  // namespace pstrain
