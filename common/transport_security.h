// How tasks authenticate each other: mutual TLS (every side presents a certificate signed by the
// job's CA and checks the other's), a shared token sent with every call, both, or neither.
//
// One setting per process (SetTransportSecurity, from the binaries' flags): every channel
// (CreateChannel) and server (StartGrpcServer) of common/grpc_util.h uses it. With TLS, a peer
// that speaks plaintext or presents a certificate from another CA fails the handshake; with a
// token, a call without it (or with another) is answered UNAUTHENTICATED before any handler runs
// (common/raw_service.h).
#ifndef PSTRAIN_COMMON_TRANSPORT_SECURITY_H_
#define PSTRAIN_COMMON_TRANSPORT_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"

namespace pstrain {

struct TransportSecurity {
  // PEM text: this task's certificate (chain), its private key, and the CA that signs every task's
  // certificate. All three or none.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  // The shared token; empty: none.
  std::string auth_token;

  bool tls() const { return !tls_ca.empty(); }
  // "mutual TLS and a token", "mutual TLS", "a token", "plaintext, no token"
  std::string Describe() const;
};

// Reads the files the flags name (an empty path: not given). Errors: kInvalidArgument naming the
// flag when only some of the TLS files are given, a file can't be read, isn't PEM, or the token is
// empty or has characters call metadata can't carry (printable ASCII without spaces).
absl::StatusOr<TransportSecurity> LoadTransportSecurity(const std::string& tls_cert_path,
                                                        const std::string& tls_key_path,
                                                        const std::string& tls_ca_path,
                                                        const std::string& auth_token_path);

// The process's setting, used by every channel and server made after the call. Default: neither.
void SetTransportSecurity(TransportSecurity security);
std::shared_ptr<const TransportSecurity> CurrentTransportSecurity();

// Credentials for `security`: SSL with our certificate for mutual TLS, else insecure.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TransportSecurity& security);
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TransportSecurity& security);

// The metadata key the token travels in ("authorization", value "Bearer <token>").
inline constexpr absl::string_view kAuthMetadataKey = "authorization";

// Checks a call against the process's token. Errors: kUnauthenticated naming `method` when a token
// is set and the call carries none or another.
absl::Status CheckCallToken(const grpc::CallbackServerContext& context, absl::string_view method);

// Whether `host` (of "host:port") is a loopback name or address: "localhost", 127.x.y.z, [::1].
bool IsLoopbackHost(absl::string_view host);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TRANSPORT_SECURITY_H_
