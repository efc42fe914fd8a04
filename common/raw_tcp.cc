#include "common/raw_tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <set>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace pstrain {
namespace {

constexpr char kHello[4] = {'P', 'S', 'H', 'I'};
constexpr char kAccepted[4] = {'P', 'S', 'O', 'K'};
constexpr char kRequest[4] = {'P', 'S', 'R', 'Q'};
constexpr char kReply[4] = {'P', 'S', 'R', 'P'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxToken = 4096;
constexpr uint32_t kMaxMessage = 1 << 20;
constexpr size_t kRequestHeader = 4 + 4 + 8 + 8;
constexpr size_t kReplyHeader = 4 + 4 + 8 + 4 + 8;
// A streamed reply (ReplyAllocator::Ready) is written in pieces of at least this many bytes.
constexpr size_t kMinStreamBytes = 32 << 10;

template <typename T>
void Put(char* at, T v) {
  std::memcpy(at, &v, sizeof(T));  // little-endian hosts (x86-64, arm64)
}
template <typename T>
T Get(const char* at) {
  T v;
  std::memcpy(&v, at, sizeof(T));
  return v;
}

// Reads exactly n bytes; false at EOF or on an error.
bool ReadFull(int fd, char* out, size_t n) {
  while (n > 0) {
    const ssize_t got = ::recv(fd, out, n, 0);
    if (got > 0) {
      out += got;
      n -= static_cast<size_t>(got);
    } else if (got < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

// Reads exactly n bytes by `deadline`; false at EOF, on an error, or when the deadline passes
// first (*timed_out is then set). The socket has a receive timeout (SO_RCVTIMEO: a served
// connection's tick), so each recv blocks in the kernel for the data, one call per piece that
// arrives, and wakes at least every tick to look at the deadline.
bool ReadFullBy(int fd, char* out, size_t n, absl::Time deadline, bool* timed_out) {
  *timed_out = false;
  while (n > 0) {
    const ssize_t got = ::recv(fd, out, n, 0);
    if (got > 0) {
      out += got;
      n -= static_cast<size_t>(got);
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
      return false;
    }
    if (n > 0 && absl::Now() >= deadline) {
      *timed_out = true;
      return false;
    }
  }
  return true;
}

// Sets `fd`'s receive timeout (ReadFullBy's tick).
void SetReceiveTimeout(int fd, absl::Duration tick) {
  const int64_t us = std::max<int64_t>(1000, absl::ToInt64Microseconds(tick));
  timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

// Reads and drops n bytes by `deadline`, through a small buffer; false as ReadFullBy.
bool DiscardBy(int fd, uint64_t n, absl::Time deadline, bool* timed_out) {
  char scratch[64 << 10];
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, sizeof(scratch)));
    if (!ReadFullBy(fd, scratch, chunk, deadline, timed_out)) return false;
    n -= chunk;
  }
  return true;
}

// Fills a reply's header: its status code, the request's id, its message's and its bytes' sizes.
void PutReplyHeader(char* head, const absl::Status& status, uint64_t id, size_t message_bytes,
                    uint64_t bytes) {
  std::memcpy(head, kReply, 4);
  Put<uint32_t>(head + 4, static_cast<uint32_t>(status.code()));
  Put<uint64_t>(head + 8, id);
  Put<uint32_t>(head + 16, static_cast<uint32_t>(message_bytes));
  Put<uint64_t>(head + 20, bytes);
}

// Writes every byte of `iov` (advancing through partial writes); false on an error.
bool WriteAll(int fd, std::vector<iovec> iov) {
  size_t at = 0;
  while (at < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - at, IOV_MAX));
    msghdr msg{};
    msg.msg_iov = iov.data() + at;
    msg.msg_iovlen = count;
    const ssize_t sent = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    size_t left = static_cast<size_t>(sent);
    while (left > 0 && at < iov.size()) {
      if (left >= iov[at].iov_len) {
        left -= iov[at].iov_len;
        ++at;
      } else {
        iov[at].iov_base = static_cast<char*>(iov[at].iov_base) + left;
        iov[at].iov_len -= left;
        left = 0;
      }
    }
    while (at < iov.size() && iov[at].iov_len == 0) ++at;
  }
  return true;
}

// One write of `iov` (its first IOV_MAX pieces) that takes only the room the socket has now:
// the bytes it took (0 when it had none), or -1 on an error.
ssize_t WriteNow(int fd, std::vector<iovec>* iov) {
  msghdr msg{};
  msg.msg_iov = iov->data();
  msg.msg_iovlen = std::min<size_t>(iov->size(), IOV_MAX);
  for (;;) {
    const ssize_t sent = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent >= 0) return sent;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
  }
}

