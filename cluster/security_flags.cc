#include "cluster/security_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/transport_security.h"

ABSL_FLAG(std::string, tls_cert, "",
          "Mutual TLS: this task's certificate (PEM), signed by --tls_ca. With --tls_key and "
          "--tls_ca; then every connection is TLS and both sides check the other's certificate.");
ABSL_FLAG(std::string, tls_key, "", "Mutual TLS: the private key (PEM) of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "Mutual TLS: the CA certificate (PEM) every task's certificate is signed by; a peer "
          "without one, or with one from another CA, is refused.");
ABSL_FLAG(std::string, auth_token_file, "",
          "A file holding a shared token (printable ASCII, no spaces): sent with every call and "
          "required of every call; a call without it is refused with UNAUTHENTICATED.");

namespace pstrain {

absl::Status ApplySecurityFlags() {
  ASSIGN_OR_RETURN(TransportSecurity security,
                   LoadTransportSecurity(absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                                         absl::GetFlag(FLAGS_tls_ca),
                                         absl::GetFlag(FLAGS_auth_token_file)));
  LOG(INFO) << "transport security: " << security.Describe();
  SetTransportSecurity(std::move(security));
  return absl::OkStatus();
}

}  // namespace pstrain
