#include "common/raw_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// Method 0 echoes the request reversed; 1 fails with INVALID_ARGUMENT naming the size; 2 sleeps.
absl::Status Handler(int method, const std::vector<absl::string_view>& request,
                     const ReplyAllocator& reply) {
  std::string all;
  for (absl::string_view p : request) all.append(p.data(), p.size());
  if (method == 1) return absl::InvalidArgumentError(absl::StrCat("bad request of ", all.size()));
  if (method == 2) absl::SleepFor(absl::Milliseconds(500));
  char* out = reply(all.size());
  std::copy(all.rbegin(), all.rend(), out);
  return absl::OkStatus();
}

struct Result {
  absl::Status status;
  std::string bytes;
};

Result CallAndWait(RawTcpChannel& channel, int method, const std::vector<absl::string_view>& req) {
  absl::Notification done;
  Result r;
  channel.Call(method, req, [&](absl::Status s, RawTcpReply reply) {
    r.status = std::move(s);
    r.bytes = std::string(reply.bytes);
    done.Notify();
  });
  done.WaitForNotification();
  return r;
}

std::unique_ptr<RawTcpServer> Serve(const std::string& token = "") {
  RawTcpServerOptions options;
  options.host = "127.0.0.1";
  options.token = token;
  options.max_request_bytes = 128 << 20;
  auto server = RawTcpServer::Start(options, Handler);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(RawTcpTest, Call_PiecesGatheredAndReplyReturned_ErrorsPassThrough) {
  auto server = Serve();
  RawTcpChannel channel("127.0.0.1", server->port(), {});
  Result r = CallAndWait(channel, 0, {"ab", "", "cde"});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.bytes, "edcba");
  r = CallAndWait(channel, 1, {"xyz"});
  EXPECT_THAT(r.status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("of 3")));
  // The connection goes on after an error.
  EXPECT_EQ(CallAndWait(channel, 0, {"12"}).bytes, "21");
}

TEST(RawTcpTest, ManyInFlight_LargeMessages_EachGetsItsOwnReply) {
  auto server = Serve();
  RawTcpChannel channel("127.0.0.1", server->port(), {});
  std::string big(48 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  std::vector<std::string> small(64);
  std::atomic<int> ok{0};
  absl::Notification all;
  std::atomic<int> left{65};
  auto finish = [&] {
    if (left.fetch_sub(1) == 1) all.Notify();
  };
  channel.Call(0, {big}, [&](absl::Status s, RawTcpReply reply) {
    if (s.ok() && reply.bytes.size() == big.size() &&
        std::equal(big.rbegin(), big.rend(), reply.bytes.begin())) {
      ++ok;
    }
    finish();
  });
  for (int i = 0; i < 64; ++i) {
    small[i] = absl::StrCat("request ", i);
    channel.Call(0, {small[i]}, [&, i](absl::Status s, RawTcpReply reply) {
      std::string want(small[i].rbegin(), small[i].rend());
      if (s.ok() && reply.bytes == want) ++ok;
      finish();
    });
  }
  all.WaitForNotification();
  EXPECT_EQ(ok.load(), 65);
}

TEST(RawTcpTest, Token_WrongOneRefusedUnauthenticated_RightOneServed) {
  auto server = Serve("s3cret");
  RawTcpChannelOptions wrong;
  wrong.token = "guess";
  RawTcpChannel bad("127.0.0.1", server->port(), wrong);
  EXPECT_THAT(CallAndWait(bad, 0, {"x"}).status,
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("token")));
  RawTcpChannel none("127.0.0.1", server->port(), {});
  EXPECT_THAT(CallAndWait(none, 0, {"x"}).status, StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("token")));
  RawTcpChannelOptions right;
  right.token = "s3cret";
  RawTcpChannel good("127.0.0.1", server->port(), right);
  EXPECT_EQ(CallAndWait(good, 0, {"ok"}).bytes, "ko");
}

TEST(RawTcpTest, ServerGone_Unavailable_ThenReconnectsWhenBack) {
  auto server = Serve();
  const int port = server->port();
  RawTcpChannelOptions options;
  options.name = "ps:7 (data plane)";
  RawTcpChannel channel("127.0.0.1", port, options);
  ASSERT_TRUE(CallAndWait(channel, 0, {"a"}).status.ok());
  server.reset();
  EXPECT_THAT(CallAndWait(channel, 0, {"a"}).status,
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("ps:7")));
  RawTcpServerOptions again;
  again.host = "127.0.0.1";
  again.port = port;
  auto back = RawTcpServer::Start(again, Handler);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(CallAndWait(channel, 0, {"ab"}).bytes, "ba");
}

TEST(RawTcpTest, Timeout_DeadlineExceeded_LateReplyDropped) {
  auto server = Serve();
  RawTcpChannelOptions options;
  options.timeout = absl::Milliseconds(150);
  RawTcpChannel channel("127.0.0.1", server->port(), options);
  EXPECT_THAT(CallAndWait(channel, 2, {"slow"}).status,
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("no reply within")));
  absl::SleepFor(absl::Milliseconds(500));  // the late reply arrives and is dropped
  EXPECT_EQ(CallAndWait(channel, 0, {"xy"}).bytes, "yx");
}

// done may free the request: it never runs while the request is still being written, even when
// the connection breaks mid-write (the server closes on a request over its limit after reading
// the header; its reader then fails the call while the writer is still in sendmsg) or the reply
// arrives while sendmsg is returning. A done under the writer frees memory it still sends from
// (ASan), and runs on the reader thread before Call returns.
TEST(RawTcpTest, DoneFreesRequest_NeverBeforeItsWriterLetsGo) {
  RawTcpServerOptions limited;
  limited.host = "127.0.0.1";
  limited.max_request_bytes = 1 << 20;
  auto server = RawTcpServer::Start(limited, Handler);
  ASSERT_TRUE(server.ok()) << server.status();
  RawTcpChannel channel("127.0.0.1", (*server)->port(), {});
  for (int round = 0; round < 5; ++round) {
    for (size_t bytes : {size_t{64} << 20, size_t{512} << 10}) {
      auto* request = new std::string(bytes, 'r');
      std::atomic<bool> call_returned{false};
      std::atomic<int> calls{0};
      std::atomic<bool> ran_after_return{false};
      absl::Notification done;
      absl::Status status;
      channel.Call(0, {*request}, [&, request](absl::Status s, RawTcpReply) {
        delete request;
        status = std::move(s);
        ran_after_return = call_returned.load();
        calls.fetch_add(1);
        done.Notify();
      });
      call_returned = true;
      ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
      if (bytes > (size_t{1} << 20)) {
        EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
        EXPECT_FALSE(ran_after_return) << "done ran before the writer let go, round " << round;
      } else {
        EXPECT_TRUE(status.ok()) << status;
      }
      absl::SleepFor(absl::Milliseconds(20));  // a second run would show here
      EXPECT_EQ(calls.load(), 1);
    }
  }
}

TEST(RawTcpTest, MalformedFrame_ConnectionClosed_ServerGoesOn) {
  auto server = Serve();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server->port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(100, 'z');
  ASSERT_EQ(::send(fd, garbage.data(), garbage.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(garbage.size()));
  char buf[16];
  EXPECT_LE(::recv(fd, buf, sizeof(buf), 0), 0);  // closed on us
  ::close(fd);
  RawTcpChannel channel("127.0.0.1", server->port(), {});
  EXPECT_EQ(CallAndWait(channel, 0, {"still"}).bytes, "llits");
}

}  // namespace
}  // namespace pstrain