iovec Iov(const void* p, size_t n) { return iovec{const_cast<void*>(p), n}; }

bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// No Nagle delay (every frame is sent whole), and socket buffers that hold a megabyte message.
void TuneSocket(int fd) {
  int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  int bytes = 4 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

// The addresses of host:port (numeric or a name).
absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints,
                               &result);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("can't resolve ", host, ": ", gai_strerror(rc)));
  }
  return result;
}

class RawTcpServerImpl final : public RawTcpServer {
 public:
  RawTcpServerImpl(RawTcpServerOptions options, RawHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {}

  ~RawTcpServerImpl() override {
    stopping_.store(true);
    if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
    if (accept_thread_.joinable()) accept_thread_.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    // Every connection's thread ends once its socket is shut down; wait for them all. (The
    // tracker outlives this object in the threads' hands, so its mutex is never destroyed while
    // one of them still unlocks it.)
    absl::MutexLock lock(&tracker_->mu);
    for (int fd : tracker_->open) ::shutdown(fd, SHUT_RDWR);
    tracker_->mu.Await(absl::Condition(
        +[](std::set<int>* open) { return open->empty(); }, &tracker_->open));
  }

  absl::Status Listen() {
    absl::StatusOr<addrinfo*> addresses = Resolve(options_.host, options_.port, /*passive=*/true);
    if (!addresses.ok()) return addresses.status();
    std::string last_error = "no address";
    for (addrinfo* a = *addresses; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      int yes = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
        listen_fd_ = fd;
        break;
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(*addresses);
    if (listen_fd_ < 0) {
      return absl::UnavailableError(absl::StrCat("data plane: can't listen on ", options_.host, ":",
                                                 options_.port, ": ", last_error));
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6
                      ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                      : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return absl::OkStatus();
  }

  int port() const override { return port_; }

 private:
  void AcceptLoop() {
    while (!stopping_.load()) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (!stopping_.load()) LOG(WARNING) << "data plane: accept: " << std::strerror(errno);
        return;
      }
      TuneSocket(fd);
      absl::MutexLock lock(&tracker_->mu);
      if (stopping_.load()) {
        ::close(fd);
        return;
      }
      // Too many connections still saying hello: the oldest goes (its thread sees its socket shut
      // down), so silent connections can't keep new ones out.
      if (static_cast<int>(tracker_->handshaking.size()) >= std::max(1, options_.max_handshaking)) {
        const int oldest = tracker_->handshaking.front();
        tracker_->handshaking.pop_front();
        ::shutdown(oldest, SHUT_RDWR);
      }
      tracker_->open.insert(fd);
      tracker_->handshaking.push_back(fd);
      std::thread([this, fd, tracker = tracker_] {
        Serve(fd);
        absl::MutexLock lock(&tracker->mu);
        ::close(fd);
        tracker->open.erase(fd);
        tracker->DoneHandshaking(fd);
      }).detach();
    }
  }

  // After a hello: whether the connection may be served (taking a place among max_connections);
  // no longer counted among those saying hello.
  bool TakeConnection(int fd) {
    absl::MutexLock lock(&tracker_->mu);
    tracker_->DoneHandshaking(fd);
    if (tracker_->served >= options_.max_connections) return false;
    ++tracker_->served;
    return true;
  }
  void GiveConnection() {
    absl::MutexLock lock(&tracker_->mu);
    --tracker_->served;
  }

  // Answers the hello (within handshake_timeout); false (the connection to be closed) when
  // refused. True means the connection took a place among max_connections (GiveConnection).
  bool Handshake(int fd) {
    const absl::Time deadline = absl::Now() + options_.handshake_timeout;
    bool timed_out = false;
    char hello[12];
    if (!ReadFullBy(fd, hello, sizeof(hello), deadline, &timed_out) ||
        std::memcmp(hello, kHello, 4) != 0) {
      return false;
    }
    const uint32_t version = Get<uint32_t>(hello + 4);
    const uint32_t token_bytes = Get<uint32_t>(hello + 8);
    if (token_bytes > kMaxToken) return false;
    std::string token(token_bytes, '\0');
    if (!ReadFullBy(fd, token.data(), token_bytes, deadline, &timed_out)) return false;
    absl::Status verdict;
    if (version != kVersion) {
      verdict = absl::FailedPreconditionError(absl::StrCat(
          "data plane: protocol version ", version, ", this server speaks ", kVersion));
    } else if (!options_.token.empty() && !ConstantTimeEqual(token, options_.token)) {
      verdict = absl::UnauthenticatedError(
          absl::StrCat("data plane of ", options_.service_name, ": wrong or missing token"));
    } else if (!TakeConnection(fd)) {
      verdict = absl::ResourceExhaustedError(absl::StrCat(
          "data plane of ", options_.service_name, ": ", options_.max_connections,
          " connections are served already (its max_connections); try again later"));
    }
    const std::string message(verdict.message());
    char header[12];
    std::memcpy(header, kAccepted, 4);
    Put<uint32_t>(header + 4, static_cast<uint32_t>(verdict.code()));
    Put<uint32_t>(header + 8, static_cast<uint32_t>(message.size()));
    WriteAll(fd, {Iov(header, sizeof(header)), Iov(message.data(), message.size())});
    return verdict.ok();
  }

  void Serve(int fd) {
    // Every read wakes at least this often to look at its deadline (a request's, the hello's).
    SetReceiveTimeout(fd, std::min(options_.handshake_timeout, options_.request_timeout));
    if (!Handshake(fd)) return;
    ServeRequests(fd);
    GiveConnection();
  }

  // Answers request `id` with an error now.
  void Refuse(int fd, uint64_t id, const absl::Status& status) {
    const std::string message(status.message().substr(0, kMaxMessage));
    char head[kReplyHeader];
    PutReplyHeader(head, status, id, message.size(), 0);
    WriteAll(fd, {Iov(head, sizeof(head)), Iov(message.data(), message.size())});
  }

  void ServeRequests(int fd) {
    char header[kRequestHeader];
    // Between requests a connection may idle; once a header starts, it and the request's bytes
    // must arrive in time.
    for (;;) {
      // Waits for the next request, as long as it takes (waking each tick).
      const ssize_t first = ::recv(fd, header, sizeof(header), 0);
      if (first < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (first <= 0) return;
      absl::Time deadline = absl::Now() + options_.request_timeout;
      bool timed_out = false;
      if (!ReadFullBy(fd, header + first, sizeof(header) - static_cast<size_t>(first), deadline,
                      &timed_out)) {
        if (timed_out) LOG(WARNING) << "data plane: a request header did not arrive in time";
        return;
      }
      if (std::memcmp(header, kRequest, 4) != 0) {
        LOG(WARNING) << "data plane: a frame without its magic; closing the connection";
        return;
      }
      const uint32_t method = Get<uint32_t>(header + 4);
      const uint64_t id = Get<uint64_t>(header + 8);
      const uint64_t bytes = Get<uint64_t>(header + 16);
      if (bytes > static_cast<uint64_t>(options_.max_request_bytes)) {
        LOG(WARNING) << "data plane: a request of " << bytes << " bytes (over "
                     << options_.max_request_bytes << "); closing the connection";
        Refuse(fd, id, absl::ResourceExhaustedError(absl::StrCat(
                           "data plane of ", options_.service_name, ": a request of ", bytes,
                           " bytes is over its max_request_bytes of ",
                           options_.max_request_bytes)));
        return;
      }
      deadline += absl::Seconds(static_cast<double>(bytes) /
                                std::max<int64_t>(1, options_.min_request_bytes_per_second));
      // Held until the request's bytes are dropped (the handler has returned).
      MemoryAccount::Admission admission;
      if (options_.account != nullptr) {
        absl::StatusOr<MemoryAccount::Admission> admitted = options_.account->Admit(
            static_cast<int64_t>(bytes), options_.admission_wait,
            absl::StrCat("a request to the data plane of ", options_.service_name));
        if (!admitted.ok()) {
          // Refused before its bytes are read; they are read and dropped, the connection goes on.
          Refuse(fd, id, admitted.status());
          if (!DiscardBy(fd, bytes, deadline, &timed_out)) return;
          continue;
        }
        admission = *std::move(admitted);
        // The wait for room doesn't count against the request's own time.
        deadline = std::max(deadline, absl::Now() + options_.request_timeout);
      }
      std::unique_ptr<char[]> request(new char[bytes == 0 ? 1 : bytes]);
      if (!ReadFullBy(fd, request.get(), bytes, deadline, &timed_out)) {
        if (timed_out) {
          LOG(WARNING) << "data plane: a request of " << bytes << " bytes did not arrive in time; "
                       << "closing the connection";
        }
        return;
      }
      // The reply, sent whole after the handler returns or, when it calls Ready, partly while it
      // still works on the rest: the header (with the size it allocated) and the bytes ready go
      // out as far as the socket takes them without waiting (so a slow reader never holds up the
      // handler, which may hold a shard's rows meanwhile); the rest after it returns.
      std::unique_ptr<char[]> reply;
      size_t reply_bytes = 0;
      MemoryAccount::Admission reply_charge;  // the reply's bytes, until sent
      char head[kReplyHeader];
      size_t head_sent = 0;   // of a streamed reply's header; > 0: the call must succeed
      size_t sent = 0;        // of a streamed reply's bytes
      bool broken = false;    // a write failed
      bool completed = false;  // Complete took the reply: the call must succeed
      auto header = [&](const absl::Status& status, size_t message_bytes, size_t bytes) {
        PutReplyHeader(head, status, id, message_bytes, bytes);
      };
      // Writes the header and the reply's bytes up to n, as far as the socket takes them now.
      auto send_now = [&](size_t n) {
        if (head_sent == 0) header(absl::OkStatus(), 0, reply_bytes);
        std::vector<iovec> iov;
        if (head_sent < kReplyHeader) iov.push_back(Iov(head + head_sent, kReplyHeader - head_sent));
        iov.push_back(Iov(reply.get() + sent, n - sent));
        const ssize_t took = WriteNow(fd, &iov);
        if (took < 0) {
          broken = true;
          return;
        }
        const size_t to_head = std::min<size_t>(took, kReplyHeader - head_sent);
        head_sent += to_head;
        sent += static_cast<size_t>(took) - to_head;
      };
      // Streaming overlaps the handler's work with the wire when cores are idle; with other
      // requests in the handler they are not, and the extra writes and wake-ups only cost.
      const bool alone = serving_.fetch_add(1) == 0;
      const ReplyAllocator allocator(
          [&](size_t n) -> char* {
            if (options_.account != nullptr) {
              reply_charge = options_.account->Charge(static_cast<int64_t>(n));
            }
            reply.reset(new char[n == 0 ? 1 : n]);
            reply_bytes = n;
            return reply.get();
          },
          !alone ? ReplyAllocator::ReadyFn() : [&](size_t n) {
            if (broken || completed) return;
            // The last byte waits for the handler's return, so a reply it fails after all never
            // arrives complete: the client sees the connection break, not a success.
            n = std::min(n, reply_bytes == 0 ? 0 : reply_bytes - 1);
            if (n >= sent + kMinStreamBytes) send_now(n);  // fewer, larger writes
          },
          !alone ? ReplyAllocator::CompleteFn() : [&]() -> bool {
            if (broken) return false;
            if (completed) return true;
            // Not when the client's next request is already arriving here: it keeps several in
            // flight, and nobody waits for this answer to send more.
            pollfd next{fd, POLLIN, 0};
            if (::poll(&next, 1, 0) == 1) return false;
            completed = true;
            send_now(reply_bytes);
            return true;
          });
      absl::Status status = handler_(static_cast<int>(method),
                                     {absl::string_view(request.get(), bytes)}, allocator);
      serving_.fetch_sub(1);
      request.reset();
      admission.Release();
      if (broken) return;
      if (head_sent > 0 || completed) {
        if (!status.ok()) {
          // A handler broke Ready's or Complete's promise: the reply is (at least partly) sent,
          // so the connection goes.
          LOG(ERROR) << "data plane: method " << method << " failed after streaming part of its "
                     << "reply (" << status << "); closing the connection";
          return;
        }
        if ((head_sent < kReplyHeader || sent < reply_bytes) &&
            !WriteAll(fd, {Iov(head + head_sent, kReplyHeader - head_sent),
                           Iov(reply.get() + sent, reply_bytes - sent)})) {
          return;
        }
        continue;
      }
      std::string message(status.message().substr(0, kMaxMessage));
      if (!status.ok()) reply_bytes = 0;
      header(status, message.size(), reply_bytes);
      if (!WriteAll(fd, {Iov(head, sizeof(head)), Iov(message.data(), message.size()),
                         Iov(reply.get(), reply_bytes)})) {
        return;
      }
    }
  }

  const RawTcpServerOptions options_;
  const RawHandler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> serving_{0};  // requests in the handler, over every connection
  std::thread accept_thread_;
  // The connections being served (their threads detached).
  struct Tracker {
    absl::Mutex mu;
    std::set<int> open ABSL_GUARDED_BY(mu);
    std::deque<int> handshaking ABSL_GUARDED_BY(mu);  // saying hello, oldest first
    int served ABSL_GUARDED_BY(mu) = 0;               // past the hello

    // `fd` no longer says hello (if it did).
    void DoneHandshaking(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      auto it = std::find(handshaking.begin(), handshaking.end(), fd);
      if (it != handshaking.end()) handshaking.erase(it);
    }
  };
  const std::shared_ptr<Tracker> tracker_ = std::make_shared<Tracker>();
};

}  // namespace

absl::StatusOr<std::unique_ptr<RawTcpServer>> RawTcpServer::Start(const RawTcpServerOptions& options,
                                                                  RawHandler handler) {
  auto server = std::make_unique<RawTcpServerImpl>(options, std::move(handler));
  absl::Status s = server->Listen();
  if (!s.ok()) return s;
  return std::unique_ptr<RawTcpServer>(std::move(server));
}

// ---- The client ----

struct RawTcpChannel::State : std::enable_shared_from_this<State> {
  struct Pending {
    Done done;
    absl::Time deadline = absl::InfiniteFuture();
    bool sent = false;  // false while its writer still holds the request's pieces
    uint64_t gen = 0;   // the connection it was sent on
    // An outcome that came before the writer let go of the request (the reply can arrive while
    // sendmsg is returning; a broken connection fails calls mid-write): the writer delivers it.
    bool parked = false;
    absl::Status parked_status;
    RawTcpReply parked_reply;
  };

