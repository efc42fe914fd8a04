#include "cluster/port_picker.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

// Binds a TCP socket of `family` to `port` (0 = let the kernel choose); returns the bound port, 0 if
// the family is not supported here, or -1 if the port is taken.
int BindTcp(int family, int port) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return (errno == EAFNOSUPPORT) ? 0 : -1;
  int one = 1;
  // Like portpicker: SO_REUSEADDR so that a port in TIME_WAIT still counts as usable by a server.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int result = -1;
  if (family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    sockaddr_in6 addr;
    std::memset(&addr, 0, sizeof(addr));
    addr.sin6_family = AF_INET6;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    addr.sin6_addr = in6addr_any;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      socklen_t len = sizeof(addr);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
        result = ntohs(addr.sin6_port);
      }
    } else if (errno == EADDRNOTAVAIL) {
      result = 0;  // no IPv6 on this machine
    }
  } else {
    sockaddr_in addr;
    std::memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      socklen_t len = sizeof(addr);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
        result = ntohs(addr.sin_port);
      }
    }
  }
  ::close(fd);
  return result;
}

}  // namespace

bool IsPortFree(int port) {
  if (port <= 0 || port > 65535) return false;
  if (BindTcp(AF_INET, port) != port) return false;
  int v6 = BindTcp(AF_INET6, port);
  return v6 == 0 || v6 == port;
}

absl::StatusOr<int> PortPicker::PickUnusedPort() {
  constexpr int kAttempts = 200;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    int port = BindTcp(AF_INET, 0);  // the kernel picks one from its ephemeral range
    if (port <= 0) continue;
    {
      absl::MutexLock lock(&mu_);
      if (handed_out_.contains(port)) continue;
    }
    if (!IsPortFree(port)) continue;
    absl::MutexLock lock(&mu_);
    if (!handed_out_.insert(port).second) continue;  // another thread took it meanwhile
    return port;
  }
  return absl::UnavailableError(
      absl::StrCat("no free TCP port found after ", kAttempts, " attempts"));
}

absl::StatusOr<int> PickUnusedPort() {
  // Process-wide on purpose: "never the same port twice in one process" needs one memory.
  static PortPicker* const picker = new PortPicker();
  return picker->PickUnusedPort();
}

}  // namespace pstrain
