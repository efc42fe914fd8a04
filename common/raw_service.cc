#include "common/raw_service.h"

#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/transport_security.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "grpcpp/impl/codegen/server_callback_handlers.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace pstrain {
namespace {

// protobuf's input stream over a message held in pieces, none copied.
class PiecesInputStream final : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit PiecesInputStream(const std::vector<absl::string_view>* pieces) : pieces_(pieces) {}

  bool Next(const void** data, int* size) override {
    while (piece_ < pieces_->size()) {
      const absl::string_view p = (*pieces_)[piece_];
      if (at_ < p.size()) {
        const size_t n = std::min<size_t>(p.size() - at_, std::numeric_limits<int>::max());
        *data = p.data() + at_;
        *size = static_cast<int>(n);
        at_ += n;
        total_ += n;
        return true;
      }
      ++piece_;
      at_ = 0;
    }
    return false;
  }

  void BackUp(int count) override {  // only into the piece Next() last returned
    at_ -= count;
    total_ -= count;
  }

  bool Skip(int count) override {
    const void* data;
    int size;
    while (count > 0) {
      if (!Next(&data, &size)) return false;
      if (size > count) {
        BackUp(size - count);
        return true;
      }
      count -= size;
    }
    return true;
  }

  int64_t ByteCount() const override { return total_; }

 private:
  const std::vector<absl::string_view>* pieces_;
  size_t piece_ = 0;
  size_t at_ = 0;
  int64_t total_ = 0;
};

}  // namespace

RawUnaryService::RawUnaryService(const google::protobuf::ServiceDescriptor* service,
                                 RawHandler handler, RawRunner runner) {
  auto shared_handler = std::make_shared<RawHandler>(std::move(handler));
  auto shared_runner = std::make_shared<RawRunner>(std::move(runner));
  for (int m = 0; m < service->method_count(); ++m) {
    const google::protobuf::MethodDescriptor* method = service->method(m);
    paths_.push_back(absl::StrCat("/", service->full_name(), "/", method->name()));
    AddMethod(new grpc::internal::RpcServiceMethod(
        paths_.back().c_str(), grpc::internal::RpcMethod::NORMAL_RPC, nullptr));
    std::string name = method->name();
    MarkMethodRawCallback(
        m, new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
               [m, name, shared_handler, shared_runner](grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
                 grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
                 absl::Status allowed = CheckCallToken(*context, name);
                 if (!allowed.ok()) {
                   reactor->Finish(ToGrpcStatus(allowed));
                   return reactor;
                 }
                 auto work = [m, name, shared_handler, reactor, request, response] {
                   std::vector<grpc::Slice> slices;  // references to the received bytes
                   absl::Status status;
                   if (!request->Dump(&slices).ok()) {
                     status = absl::InvalidArgumentError(
                         absl::StrCat(name, ": malformed request (unreadable bytes)"));
                   } else {
                     grpc::Slice reply;
                     status = (*shared_handler)(m, SliceViews(slices), [&reply](size_t bytes) {
                       reply = grpc::Slice(grpc_slice_malloc(bytes), grpc::Slice::STEAL_REF);
                       return reinterpret_cast<char*>(const_cast<uint8_t*>(reply.begin()));
                     });
                     if (status.ok()) *response = grpc::ByteBuffer(&reply, 1);
                   }
                   reactor->Finish(ToGrpcStatus(status));
                 };
                 if (*shared_runner) {
                   (*shared_runner)(m, std::move(work));
                 } else {
                   work();
                 }
                 return reactor;
               }));
  }
}

const google::protobuf::ServiceDescriptor* FindService(absl::string_view full_name) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          std::string(full_name));
  CHECK(service != nullptr) << "service " << full_name << " is not linked in";
  return service;
}

absl::Status ParseRequest(const std::vector<absl::string_view>& request, absl::string_view method,
                          google::protobuf::MessageLite* message) {
  PiecesInputStream stream(&request);
  if (!message->ParseFromZeroCopyStream(&stream)) {
    return absl::InvalidArgumentError(absl::StrCat(method, ": malformed request (not a ",
                                                   message->GetTypeName(), ")"));
  }
  return absl::OkStatus();
}

absl::Status WriteReply(const google::protobuf::MessageLite& message, const ReplyAllocator& reply) {
  const size_t bytes = message.ByteSizeLong();
  if (bytes > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::ResourceExhaustedError(absl::StrCat(
        message.GetTypeName(), " reply of ", bytes, " bytes is over protobuf's 2 GiB limit"));
  }
  if (bytes == 0) return absl::OkStatus();
  message.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(reply(bytes)));
  return absl::OkStatus();
}

}  // namespace pstrain
