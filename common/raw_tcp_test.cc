#include "common/raw_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
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

// A call with priority travels on the channel's own connection: it is served while every shared
// connection is held up by a handler that has not returned.
TEST(RawTcpTest, PriorityCall_ServedWhileTheSharedConnectionIsBusy) {
  absl::Notification blocked, release;
  RawTcpServerOptions options;
  options.host = "127.0.0.1";
  auto server = RawTcpServer::Start(
      options, [&](int method, const std::vector<absl::string_view>& request,
                   const ReplyAllocator& reply) {
        if (method == 3) {
          blocked.Notify();
          release.WaitForNotification();
        }
        return Handler(0, request, reply);
      });
  ASSERT_TRUE(server.ok()) << server.status();
  RawTcpChannelOptions o;
  o.connections = 1;
  o.priority_connection = true;
  RawTcpChannel channel("127.0.0.1", (*server)->port(), o);
  absl::Notification slow_done;
  channel.Call(3, {"slow"}, [&](absl::Status s, RawTcpReply) {
    EXPECT_TRUE(s.ok()) << s;
    slow_done.Notify();
  });
  blocked.WaitForNotification();
  absl::Notification fast_done;
  Result fast;
  channel.Call(
      0, {"abc"},
      [&](absl::Status s, RawTcpReply reply) {
        fast.status = std::move(s);
        fast.bytes = std::string(reply.bytes);
        fast_done.Notify();
      },
      /*priority=*/true);
  ASSERT_TRUE(fast_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(fast.status.ok()) << fast.status;
  EXPECT_EQ(fast.bytes, "cba");
  EXPECT_FALSE(slow_done.HasBeenNotified());
  release.Notify();
  slow_done.WaitForNotification();
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
        // Refused (the reply naming the limit), or the connection's close seen first.
        EXPECT_TRUE(status.code() == absl::StatusCode::kResourceExhausted ||
                    status.code() == absl::StatusCode::kUnavailable)
            << status;
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

// A handler that streams (ReplyAllocator::Ready): method 0 writes `bytes` bytes (byte i is
// i % 251) in pieces, reporting each one ready; after `pause_at` bytes it waits for `resume`. It
// records whether it was offered streaming, and notifies `returned` when it returns. Method 1
// reports the whole reply ready, then fails. Method 2 blocks until `resume`. Method 3 writes the
// whole reply, calls Complete (recording what it answered in `completed`), and waits for
// `resume` before it returns; method 4 fails after Complete.
struct StreamingHandler {
  size_t bytes = 0;
  size_t pause_at = SIZE_MAX;
  absl::Notification resume;
  absl::Notification returned;
  std::atomic<int> streams{-1};
  std::atomic<int> blocked{0};
  std::atomic<int> completed{-1};

  absl::Status operator()(int method, const std::vector<absl::string_view>&,
                          const ReplyAllocator& reply) {
    if (method == 2) {
      blocked.fetch_add(1);
      resume.WaitForNotification();
      reply(1)[0] = 'b';
      return absl::OkStatus();
    }
    streams = reply.streams() ? 1 : 0;
    char* out = reply(bytes);
    if (method == 3 || method == 4) {
      for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<char>(i % 251);
      completed = reply.Complete() ? 1 : 0;
      if (method == 4) return absl::InternalError("broke its promise");
      resume.WaitForNotification();
      returned.Notify();
      return absl::OkStatus();
    }
    constexpr size_t kPiece = 64 << 10;
    for (size_t at = 0; at < bytes; at += kPiece) {
      const size_t end = std::min(bytes, at + kPiece);
      for (size_t i = at; i < end; ++i) out[i] = static_cast<char>(i % 251);
      reply.Ready(end);
      if (at < pause_at && end >= pause_at) resume.WaitForNotification();
    }
    if (!returned.HasBeenNotified()) returned.Notify();
    if (method == 1) return absl::InternalError("broke its promise");
    return absl::OkStatus();
  }
};

std::unique_ptr<RawTcpServer> ServeWith(StreamingHandler* handler) {
  RawTcpServerOptions options;
  options.host = "127.0.0.1";
  auto server = RawTcpServer::Start(options, [handler](int method,
                                                      const std::vector<absl::string_view>& request,
                                                      const ReplyAllocator& reply) {
    return (*handler)(method, request, reply);
  });
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

bool Patterned(absl::string_view bytes) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != static_cast<char>(i % 251)) return false;
  }
  return true;
}

