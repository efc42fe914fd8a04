#include "cluster/port_picker.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(PortPickerTest, PickUnusedPort_ManyCalls_DistinctAndBindable) {
  std::set<int> seen;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<int> port = PickUnusedPort();
    ASSERT_TRUE(port.ok()) << port.status();
    EXPECT_GT(*port, 0);
    EXPECT_LE(*port, 65535);
    EXPECT_TRUE(seen.insert(*port).second) << "port " << *port << " returned twice";

    // Bind it for real, as a server would.
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr;
    std::memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(*port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << "port " << *port << ": " << std::strerror(errno);
    ::close(fd);
  }
}

// Ports come from outside the kernel's ephemeral range, so that no socket bound to port 0 and no
// outgoing connection takes one between its pick and its server's bind.
TEST(PortPickerTest, PickUnusedPort_OutsideTheEphemeralRange) {
  const auto [low, high] = EphemeralPortRange();
  PortPicker picker;
  EXPECT_TRUE(picker.last() < low || picker.first() > high)
      << picker.first() << "-" << picker.last() << " against " << low << "-" << high;
  for (int i = 0; i < 50; ++i) {
    absl::StatusOr<int> port = picker.PickUnusedPort();
    ASSERT_TRUE(port.ok()) << port.status();
    EXPECT_TRUE(*port < low || *port > high) << "port " << *port;
    EXPECT_GE(*port, 1024);
  }
}

TEST(PortPickerTest, PickUnusedPort_ConcurrentCallers_NeverShareAPort) {
  PortPicker picker;
  absl::Mutex mu;
  std::vector<int> ports;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        absl::StatusOr<int> port = picker.PickUnusedPort();
        ASSERT_TRUE(port.ok()) << port.status();
        absl::MutexLock lock(&mu);
        ports.push_back(*port);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<int> distinct(ports.begin(), ports.end());
  EXPECT_EQ(distinct.size(), ports.size());
}

TEST(PortPickerTest, IsPortFree_PortHeldByListener_False) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int port = ntohs(addr.sin_port);
  EXPECT_FALSE(IsPortFree(port));
  ::close(fd);
  EXPECT_FALSE(IsPortFree(/*port=*/0));
  EXPECT_FALSE(IsPortFree(/*port=*/70000));
}

}  // namespace
}  // namespace pstrain
