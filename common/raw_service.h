// A gRPC service served from raw bytes. Every unary method of a proto service goes to one handler
// with the request's received bytes, so the server parses them itself:
// - a request that doesn't parse is answered INVALID_ARGUMENT "<Method>: malformed request"
//   (gRPC's typed handlers answer it with a bare code and no message);
// - the data path can read big fields in place (common/wire_reader.h);
// - the same handler runs without gRPC, which is how the fuzz targets drive it (tests/fuzz/);
// - the shared token (common/transport_security.h) is checked in one place, before any handler.
#ifndef PSTRAIN_COMMON_RAW_SERVICE_H_
#define PSTRAIN_COMMON_RAW_SERVICE_H_

#include <deque>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/impl/service_type.h"

namespace pstrain {

// Where a handler writes its reply: `reply(bytes)` (called at most once) returns memory for
// exactly `bytes` bytes of the reply's wire format. Not calling it replies with zero bytes.
//
// A handler may also hand its reply over while still writing it: `reply.Ready(n)`, from the
// handler's own thread, says the first n bytes are final and the call will succeed, so a
// transport that can stream (the data plane, common/raw_tcp.h) may send them before the handler
// returns, overlapping the rest of its work with the wire; it never waits for the peer. n never
// decreases; a handler that called it must return OK (a transport that sent part of a reply can
// only close the connection if it doesn't). Transports that can't stream (gRPC's unary calls)
// ignore it.
//
// `reply.Complete()` asks to go one further: to send the whole reply (what was allocated, or
// nothing; nothing may be allocated after) now, as a success, though the handler goes on working
// (a push answered while it is applied: VariableStore::UpdateWire). True: it is sent, the call
// has succeeded, and the handler must return OK. False: the transport can't, or judges it gains
// nothing (the data plane, when the client's next request is already arriving), and the call
// goes on as if never asked.
class ReplyAllocator {
 public:
  using AllocateFn = std::function<char*(size_t bytes)>;
  using ReadyFn = std::function<void(size_t bytes)>;
  using CompleteFn = std::function<bool()>;

  ReplyAllocator(AllocateFn allocate, ReadyFn ready, CompleteFn complete)
      : allocate_(std::move(allocate)), ready_(std::move(ready)), complete_(std::move(complete)) {}
  // Another allocation (a wrapper counting bytes, say) with `like`'s Ready and Complete.
  ReplyAllocator(AllocateFn allocate, const ReplyAllocator& like)
      : allocate_(std::move(allocate)), ready_(like.ready_), complete_(like.complete_) {}
  // Any callable as `allocate`, without Ready or Complete.
  template <typename F,
            typename = std::enable_if_t<std::is_invocable_r_v<char*, F&, size_t> &&
                                        !std::is_same_v<std::decay_t<F>, ReplyAllocator>>>
  ReplyAllocator(F allocate) : allocate_(std::move(allocate)) {}  // NOLINT: implicit on purpose

  char* operator()(size_t bytes) const { return allocate_(bytes); }
  void Ready(size_t bytes) const {
    if (ready_) ready_(bytes);
  }
  bool Complete() const { return complete_ && complete_(); }
  // Whether Ready goes anywhere (a handler may skip the work of streaming when it doesn't).
  bool streams() const { return static_cast<bool>(ready_); }
  // Whether Complete may succeed.
  bool completes() const { return static_cast<bool>(complete_); }
  // Ready as a function to hand on (empty when it goes nowhere).
  const ReadyFn& ready() const { return ready_; }

 private:
  AllocateFn allocate_;
  ReadyFn ready_;
  CompleteFn complete_;
};

// Serves one call of the service's method number `method` (its index in the service descriptor)
// on `request`, the received bytes in pieces.
using RawHandler = std::function<absl::Status(
    int method, const std::vector<absl::string_view>& request, const ReplyAllocator& reply)>;

// Runs `work` for a call of method `method`: inline on gRPC's callback thread (the default), or
// handed to a pool for methods that block.
using RawRunner = std::function<void(int method, std::function<void()> work)>;

class RawUnaryService : public grpc::Service {
 public:
  // `service`: the proto service whose methods (all unary) this serves. `runner` may be empty.
  RawUnaryService(const google::protobuf::ServiceDescriptor* service, RawHandler handler,
                  RawRunner runner = nullptr);

 private:
  std::deque<std::string> paths_;  // "/package.Service/Method"; gRPC keeps pointers to them
};

// The proto service named `full_name` ("pstrain.PsService"), from the generated descriptors.
// Aborts if it isn't linked in (a build error, not input).
const google::protobuf::ServiceDescriptor* FindService(absl::string_view full_name);

// Parses `request` into `message`. Errors: kInvalidArgument "<method>: malformed request (not a
// <Type>)" when the bytes are not that message's wire format.
absl::Status ParseRequest(const std::vector<absl::string_view>& request, absl::string_view method,
                          google::protobuf::MessageLite* message);

// Writes `message` through `reply`. Errors: kResourceExhausted for a reply of 2 GiB or more.
absl::Status WriteReply(const google::protobuf::MessageLite& message, const ReplyAllocator& reply);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_RAW_SERVICE_H_