  // Takes the call's `done` to run now, or parks the outcome with it (returning an empty Done)
  // while the call is still being written: done must not free the request under its writer.
  static Done TakeOrPark(std::map<uint64_t, Pending>& calls,
                         std::map<uint64_t, Pending>::iterator it, absl::Status status,
                         RawTcpReply reply) {
    if (!it->second.sent) {
      if (!it->second.parked) {
        it->second.parked = true;
        it->second.parked_status = std::move(status);
        it->second.parked_reply = std::move(reply);
      }
      return Done();
    }
    Done done = std::move(it->second.done);
    calls.erase(it);
    return done;
  }

  State(std::string h, int p, RawTcpChannelOptions o)
      : host(std::move(h)), port(p), options(std::move(o)) {
    if (options.name.empty()) options.name = absl::StrCat(host, ":", port, " (data plane)");
  }

  const std::string host;
  const int port;
  RawTcpChannelOptions options;

  absl::Mutex write_mu;  // one frame at a time on the socket
  absl::Mutex mu ABSL_ACQUIRED_AFTER(write_mu);
  int fd ABSL_GUARDED_BY(mu) = -1;
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;  // of the current connection
  bool closing ABSL_GUARDED_BY(mu) = false;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  std::map<uint64_t, Pending> pending ABSL_GUARDED_BY(mu);
  std::vector<std::thread> readers ABSL_GUARDED_BY(mu);

