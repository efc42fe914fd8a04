#include "common/zero_copy_message.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "grpcpp/support/slice.h"

namespace pstrain {
namespace {

// Runs `released` when the last aliased slice is destroyed. Starts with one reference of its own
// (the serializer's), dropped once every slice has been made, so `released` can't run early.
class ReleaseCounter {
 public:
  explicit ReleaseCounter(std::function<void()> released) : released_(std::move(released)) {}
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      released_();
      delete this;
    }
  }
  static void UnrefFromSlice(void* counter) { static_cast<ReleaseCounter*>(counter)->Unref(); }

 private:
  std::atomic<int> refs_{1};
  std::function<void()> released_;
};

// Collects the wire format as slices: copied bytes in owned chunks, fields of
// kZeroCopyMinFieldBytes or more as slices over the caller's memory. (Protobuf's CodedOutputStream,
// with aliasing enabled, calls WriteAliasedRaw for a bytes field larger than the space left in the
// current chunk; the smaller of those are copied here after all.)
class SliceOutputStream final : public google::protobuf::io::ZeroCopyOutputStream {
 public:
  static constexpr int kChunkBytes = kZeroCopyMinFieldBytes;

  explicit SliceOutputStream(ReleaseCounter* counter) : counter_(counter) {}

  bool Next(void** data, int* size) override {
    if (chunk_.size() == 0 || chunk_used_ == kChunkBytes) NewChunk();
    *data = const_cast<uint8_t*>(chunk_.begin()) + chunk_used_;
    *size = kChunkBytes - chunk_used_;
    chunk_used_ = kChunkBytes;
    bytes_ += *size;
    return true;
  }
  void BackUp(int count) override {
    chunk_used_ -= count;
    bytes_ -= count;
  }
  int64_t ByteCount() const override { return bytes_; }
  bool AllowsAliasing() const override { return true; }
  bool WriteAliasedRaw(const void* data, int size) override {
    if (size < kZeroCopyMinFieldBytes) {
      const char* p = static_cast<const char*>(data);
      while (size > 0) {
        void* out = nullptr;
        int room = 0;
        Next(&out, &room);
        const int n = std::min(room, size);
        std::memcpy(out, p, static_cast<size_t>(n));
        BackUp(room - n);
        p += n;
        size -= n;
      }
      return true;
    }
    CloseChunk();
    counter_->Ref();
    grpc_slice s = grpc_slice_new_with_user_data(const_cast<void*>(data), static_cast<size_t>(size),
                                                 &ReleaseCounter::UnrefFromSlice, counter_);
    slices_.emplace_back(s, grpc::Slice::STEAL_REF);
    bytes_ += size;
    return true;
  }

  // The slices so far; the stream is done with.
  std::vector<grpc::Slice> Finish() {
    CloseChunk();
    return std::move(slices_);
  }

 private:
  // Appends the bytes written to the current chunk since the last slice taken from it, if any; the
  // rest of the chunk stays in use for what comes next (the headers after an aliased field).
  void CloseChunk() {
    if (chunk_used_ > chunk_start_) {
      slices_.push_back(chunk_.sub(static_cast<size_t>(chunk_start_),
                                   static_cast<size_t>(chunk_used_)));
    }
    chunk_start_ = chunk_used_;
  }
  void NewChunk() {
    CloseChunk();
    chunk_ = grpc::Slice(grpc_slice_malloc(kChunkBytes), grpc::Slice::STEAL_REF);
    chunk_start_ = 0;
    chunk_used_ = 0;
  }

  ReleaseCounter* const counter_;
  grpc::Slice chunk_;
  int chunk_start_ = 0;  // chunk_'s bytes before this are in slices_ already
  int chunk_used_ = 0;   // chunk_'s bytes written (or handed out by Next)
  int64_t bytes_ = 0;
  std::vector<grpc::Slice> slices_;
};

}  // namespace

absl::StatusOr<grpc::ByteBuffer> ZeroCopyWrite(
    size_t bytes, const std::function<void(google::protobuf::io::CodedOutputStream*)>& write,
    std::function<void()> released, absl::string_view what) {
  if (bytes > static_cast<size_t>(std::numeric_limits<int>::max())) {
    released();
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " of ", bytes, " bytes is over protobuf's 2 GiB limit"));
  }
  auto* counter = new ReleaseCounter(std::move(released));
  std::vector<grpc::Slice> slices;
  int64_t written = 0;
  {
    SliceOutputStream stream(counter);
    {
      google::protobuf::io::CodedOutputStream coded(&stream);
      coded.EnableAliasing(true);
      write(&coded);
    }
    written = stream.ByteCount();
    slices = stream.Finish();
  }
  if (written != static_cast<int64_t>(bytes)) {  // as protobuf's own serializers check
    slices.clear();
    counter->Unref();
    return absl::InternalError(absl::StrCat(what, " changed while serialized (", written,
                                            " bytes written, ", bytes, " expected)"));
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  slices.clear();
  counter->Unref();  // the serializer's reference: from here only the slices hold it
  return buffer;
}

absl::StatusOr<grpc::ByteBuffer> ZeroCopyMessage(const google::protobuf::MessageLite& message,
                                                 std::function<void()> released) {
  const size_t bytes = message.ByteSizeLong();  // also caches the sizes serializing needs
  return ZeroCopyWrite(
      bytes,
      [&message](google::protobuf::io::CodedOutputStream* out) {
        message.SerializeWithCachedSizes(out);
      },
      std::move(released), message.GetTypeName());
}

}  // namespace pstrain