// A client speaking the protocol by hand, to see bytes as they arrive.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    const char hello[12] = {'P', 'S', 'H', 'I', 1, 0, 0, 0, 0, 0, 0, 0};
    ok_ = ok_ && ::send(fd_, hello, sizeof(hello), MSG_NOSIGNAL) == sizeof(hello);
    std::string answer;
    ok_ = ok_ && Read(12, &answer) && answer.substr(0, 4) == "PSOK" && answer[4] == 0;
  }
  ~RawClient() { ::close(fd_); }
  bool ok() const { return ok_; }
  bool Request(uint32_t method) {
    char frame[24] = {'P', 'S', 'R', 'Q'};
    std::memcpy(frame + 4, &method, 4);
    const uint64_t id = 1, bytes = 0;
    std::memcpy(frame + 8, &id, 8);
    std::memcpy(frame + 16, &bytes, 8);
    return ::send(fd_, frame, sizeof(frame), MSG_NOSIGNAL) == sizeof(frame);
  }
  bool Read(size_t n, std::string* out) {
    out->resize(n);
    for (size_t at = 0; at < n;) {
      const ssize_t got = ::recv(fd_, out->data() + at, n - at, 0);
      if (got <= 0) return false;
      at += static_cast<size_t>(got);
    }
    return true;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// A connected TCP socket to the server (no hello sent), or -1.
int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed `fd` within `wait` (a read sees EOF or an error).
bool ClosedWithin(int fd, absl::Duration wait) {
  timeval tv{static_cast<time_t>(absl::ToInt64Seconds(wait)),
             static_cast<suseconds_t>(absl::ToInt64Microseconds(wait) % 1000000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256];
  for (;;) {
    const ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
    if (got == 0) return true;
    if (got < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

// The hello of a client without a token, and a request's header.
std::string Hello() {
  std::string hello = "PSHI";
  const uint32_t version = 1, token = 0;
  hello.append(reinterpret_cast<const char*>(&version), 4);
  hello.append(reinterpret_cast<const char*>(&token), 4);
  return hello;
}
std::string RequestHeader(uint32_t method, uint64_t id, uint64_t bytes) {
  std::string header = "PSRQ";
  header.append(reinterpret_cast<const char*>(&method), 4);
  header.append(reinterpret_cast<const char*>(&id), 8);
  header.append(reinterpret_cast<const char*>(&bytes), 8);
  return header;
}

std::unique_ptr<RawTcpServer> ServeWith(RawTcpServerOptions options, RawHandler handler) {
  options.host = "127.0.0.1";
  auto server = RawTcpServer::Start(options, std::move(handler));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// A request larger than the account is refused at its header, naming both sizes; its bytes are
// dropped without being held, and the connection goes on.
TEST(RawTcpLimitsTest, RequestLargerThanTheAccount_RefusedNamingSizes_ConnectionGoesOn) {
  MemoryAccount account(1 << 20, "the test's account");
  RawTcpServerOptions options;
  options.account = &account;
  auto server = ServeWith(options, Handler);
  RawTcpChannel channel("127.0.0.1", server->port(), {});
  const std::string big((1 << 20) + 1, 'x');
  Result r = CallAndWait(channel, 0, {big});
  EXPECT_THAT(r.status, StatusIs(absl::StatusCode::kResourceExhausted,
                                 HasSubstr("1048577 bytes can never fit the test's account of "
                                           "1048576")));
  EXPECT_EQ(CallAndWait(channel, 0, {"ok"}).bytes, "ko");
  EXPECT_LE(account.peak(), 1 << 20);
  // The reply's charge goes once the server has written it (the client may read it first).
  for (int i = 0; i < 500 && account.held() != 0; ++i) absl::SleepFor(absl::Milliseconds(2));
  EXPECT_EQ(account.held(), 0);
}

// With the account full, a request's bytes wait unread (its connection waits) until room is given
// back; what the server holds never passes the account plus the replies of admitted requests.
TEST(RawTcpLimitsTest, AccountFull_NextRequestWaitsItsTurn_PeakBounded) {
  MemoryAccount account(3 << 20, "the test's account");
  StreamingHandler handler;
  handler.bytes = 2 << 20;  // method 0's reply
  RawTcpServerOptions options;
  options.account = &account;
  auto server = ServeWith(options, std::ref(handler));
  RawTcpChannelOptions one;
  one.connections = 1;
  RawTcpChannel a("127.0.0.1", server->port(), one), b("127.0.0.1", server->port(), one);
  const std::string two_mib(2 << 20, 'x');
  absl::Notification first_done, second_done;
  // Method 2 blocks in the handler until `resume`, holding its 2 MiB.
  a.Call(2, {two_mib}, [&](absl::Status s, RawTcpReply) {
    EXPECT_TRUE(s.ok()) << s;
    first_done.Notify();
  });
  while (handler.blocked.load() == 0) absl::SleepFor(absl::Milliseconds(1));
  std::atomic<bool> second_returned{false};
  b.Call(0, {two_mib}, [&](absl::Status s, RawTcpReply reply) {
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(reply.bytes.size(), two_mib.size());
    second_returned = true;
    second_done.Notify();
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(second_returned.load()) << "admitted past the account";
  EXPECT_EQ(account.held(), 2 << 20);
  handler.resume.Notify();
  first_done.WaitForNotification();
  second_done.WaitForNotification();
  // At most the second request (2 MiB), its reply (2 MiB) and the first one's (1 byte) at once;
  // never both requests.
  EXPECT_LE(account.peak(), (4 << 20) + 1);
  for (int i = 0; i < 500 && account.held() != 0; ++i) absl::SleepFor(absl::Milliseconds(2));
  EXPECT_EQ(account.held(), 0);
}

TEST(RawTcpLimitsTest, PastMaxConnections_RefusedSayingSo_TheOthersServed) {
  RawTcpServerOptions options;
  options.max_connections = 2;
  auto server = ServeWith(options, Handler);
  RawTcpChannelOptions one;
  one.connections = 1;
  RawTcpChannel a("127.0.0.1", server->port(), one), b("127.0.0.1", server->port(), one);
  ASSERT_EQ(CallAndWait(a, 0, {"a"}).bytes, "a");
  ASSERT_EQ(CallAndWait(b, 0, {"b"}).bytes, "b");
  {
    RawTcpChannel c("127.0.0.1", server->port(), one);
    EXPECT_THAT(CallAndWait(c, 0, {"c"}).status,
                StatusIs(absl::StatusCode::kResourceExhausted,
                         HasSubstr("2 connections are served already")));
  }
  EXPECT_EQ(CallAndWait(a, 0, {"again"}).bytes, "niaga");
}

// Connections that never say hello hold a thread briefly: past max_handshaking the oldest are
// closed, and the rest after handshake_timeout; a real client connecting meanwhile is served.
TEST(RawTcpLimitsTest, SilentConnections_Evicted_RealClientServed) {
  RawTcpServerOptions options;
  options.max_handshaking = 4;
  options.handshake_timeout = absl::Seconds(2);
  auto server = ServeWith(options, Handler);
  std::vector<int> silent;
  for (int i = 0; i < 40; ++i) {
    const int fd = Connect(server->port());
    ASSERT_GE(fd, 0);
    silent.push_back(fd);
  }
  RawTcpChannel channel("127.0.0.1", server->port(), {});
  EXPECT_EQ(CallAndWait(channel, 0, {"real"}).bytes, "laer");
  // The early silent ones were closed to make room; every one of them within the timeout.
  EXPECT_TRUE(ClosedWithin(silent.front(), absl::Seconds(1)));
  EXPECT_TRUE(ClosedWithin(silent.back(), absl::Seconds(5)));
  for (int fd : silent) ::close(fd);
}

// A client that sends a request's header and then stops is closed after request_timeout, and
// the account gets the request's bytes back.
TEST(RawTcpLimitsTest, HeaderThenSilence_ClosedAfterTheTimeout_AccountGivenBack) {
  MemoryAccount account(64 << 20, "the test's account");
  RawTcpServerOptions options;
  options.account = &account;
  options.request_timeout = absl::Milliseconds(300);
  options.min_request_bytes_per_second = 1 << 30;
  auto server = ServeWith(options, Handler);
  const int fd = Connect(server->port());
  ASSERT_GE(fd, 0);
  const std::string hello = Hello();
  ASSERT_EQ(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL), static_cast<ssize_t>(12));
  char accepted[12];
  ASSERT_EQ(::recv(fd, accepted, sizeof(accepted), MSG_WAITALL), 12);
  const std::string header = RequestHeader(0, 1, 32 << 20) + "a few bytes";
  ASSERT_EQ(::send(fd, header.data(), header.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(header.size()));
  while (account.held() == 0) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(account.held(), 32 << 20);
  EXPECT_TRUE(ClosedWithin(fd, absl::Seconds(5)));
  ::close(fd);
  for (int i = 0; i < 500 && account.held() != 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(account.held(), 0);
  // A half-sent header is closed too.
  const int fd2 = Connect(server->port());
  ASSERT_EQ(::send(fd2, hello.data(), hello.size(), MSG_NOSIGNAL), static_cast<ssize_t>(12));
  ASSERT_EQ(::recv(fd2, accepted, sizeof(accepted), MSG_WAITALL), 12);
  ASSERT_EQ(::send(fd2, "PSRQ", 4, MSG_NOSIGNAL), 4);
  EXPECT_TRUE(ClosedWithin(fd2, absl::Seconds(5)));
  ::close(fd2);
}

// A client that trickles (a byte every 40 ms, so every read gets something) is closed by the
// deadline all the same, wherever it trickles: in its hello, in a request's header, or in its
// bytes; the account gets back what the request held.
TEST(RawTcpLimitsTest, Trickle_ClosedByTheDeadline_NotKeptAliveByEachByte) {
  MemoryAccount account(64 << 20, "the test's account");
  RawTcpServerOptions options;
  options.account = &account;
  options.handshake_timeout = absl::Milliseconds(300);
  options.request_timeout = absl::Milliseconds(300);
  options.min_request_bytes_per_second = 1 << 30;
  auto server = ServeWith(options, Handler);
  const std::string hello = Hello();
  const std::string header = RequestHeader(0, 1, 32 << 20);
  enum class Phase { kHello, kHeader, kBytes };
  for (Phase phase : {Phase::kHello, Phase::kHeader, Phase::kBytes}) {
    SCOPED_TRACE(static_cast<int>(phase));
    const int fd = Connect(server->port());
    ASSERT_GE(fd, 0);
    std::string drip;  // sent a byte at a time
    if (phase == Phase::kHello) {
      drip = hello;
    } else {
      ASSERT_EQ(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL), 12);
      char accepted[12];
      ASSERT_EQ(::recv(fd, accepted, sizeof(accepted), MSG_WAITALL), 12);
      if (phase == Phase::kHeader) {
        drip = header;
      } else {
        ASSERT_EQ(::send(fd, header.data(), header.size(), MSG_NOSIGNAL),
                  static_cast<ssize_t>(header.size()));
        drip = std::string(1000, 'x');
      }
    }
    const absl::Time start = absl::Now();
    bool closed = false;
    for (char c : drip) {
      if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) {
        closed = true;  // the server has closed it
        break;
      }
      absl::SleepFor(absl::Milliseconds(40));  // the hello's 12 bytes take 480 ms, past its 300
      if (absl::Now() - start > absl::Seconds(10)) break;
    }
    EXPECT_TRUE(closed || ClosedWithin(fd, absl::Seconds(5)));
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "each byte kept the connection alive";
    ::close(fd);
  }
  for (int i = 0; i < 500 && account.held() != 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(account.held(), 0);
  // The server goes on.
  RawTcpChannel channel("127.0.0.1", server->port(), {});
  EXPECT_EQ(CallAndWait(channel, 0, {"after"}).bytes, "retfa");
}

TEST(RawTcpLimitsTest, OverMaxRequestBytes_RefusedNamingIt_ConnectionClosed) {
  RawTcpServerOptions options;
  options.max_request_bytes = 1000;
  auto server = ServeWith(options, Handler);
  RawTcpChannel channel("127.0.0.1", server->port(), {});
  const std::string big(1001, 'x');
  EXPECT_THAT(CallAndWait(channel, 0, {big}).status,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("1001 bytes is over its max_request_bytes of 1000")));
  EXPECT_EQ(CallAndWait(channel, 0, {"next"}).bytes, "txen");  // on a new connection
}

// A streamed reply's first part reaches the client while the handler still works on the rest,
// and the whole reply arrives exact, through the channel as by hand.
TEST(RawTcpStreamTest, ReadyBytesArriveWhileTheHandlerWorks_WholeReplyExact) {
  StreamingHandler handler;
  handler.bytes = 3 << 20;
  handler.pause_at = 256 << 10;  // what is sent by then fits the sockets' smallest buffers
  auto server = ServeWith(&handler);
  RawClient client(server->port());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(client.Request(0));
  std::string header, first, rest;
  ASSERT_TRUE(client.Read(28, &header));
  EXPECT_EQ(header.substr(0, 4), "PSRP");
  uint64_t bytes = 0;
  std::memcpy(&bytes, header.data() + 20, 8);
  EXPECT_EQ(bytes, handler.bytes);
  ASSERT_TRUE(client.Read(64 << 10, &first));  // before the handler goes on
  EXPECT_FALSE(handler.returned.HasBeenNotified());
  EXPECT_EQ(handler.streams.load(), 1);
  handler.resume.Notify();
  ASSERT_TRUE(client.Read(handler.bytes - first.size(), &rest));
  EXPECT_TRUE(Patterned(first + rest));

  StreamingHandler again;
  again.bytes = (5 << 20) + 12345;  // not a whole number of pieces
  auto server2 = ServeWith(&again);
  RawTcpChannel channel("127.0.0.1", server2->port(), {});
  Result r = CallAndWait(channel, 0, {"x"});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.bytes.size(), again.bytes);
  EXPECT_TRUE(Patterned(r.bytes));
}

// Ready never waits for the client: a reply far bigger than the sockets' buffers, all reported
// ready, lets the handler return while nobody reads; the client then gets every byte.
TEST(RawTcpStreamTest, SlowReader_NeverHoldsUpTheHandler) {
  StreamingHandler handler;
  handler.bytes = 64 << 20;
  auto server = ServeWith(&handler);
  RawClient client(server->port());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(client.Request(0));
  EXPECT_TRUE(handler.returned.WaitForNotificationWithTimeout(absl::Seconds(20)));
  std::string header, body;
  ASSERT_TRUE(client.Read(28, &header));
  ASSERT_TRUE(client.Read(handler.bytes, &body));
  EXPECT_TRUE(Patterned(body));
}

// A handler that fails after streaming part of its reply can't take the bytes back: the
// connection is closed (the call fails kUnavailable), and the next call connects afresh.
TEST(RawTcpStreamTest, FailureAfterReady_ConnectionClosed_NextCallServed) {
  StreamingHandler handler;
  handler.bytes = 1 << 20;
  auto server = ServeWith(&handler);
  RawTcpChannelOptions options;
  options.connections = 1;
  RawTcpChannel channel("127.0.0.1", server->port(), options);
  EXPECT_THAT(CallAndWait(channel, 1, {"x"}).status,
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("broke")));
  Result r = CallAndWait(channel, 0, {"x"});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(Patterned(r.bytes));
}

// A reply said complete arrives whole, as a success, while its handler still works (a push answered
// while it is applied), empty or not; the connection then serves the next call.
TEST(RawTcpStreamTest, CompleteReplyArrivesWhileTheHandlerWorks) {
  for (size_t bytes : {size_t{0}, size_t{100} << 10}) {
    SCOPED_TRACE(bytes);
    StreamingHandler handler;
    handler.bytes = bytes;
    auto server = ServeWith(&handler);
    RawTcpChannelOptions options;
    options.connections = 1;
    RawTcpChannel channel("127.0.0.1", server->port(), options);
    Result r = CallAndWait(channel, 3, {"x"});
    EXPECT_FALSE(handler.returned.HasBeenNotified());
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.bytes.size(), bytes);
    EXPECT_TRUE(Patterned(r.bytes));
    handler.resume.Notify();
    // (Complete's answer is stored once it returns, which may be after the reply arrived.)
    ASSERT_TRUE(handler.returned.WaitForNotificationWithTimeout(absl::Seconds(20)));
    EXPECT_EQ(handler.completed.load(), 1);
    Result next = CallAndWait(channel, 0, {"x"});
    ASSERT_TRUE(next.status.ok()) << next.status;
    EXPECT_EQ(next.bytes.size(), bytes);
  }
}

// Complete is declined while the client's next request is already arriving on the connection
// (it keeps requests in flight: nobody waits for the answer), and the reply goes after the
// handler's return as usual.
TEST(RawTcpStreamTest, CompleteDeclinedWhileTheNextRequestIsQueued) {
  StreamingHandler handler;
  handler.bytes = 10;
  auto server = ServeWith(&handler);
  RawClient client(server->port());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(client.Request(2));  // held in the handler until `resume`
  while (handler.blocked.load() == 0) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(client.Request(3));  // read once the first returns...
  ASSERT_TRUE(client.Request(0));  // ...with this one queued behind it
  absl::SleepFor(absl::Milliseconds(50));
  handler.resume.Notify();
  std::string header, body;
  for (size_t bytes : {size_t{1}, handler.bytes, handler.bytes}) {
    ASSERT_TRUE(client.Read(28, &header));
    EXPECT_EQ(header.substr(0, 4), "PSRP");
    ASSERT_TRUE(client.Read(bytes, &body));
  }
  EXPECT_TRUE(Patterned(body));
  EXPECT_EQ(handler.completed.load(), 0);
}

// A handler that fails after Complete: its reply was already a success; the connection is closed
// (the failure can't be told any more) and the next call connects afresh.
TEST(RawTcpStreamTest, FailureAfterComplete_ConnectionClosed_NextCallServed) {
  StreamingHandler handler;
  handler.bytes = 16;
  auto server = ServeWith(&handler);
  RawTcpChannelOptions options;
  options.connections = 1;
  RawTcpChannel channel("127.0.0.1", server->port(), options);
  Result first = CallAndWait(channel, 4, {"x"});
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_TRUE(Patterned(first.bytes));
  Result r;
  for (int attempt = 0; attempt < 3; ++attempt) {  // a call racing the close may fail once
    r = CallAndWait(channel, 0, {"x"});
    if (r.status.ok()) break;
    EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  }
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(Patterned(r.bytes));
}

// With another request in the handler (cores busy) a reply is not streamed: no Ready offered.
TEST(RawTcpStreamTest, NotOfferedWhileAnotherRequestIsServed) {
  StreamingHandler handler;
  handler.bytes = 1 << 20;
  auto server = ServeWith(&handler);
  RawTcpChannel channel("127.0.0.1", server->port(), {});  // two connections, calls in turn
  absl::Notification blocked_done;
  channel.Call(2, {"x"}, [&](absl::Status, RawTcpReply) { blocked_done.Notify(); });
  while (handler.blocked.load() == 0) absl::SleepFor(absl::Milliseconds(1));
  Result r = CallAndWait(channel, 0, {"x"});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(Patterned(r.bytes));
  EXPECT_EQ(handler.streams.load(), 0);
  handler.resume.Notify();
  blocked_done.WaitForNotification();
  Result alone = CallAndWait(channel, 0, {"x"});
  EXPECT_TRUE(Patterned(alone.bytes));
  EXPECT_EQ(handler.streams.load(), 1);
}

}  // namespace
}  // namespace pstrain
