#include "common/grpc_util.h"

#include <malloc.h>

#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_interceptor.h"
#include "common/logging.h"
#include "common/transport_security.h"

namespace pstrain {

void TuneMallocForLargeMessages() {
  static std::once_flag once;
  std::call_once(once, [] {
    // glibc's largest allowed mmap threshold on 64-bit (a setting above it is refused).
    (void)::mallopt(M_MMAP_THRESHOLD, 32 << 20);
    (void)::mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
}

std::vector<absl::string_view> SliceViews(const std::vector<grpc::Slice>& slices) {
  std::vector<absl::string_view> views;
  views.reserve(slices.size());
  for (const grpc::Slice& s : slices) {
    views.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return views;
}

namespace {

// Adds the shared token to every call's initial metadata.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* value) : value_(value) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({std::string(kAuthMetadataKey), *value_});
    }
    methods->Proceed();
  }

 private:
  const std::string* value_;
};

class TokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string token) : value_("Bearer " + token) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new TokenInterceptor(&value_);
  }

 private:
  const std::string value_;  // lives as long as the channel, which owns the factory
};

}  // namespace

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address) {
  return CreateChannel(address, *CurrentTransportSecurity());
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const TransportSecurity& security) {
  TuneMallocForLargeMessages();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Each channel gets its own connection, so the coordinator's and a closure's traffic don't queue
  // behind each other on one TCP stream.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Keepalive while calls are open: a peer that vanishes without closing its connections (a cut
  // cable, a frozen machine) fails the calls within ~15 s instead of never.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!security.auth_token.empty()) {
    interceptors.push_back(std::make_unique<TokenInterceptorFactory>(security.auth_token));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, ChannelCredentialsFor(security), args, std::move(interceptors));
}

absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" is not host:port (", why, ")"));
  };
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return bad("no ':port'");
  std::string h = address.substr(0, colon);
  std::string p = address.substr(colon + 1);
  if (h.empty()) return bad("empty host");
  if (absl::StartsWith(h, "[") != absl::EndsWith(h, "]")) return bad("unbalanced brackets");
  if (!absl::StartsWith(h, "[") && h.find(':') != std::string::npos) {
    return bad("IPv6 hosts need brackets, e.g. [::1]:2222");
  }
  for (char c : h) {
    if (c == ' ' || c == '/' || c == '\t') return bad("bad character in host");
  }
  int value = 0;
  if (p.empty() || !absl::SimpleAtoi(p, &value) || p[0] == '+' || p[0] == '-') {
    return bad("port is not a number");
  }
  if (value < 0 || value > 65535) return bad("port out of range 0..65535");
  if (host) *host = h;
  if (port) *port = value;
  return absl::OkStatus();
}

absl::StatusOr<StartedServer> StartGrpcServer(const std::string& address,
                                              const std::vector<grpc::Service*>& services) {
  std::string host;
  int requested_port = 0;
  absl::Status valid = SplitHostPort(address, &host, &requested_port);
  if (!valid.ok()) return valid;

  TuneMallocForLargeMessages();
  grpc::ServerBuilder builder;
  StartedServer started;
  const std::shared_ptr<const TransportSecurity> security = CurrentTransportSecurity();
  builder.AddListeningPort(address, ServerCredentialsFor(*security), &started.port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // Accept our clients' keepalive pings (see CreateChannel).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  for (grpc::Service* service : services) builder.RegisterService(service);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    if (started.server) started.server->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("could not listen on ", address, " (port in use or host not local?)"));
  }
  started.address = absl::StrCat(host, ":", started.port);
  if (!security->tls() && security->auth_token.empty() && !IsLoopbackHost(host)) {
    LOG(WARNING) << "listening on " << started.address
                 << " beyond loopback with neither TLS nor a token: anyone who can reach this "
                    "port can read and change the model (see docs/security.md: --tls_cert, "
                    "--tls_key, --tls_ca, --auth_token_file)";
  }
  return started;
}

}  // namespace pstrain
