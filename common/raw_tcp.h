// A data plane beside gRPC: the same unary methods (a RawHandler, common/raw_service.h) over plain,
// long-lived TCP connections, with frames written by scatter-gather (writev) straight from the
// caller's buffers and read into one buffer per message: no HTTP/2 framing, no flow-control
// windows, no per-call setup. gRPC stays the control plane (the server's port is found through a
// gRPC call, and every method remains served there too).
//
//   client -> server   "PSHI" u32 version  u32 token_bytes  token           (once per connection)
//   server -> client   "PSOK" u32 code     u32 message_bytes message        (code 0: accepted)
//   client -> server   "PSRQ" u32 method   u64 id  u64 bytes  request bytes
//   server -> client   "PSRP" u32 code     u64 id  u32 message_bytes  u64 bytes  message  reply
//
// (integers little-endian). Replies come in request order per connection; a client keeps several
// requests in flight on one connection (pipelined) and matches replies by id. A handler that
// reports its reply's bytes ready before it returns (ReplyAllocator::Ready) has them sent as far as
// the socket takes them without waiting, header first, while it works on the rest: a lookup's rows
// are on the wire while the later ones are still gathered. It is offered only while no other
// request is in the handler (then the cores are busy anyway). The last byte waits for the
// handler's return, unless the handler had the reply sent complete (ReplyAllocator::Complete: a
// push answered while it is applied; declined when the client's next request is already
// arriving on the connection, as then nobody waits for it); a handler that fails after Ready or
// Complete has its connection closed (its client sees kUnavailable, never a truncated success).
// The same token as the gRPC calls' authenticates a connection (checked in constant time before
// any request is read); the frames are not encrypted, so with TLS configured the data plane is not
// used (the ps doesn't start it, and a client doesn't ask for it): plaintext never carries what
// TLS should protect. Every request goes through the same handler, hence the same parsing and
// validation, as over gRPC; a frame that is malformed (bad magic, over the size limit) closes the
// connection.
#ifndef PSTRAIN_COMMON_RAW_TCP_H_
#define PSTRAIN_COMMON_RAW_TCP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/memory_account.h"
#include "common/raw_service.h"

namespace pstrain {

struct RawTcpServerOptions {
  // Where to listen: the host, and the port (0: picked; see RawTcpServer::port()). Default
  // "0.0.0.0", 0.
  std::string host = "0.0.0.0";
  int port = 0;
  // The token a connection must present (empty: none). Default: none.
  std::string token;
  // The largest request accepted; a bigger one is refused (kResourceExhausted) and its connection
  // closed. Default 1 GiB.
  int64_t max_request_bytes = int64_t{1} << 30;
  // What the handler's methods are called in messages ("PsService"). Default "service".
  std::string service_name = "service";
  // The server's account of bytes in flight (not owned; may be shared with its gRPC server). Null
  // (default): none. With one, a request's bytes are read only once the account admits them (the
  // connection waits meanwhile: backpressure on its socket), and its reply's bytes count until
  // they are sent. A request that can never fit, or that waits longer than admission_wait, is
  // refused (kResourceExhausted naming its size and the account's) and its bytes read and dropped
  // without being held; the connection goes on.
  MemoryAccount* account = nullptr;
  absl::Duration admission_wait = absl::Seconds(60);
  // Connections served at once, each on a thread of its own; past it a new connection is refused
  // (kResourceExhausted) once it has said hello. Default 256.
  int max_connections = 256;
  // Connections still saying hello, at most; a new one past it closes the oldest of them. A hello
  // must arrive within handshake_timeout. So connections that never authenticate hold a thread
  // briefly, and can't keep an authenticated client's new connection out. Defaults 64, 10 s.
  int max_handshaking = 64;
  absl::Duration handshake_timeout = absl::Seconds(10);
  // A connection may idle between requests as long as it likes; once a request's header starts,
  // the header and its bytes must arrive within request_timeout + bytes / min_request_rate, or the
  // connection is closed (a client that stops or trickles holds nothing for long). Defaults 30 s,
  // 8 MiB/s.
  absl::Duration request_timeout = absl::Seconds(30);
  int64_t min_request_bytes_per_second = int64_t{8} << 20;
};

// Serves `handler` on every connection, a thread per connection (clients keep few, long-lived
// ones), within the limits above. Thread-safe; destroying it closes every connection and waits for
// their threads.
class RawTcpServer {
 public:
  // Errors: kUnavailable naming host:port when it can't listen.
  static absl::StatusOr<std::unique_ptr<RawTcpServer>> Start(const RawTcpServerOptions& options,
                                                             RawHandler handler);
  virtual ~RawTcpServer() = default;
  virtual int port() const = 0;
};

struct RawTcpChannelOptions {
  // The token to present (empty: none).
  std::string token;
  // How long a call may take (connecting included) before it fails with kDeadlineExceeded (and
  // the connection, whose state is then unknown, is closed). Default 60 s.
  absl::Duration timeout = absl::Seconds(60);
  // Names the peer in messages ("ps:1 at host:2222 (data plane)").
  std::string name;
  // Connections to the server, calls spread over them in turn: the server serves each connection
  // on a thread of its own, so calls in flight on different connections run side by side.
  // Default 2.
  int connections = 2;
  // One more connection, for the calls made with `priority` only: a call on the critical path of
  // a worker's steps (the push that ends a turn at the dense part: worker/dense_turns.h) doesn't
  // queue behind the other calls' requests, and the server serves it on a thread of its own.
  // Default false.
  bool priority_connection = false;
};

// A reply's bytes, kept alive by `owner` (the buffer they were received into).
struct RawTcpReply {
  absl::string_view bytes;
  std::shared_ptr<const void> owner;
};

// A client: `connections` TCP connections to a RawTcpServer, each opened on its first call and
// again after it broke; calls pipelined on them in turn. Thread-safe.
class RawTcpChannel {
 public:
  using Done = std::function<void(absl::Status, RawTcpReply)>;

  RawTcpChannel(std::string host, int port, RawTcpChannelOptions options);
  ~RawTcpChannel();  // fails the calls in flight (kCancelled) and closes the connection
  RawTcpChannel(const RawTcpChannel&) = delete;
  RawTcpChannel& operator=(const RawTcpChannel&) = delete;

  // Sends `request` (its pieces, written as they are: they must stay alive until `done` runs) to
  // method number `method`; `done` runs once, never before the pieces are written (so it may free
  // them), on the channel's reader thread (or on this thread if sending fails, or if the call's
  // outcome came while its pieces were still being written). Errors given to done: the handler's
  // (its code and message), kUnavailable naming the peer when it can't be reached or the
  // connection broke, kDeadlineExceeded after the timeout, kUnauthenticated when the token was
  // refused. `priority`: on the priority connection, if the channel has one.
  void Call(int method, const std::vector<absl::string_view>& request, Done done,
            bool priority = false);

 private:
  struct State;  // one connection
  std::vector<std::shared_ptr<State>> states_;  // the priority connection last, if any
  size_t shared_ = 0;                           // connections for calls without priority
  std::atomic<uint64_t> next_{0};
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_RAW_TCP_H_