  absl::Status Unavailable(absl::string_view why) const {
    return absl::UnavailableError(absl::StrCat(options.name, ": ", why));
  }

  // Connects and shakes hands (blocking, bounded by the timeout). Errors: kUnavailable,
  // kUnauthenticated, kDeadlineExceeded.
  absl::StatusOr<int> Connect() {
    absl::StatusOr<addrinfo*> addresses = Resolve(host, port, /*passive=*/false);
    if (!addresses.ok()) return Unavailable(addresses.status().message());
    int fd = -1;
    std::string last_error = "no address";
    const absl::Time deadline = absl::Now() + options.timeout;
    for (addrinfo* a = *addresses; a != nullptr && fd < 0; a = a->ai_next) {
      const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                             a->ai_protocol);
      if (s < 0) continue;
      int rc = ::connect(s, a->ai_addr, a->ai_addrlen);
      if (rc < 0 && errno == EINPROGRESS) {
        pollfd p{s, POLLOUT, 0};
        const int wait = static_cast<int>(
            std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
        rc = ::poll(&p, 1, wait) == 1 ? 0 : -1;
        if (rc == 0) {
          int err = 0;
          socklen_t len = sizeof(err);
          ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            errno = err;
            rc = -1;
          }
        } else {
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        fd = s;
      } else {
        last_error = std::strerror(errno);
        ::close(s);
      }
    }
    ::freeaddrinfo(*addresses);
    if (fd < 0) return Unavailable(absl::StrCat("can't connect: ", last_error));
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    TuneSocket(fd);
    char hello[12];
    std::memcpy(hello, kHello, 4);
    Put<uint32_t>(hello + 4, kVersion);
    Put<uint32_t>(hello + 8, static_cast<uint32_t>(options.token.size()));
    char answer[12];
    if (!WriteAll(fd, {Iov(hello, sizeof(hello)), Iov(options.token.data(), options.token.size())}) ||
        !ReadFull(fd, answer, sizeof(answer)) || std::memcmp(answer, kAccepted, 4) != 0) {
      ::close(fd);
      return Unavailable("the handshake failed (not a data-plane server?)");
    }
    const uint32_t code = Get<uint32_t>(answer + 4);
    const uint32_t message_bytes = std::min(Get<uint32_t>(answer + 8), kMaxMessage);
    std::string message(message_bytes, '\0');
    ReadFull(fd, message.data(), message_bytes);
    if (code != 0) {
      ::close(fd);
      return absl::Status(static_cast<absl::StatusCode>(code),
                          absl::StrCat(options.name, ": ", message));
    }
    return fd;
  }

