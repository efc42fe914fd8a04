// The transport-security flags every binary takes (ps, worker, the coordinator): --tls_cert,
// --tls_key, --tls_ca (mutual TLS) and --auth_token_file (a shared token). See
// common/transport_security.h and docs/security.md.
#ifndef PSTRAIN_CLUSTER_SECURITY_FLAGS_H_
#define PSTRAIN_CLUSTER_SECURITY_FLAGS_H_

#include "absl/status/status.h"

namespace pstrain {

// Reads the files the flags name and makes them the process's transport security. Call after the
// flags are parsed and before any channel or server is made. Errors: kInvalidArgument naming the
// flag (LoadTransportSecurity).
absl::Status ApplySecurityFlags();

}  // namespace pstrain

#endif  // PSTRAIN_CLUSTER_SECURITY_FLAGS_H_
