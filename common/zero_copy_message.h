// Sending a protobuf message through gRPC without copying its large bytes fields.
//
// gRPC's protobuf codec serializes a request into fresh slices: a push of 16K embedding gradients
// copies its 1 MiB values field once more just before the kernel copies it into the socket.
// ZeroCopyMessage serializes the small fields as usual and hands the large ones to gRPC as slices
// that point into the message's own memory, so the message must stay alive, unchanged, until gRPC
// has let go of them: `released` says when.
#ifndef PSTRAIN_COMMON_ZERO_COPY_MESSAGE_H_
#define PSTRAIN_COMMON_ZERO_COPY_MESSAGE_H_

#include <functional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"

namespace pstrain {

// Fields at least this large are referenced, not copied.
inline constexpr int kZeroCopyMinFieldBytes = 16 << 10;

// `message` in wire format. Its bytes and string fields of kZeroCopyMinFieldBytes or more are
// slices over the message's memory; `released` runs (once, on whichever thread drops the last
// reference: the caller's, or one of gRPC's) when no slice refers to that memory any more: at once
// inside this call if there is none, else when the returned buffer and every copy gRPC made of it
// are gone. Until then `message` must not be changed or destroyed.
// Errors (after which `released` has run): kResourceExhausted for a message of 2 GiB or more
// (protobuf's limit); kInternal if another thread changed the message while it was serialized.
absl::StatusOr<grpc::ByteBuffer> ZeroCopyMessage(const google::protobuf::MessageLite& message,
                                                 std::function<void()> released);

// The same for a message written by hand: write(out) writes exactly `bytes` bytes of wire format;
// bytes it writes through out->WriteRawMaybeAliased, kZeroCopyMinFieldBytes or more at a time,
// are referenced, not copied, and must stay alive until `released`. `what` names the message in
// errors (kResourceExhausted, kInternal as above).
absl::StatusOr<grpc::ByteBuffer> ZeroCopyWrite(
    size_t bytes, const std::function<void(google::protobuf::io::CodedOutputStream*)>& write,
    std::function<void()> released, absl::string_view what);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_ZERO_COPY_MESSAGE_H_