  // Fails every call of connection `gen` (or all, gen 0) with `status`, outside the lock; if
  // that connection is the current one, it is dropped (the next call connects again).
  void FailAll(uint64_t gen, const absl::Status& status) {
    std::vector<Done> failed;
    {
      absl::MutexLock lock(&mu);
      if ((gen == 0 || gen == generation) && fd >= 0) {
        // Shut down, not closed: the reader closes it (under write_mu), so a writer still
        // holding the number fails instead of writing into a socket that reused it.
        ::shutdown(fd, SHUT_RDWR);
        fd = -1;
      }
      for (auto it = pending.begin(); it != pending.end();) {
        auto next = std::next(it);
        if (gen == 0 || it->second.gen == gen) {
          Done done = TakeOrPark(pending, it, status, RawTcpReply{});
          if (done) failed.push_back(std::move(done));
        }
        it = next;
      }
    }
    for (Done& d : failed) d(status, RawTcpReply{});
  }

  void ReaderLoop(int sock, uint64_t gen) {
    char header[kReplyHeader];
    for (;;) {
      pollfd p{sock, POLLIN, 0};
      const int ready = ::poll(&p, 1, 100);
      if (ready == 0) {
        // Calls past their deadline fail (their late replies are dropped by id).
        std::vector<Done> expired;
        const absl::Time now = absl::Now();
        {
          absl::MutexLock lock(&mu);
          if (gen != generation || closing) break;
          for (auto it = pending.begin(); it != pending.end();) {
            if (it->second.sent && it->second.deadline <= now) {
              expired.push_back(std::move(it->second.done));
              it = pending.erase(it);
            } else {
              ++it;
            }
          }
        }
        for (Done& d : expired) {
          d(absl::DeadlineExceededError(absl::StrCat(
                options.name, ": no reply within ", absl::FormatDuration(options.timeout))),
            RawTcpReply{});
        }
        continue;
      }
      if (ready < 0 && errno == EINTR) continue;
      if (!ReadFull(sock, header, sizeof(header)) || std::memcmp(header, kReply, 4) != 0) break;
      const uint32_t code = Get<uint32_t>(header + 4);
      const uint64_t id = Get<uint64_t>(header + 8);
      const uint32_t message_bytes = Get<uint32_t>(header + 16);
      const uint64_t bytes = Get<uint64_t>(header + 20);
      if (message_bytes > kMaxMessage || bytes > (uint64_t{1} << 40)) break;
      std::string message(message_bytes, '\0');
      if (!ReadFull(sock, message.data(), message_bytes)) break;
      std::shared_ptr<char[]> body(new char[bytes == 0 ? 1 : bytes]);
      if (!ReadFull(sock, body.get(), bytes)) break;
      absl::Status status = code != 0
                                ? absl::Status(static_cast<absl::StatusCode>(code), message)
                                : absl::OkStatus();
      RawTcpReply reply;
      if (code == 0) {
        reply = RawTcpReply{absl::string_view(body.get(), bytes),
                            std::shared_ptr<const void>(body)};
      }
      Done done;
      {
        absl::MutexLock lock(&mu);
        auto it = pending.find(id);
        if (it == pending.end()) continue;  // it timed out: dropped
        done = TakeOrPark(pending, it, status, reply);
      }
      if (done) done(std::move(status), std::move(reply));
    }
    bool closing_now;
    {
      absl::MutexLock lock(&mu);
      closing_now = closing;
    }
    FailAll(gen, closing_now ? absl::CancelledError(absl::StrCat(options.name, ": channel closed"))
                             : Unavailable("the connection broke"));
    absl::MutexLock lock(&write_mu);
    ::close(sock);
  }
};

RawTcpChannel::RawTcpChannel(std::string host, int port, RawTcpChannelOptions options) {
  for (int i = 0; i < std::max(1, options.connections); ++i) {
    states_.push_back(std::make_shared<State>(host, port, options));
  }
  shared_ = states_.size();
  if (options.priority_connection) states_.push_back(std::make_shared<State>(host, port, options));
}

RawTcpChannel::~RawTcpChannel() {
  for (const std::shared_ptr<State>& state : states_) {
    std::vector<std::thread> readers;
    {
      absl::MutexLock lock(&state->mu);
      state->closing = true;
      if (state->fd >= 0) ::shutdown(state->fd, SHUT_RDWR);
      readers.swap(state->readers);
    }
    for (std::thread& t : readers) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();  // destroyed from one of its own callbacks: that reader ends by itself
      } else {
        t.join();
      }
    }
    state->FailAll(0, absl::CancelledError(absl::StrCat(state->options.name, ": channel closed")));
  }
}

