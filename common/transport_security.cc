#include "common/transport_security.h"

#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pstrain {
namespace {

std::mutex& SecurityMutex() {
  static std::mutex mu;
  return mu;
}

std::shared_ptr<const TransportSecurity>& SecuritySlot() {
  static auto* slot =
      new std::shared_ptr<const TransportSecurity>(std::make_shared<TransportSecurity>());
  return *slot;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": can't read \"", path, "\""));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": \"", path, "\" is over 1 MiB; not a certificate, key or token"));
  }
  return text.str();
}

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(flag, path);
  if (!text.ok()) return text.status();
  if (!absl::StrContains(*text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": \"", path, "\" is not PEM (no -----BEGIN line)"));
  }
  return text;
}

// Equal without an early exit on the first differing byte: the time taken says nothing about how
// much of a guessed token was right.
bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

std::string TransportSecurity::Describe() const {
  if (tls() && !auth_token.empty()) return "mutual TLS and a token";
  if (tls()) return "mutual TLS";
  if (!auth_token.empty()) return "a token";
  return "plaintext, no token";
}

absl::StatusOr<TransportSecurity> LoadTransportSecurity(const std::string& tls_cert_path,
                                                        const std::string& tls_key_path,
                                                        const std::string& tls_ca_path,
                                                        const std::string& auth_token_path) {
  TransportSecurity security;
  const int tls_given =
      !tls_cert_path.empty() + !tls_key_path.empty() + !tls_ca_path.empty();
  if (tls_given != 0 && tls_given != 3) {
    std::string missing;
    if (tls_cert_path.empty()) absl::StrAppend(&missing, " --tls_cert");
    if (tls_key_path.empty()) absl::StrAppend(&missing, " --tls_key");
    if (tls_ca_path.empty()) absl::StrAppend(&missing, " --tls_ca");
    return absl::InvalidArgumentError(absl::StrCat(
        "mutual TLS needs --tls_cert, --tls_key and --tls_ca together; missing:", missing));
  }
  if (tls_given == 3) {
    absl::StatusOr<std::string> cert = ReadPem("tls_cert", tls_cert_path);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem("tls_key", tls_key_path);
    if (!key.ok()) return key.status();
    absl::StatusOr<std::string> ca = ReadPem("tls_ca", tls_ca_path);
    if (!ca.ok()) return ca.status();
    security.tls_cert = *std::move(cert);
    security.tls_key = *std::move(key);
    security.tls_ca = *std::move(ca);
  }
  if (!auth_token_path.empty()) {
    absl::StatusOr<std::string> token = ReadSmallFile("auth_token_file", auth_token_path);
    if (!token.ok()) return token.status();
    const absl::string_view trimmed = absl::StripAsciiWhitespace(*token);
    if (trimmed.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_token_file: \"", auth_token_path, "\" is empty"));
    }
    for (char c : trimmed) {
      if (c <= ' ' || c > '~') {
        return absl::InvalidArgumentError(absl::StrCat(
            "--auth_token_file: \"", auth_token_path,
            "\": the token must be printable ASCII without spaces (it travels as call metadata)"));
      }
    }
    security.auth_token = std::string(trimmed);
  }
  return security;
}

void SetTransportSecurity(TransportSecurity security) {
  auto value = std::make_shared<const TransportSecurity>(std::move(security));
  std::lock_guard<std::mutex> lock(SecurityMutex());
  SecuritySlot() = std::move(value);
}

std::shared_ptr<const TransportSecurity> CurrentTransportSecurity() {
  std::lock_guard<std::mutex> lock(SecurityMutex());
  return SecuritySlot();
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TransportSecurity& security) {
  if (!security.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = security.tls_ca;
  options.pem_private_key = security.tls_key;
  options.pem_cert_chain = security.tls_cert;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TransportSecurity& security) {
  if (!security.tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = security.tls_ca;
  options.pem_key_cert_pairs.push_back({security.tls_key, security.tls_cert});
  return grpc::SslServerCredentials(options);
}

absl::Status CheckCallToken(const grpc::CallbackServerContext& context, absl::string_view method) {
  const std::shared_ptr<const TransportSecurity> security = CurrentTransportSecurity();
  if (security->auth_token.empty()) return absl::OkStatus();
  const std::string expected = absl::StrCat("Bearer ", security->auth_token);
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(grpc::string_ref(kAuthMetadataKey.data(), kAuthMetadataKey.size()));
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        absl::StrCat(method, ": no auth token (this server requires --auth_token_file's token)"));
  }
  if (!ConstantTimeEqual(absl::string_view(it->second.data(), it->second.size()), expected)) {
    return absl::UnauthenticatedError(absl::StrCat(method, ": wrong auth token"));
  }
  return absl::OkStatus();
}

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "[::1]" || host == "::1") return true;
  std::vector<absl::string_view> octets = absl::StrSplit(host, '.');
  int first = 0;
  return octets.size() == 4 && absl::SimpleAtoi(octets[0], &first) && first == 127;
}

}  // namespace pstrain
