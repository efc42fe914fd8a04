#include "cluster/port_picker.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/splitmix64.h"

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

std::pair<int, int> EphemeralPortRange() {
  int low = 32768, high = 60999;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    int a = 0, b = 0;
    if (std::fscanf(f, "%d %d", &a, &b) == 2 && 0 < a && a <= b && b <= 65535) {
      low = a;
      high = b;
    }
    std::fclose(f);
  }
  return {low, high};
}

PortPicker::PortPicker() {
  // 10000-19999 (cut off where the ephemeral range begins, if lower): above the ports of
  // well-known services, below the ephemeral range on Linux's default, and apart from the block
  // tests/prometheus_test.sh takes from 20000 up. If the ephemeral range covers them, above it.
  const auto [low, high] = EphemeralPortRange();
  constexpr int kFirst = 10000, kLast = 19999;
  if (low > kFirst + 1000) {
    first_ = kFirst;
    last_ = std::min(kLast, low - 1);
  } else {
    first_ = high + 1;
    last_ = 65535;
  }
  random_state_ = static_cast<uint64_t>(::getpid()) * kSplitMix64Gamma ^
                  static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) ^
                  reinterpret_cast<uintptr_t>(this);
}

absl::StatusOr<int> PortPicker::PickUnusedPort() {
  constexpr int kAttempts = 200;
  // Random ports outside the ephemeral range first.
  for (int attempt = 0; first_ <= last_ && attempt < kAttempts; ++attempt) {
    int port = 0;
    {
      absl::MutexLock lock(&mu_);
      const uint64_t x = SplitMix64Next(&random_state_);
      port = first_ + static_cast<int>(x % static_cast<uint64_t>(last_ - first_ + 1));
      if (handed_out_.contains(port)) continue;
    }
    if (!IsPortFree(port)) continue;
    absl::MutexLock lock(&mu_);
    if (!handed_out_.insert(port).second) continue;  // another thread took it meanwhile
    return port;
  }
  // Then ones the kernel picks.
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
      absl::StrCat("no free TCP port found after ", 2 * kAttempts, " attempts"));
}

absl::StatusOr<int> PickUnusedPort() {
  // Process-wide on purpose: "never the same port twice in one process" needs one memory.
  static PortPicker* const picker = new PortPicker();
  return picker->PickUnusedPort();
}

}  // namespace pstrain