void RawTcpChannel::Call(int method, const std::vector<absl::string_view>& request, Done done,
                         bool priority) {
  const std::shared_ptr<State>& state_ = priority && states_.size() > shared_
                                             ? states_.back()
                                             : states_[next_.fetch_add(1) % shared_];
  State& s = *state_;
  uint64_t id = 0, gen = 0;
  int fd = -1;
  absl::Status refused;
  {
    absl::MutexLock lock(&s.mu);
    if (!s.closing && s.fd >= 0) {
      // A peer that closed (it restarted) is noticed here, not by this call failing.
      pollfd p{s.fd, POLLRDHUP, 0};
      if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        ::shutdown(s.fd, SHUT_RDWR);  // its reader fails its calls and closes it
        s.fd = -1;
      }
    }
    if (s.closing) {
      refused = absl::CancelledError(absl::StrCat(s.options.name, ": channel closed"));
    } else if (s.fd < 0) {
      absl::StatusOr<int> connected = s.Connect();
      if (!connected.ok()) {
        refused = connected.status();
      } else {
        s.fd = *connected;
        ++s.generation;
        s.readers.emplace_back([state = state_, sock = s.fd, g = s.generation] {
          state->ReaderLoop(sock, g);
        });
      }
    }
    if (refused.ok()) {
      fd = s.fd;
      gen = s.generation;
      id = s.next_id++;
      s.pending[id] = State::Pending{std::move(done), absl::InfiniteFuture(), false, gen};
    }
  }
  if (!refused.ok()) {
    done(refused, RawTcpReply{});
    return;
  }
  uint64_t bytes = 0;
  for (absl::string_view piece : request) bytes += piece.size();
  char header[kRequestHeader];
  std::memcpy(header, kRequest, 4);
  Put<uint32_t>(header + 4, static_cast<uint32_t>(method));
  Put<uint64_t>(header + 8, id);
  Put<uint64_t>(header + 16, bytes);
  std::vector<iovec> iov;
  iov.reserve(request.size() + 1);
  iov.push_back(Iov(header, sizeof(header)));
  for (absl::string_view piece : request) {
    if (!piece.empty()) iov.push_back(Iov(piece.data(), piece.size()));
  }
  bool written;
  int write_errno;
  {
    absl::MutexLock lock(&s.write_mu);
    written = WriteAll(fd, std::move(iov));
    write_errno = errno;
  }
  const absl::Status write_failed =
      written ? absl::OkStatus()
              : s.Unavailable(absl::StrCat("sending failed: ", std::strerror(write_errno)));
  // The request is let go of here. An outcome parked meanwhile, or this call's failure to send,
  // is delivered on this thread.
  Done now;
  absl::Status status;
  RawTcpReply reply;
  {
    absl::MutexLock lock(&s.mu);
    auto it = s.pending.find(id);
    if (it != s.pending.end()) {
      it->second.sent = true;
      it->second.deadline = absl::Now() + s.options.timeout;
      if (it->second.parked || !written) {
        now = std::move(it->second.done);
        status = it->second.parked ? std::move(it->second.parked_status) : write_failed;
        reply = std::move(it->second.parked_reply);
        s.pending.erase(it);
      }
    }
  }
  // The connection is dropped (and its other calls failed) before this call's done runs: a done
  // that calls again connects afresh.
  if (!written) s.FailAll(gen, write_failed);
  if (now) now(std::move(status), std::move(reply));
}

}  // namespace pstrain
