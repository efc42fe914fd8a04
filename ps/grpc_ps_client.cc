#include "ps/grpc_ps_client.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/grpc_util.h"
#include "common/raw_tcp.h"
#include "common/transport_security.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "common/zero_copy_message.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/ps_service.grpc.pb.h"

namespace pstrain {
namespace {

class GrpcPsClient final : public PsClient {
 public:
  GrpcPsClient(int task_index, const std::string& address, const GrpcPsClientOptions& options)
      : name_(absl::StrCat("ps:", task_index, " at ", address)),
        address_(address),
        options_(options),
        channel_(CreateChannel(address)),
        stub_(PsService::NewStub(channel_)),
        raw_lookup_(channel_),
        raw_update_(channel_) {}

  const std::string& name() const override { return name_; }
  // Over the data plane, pieces of a large read are served on both of its connections' threads
  // and copied out on both reader threads: 1 MiB pieces read one 4 MiB variable ~1.7x as fast.
  // Over gRPC they were slower than one call (~1.9 against ~2.6 GB/s), so a read goes whole there.
  int64_t read_piece_bytes() const override {
    return options_.data_plane && !CurrentTransportSecurity()->tls() ? int64_t{1} << 20 : 0;
  }
  // Over the data plane (once it is found): the pushes that bring rows back share its priority
  // connection, which the ps serves in order.
  bool ordered() const override {
    absl::MutexLock lock(&data_mu_);
    return data_ != nullptr;
  }

  void CreateShardsAsync(const CreateShardsRequest* request, CreateShardsResponse* response,
                         Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->CreateShards(c, request, response, std::move(cb));
    }, std::move(done), /*wait_for_ready=*/true);
  }
  void ListShardsAsync(const ListShardsRequest* request, ListShardsResponse* response,
                       Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->ListShards(c, request, response, std::move(cb));
    }, std::move(done));
  }
  void LookupAsync(const LookupRequest* request, LookupResponse* response, Done done) override {
    if (std::shared_ptr<RawTcpChannel> data = DataPlane()) {
      auto bytes = std::make_shared<std::string>(request->SerializeAsString());
      data->Call(kLookupMethod, {*bytes},
                 [this, data, bytes, response, done = std::move(done)](absl::Status s,
                                                                       RawTcpReply reply) {
                   if (s.ok() && !response->ParseFromArray(reply.bytes.data(),
                                                           static_cast<int>(reply.bytes.size()))) {
                     s = absl::InternalError("lookup reply: malformed");
                   }
                   done(DataPlaneStatus(data, std::move(s)));
                 });
      return;
    }
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->Lookup(c, request, response, std::move(cb));
    }, std::move(done));
  }
  // The reply stays in the slices gRPC received (no parse into strings): see LookupWireReply.
  void LookupWireAsync(const LookupRequest* request, LookupWireReply* reply,
                       Done done) override {
    if (std::shared_ptr<RawTcpChannel> data = DataPlane()) {
      auto bytes = std::make_shared<std::string>(request->SerializeAsString());
      data->Call(kLookupMethod, {*bytes},
                 [this, data, bytes, reply, done = std::move(done)](absl::Status s,
                                                                    RawTcpReply raw) {
                   // The reply stays in the buffer it was received into.
                   if (s.ok()) reply->Set({raw.bytes}, std::move(raw.owner));
                   done(DataPlaneStatus(data, std::move(s)));
                 });
      return;
    }
    auto bytes = std::make_shared<grpc::ByteBuffer>();
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      raw_lookup_.UnaryCall(c, "/pstrain.PsService/Lookup", grpc::StubOptions(), request,
                            bytes.get(), std::move(cb));
    }, [bytes, reply, done = std::move(done)](absl::Status status) {
      if (status.ok()) {
        auto slices = std::make_shared<std::vector<grpc::Slice>>();
        if (!bytes->Dump(slices.get()).ok()) {
          done(absl::InternalError("lookup reply: could not read the received bytes"));
          return;
        }
        std::vector<absl::string_view> chunks = SliceViews(*slices);  // before `slices` moves
        reply->Set(std::move(chunks), std::move(slices));
      }
      done(std::move(status));
    });
  }
  void ReadAsync(const ReadRequest* request, ReadResponse* response, Done done) override {
    if (std::shared_ptr<RawTcpChannel> data = DataPlane()) {
      auto bytes = std::make_shared<std::string>(request->SerializeAsString());
      data->Call(kReadMethod, {*bytes},
                 [this, data, bytes, response, done = std::move(done)](absl::Status s,
                                                                       RawTcpReply reply) {
                   if (s.ok() && !response->ParseFromArray(reply.bytes.data(),
                                                           static_cast<int>(reply.bytes.size()))) {
                     s = absl::InternalError("read reply: malformed");
                   }
                   done(DataPlaneStatus(data, std::move(s)));
                 });
      return;
    }
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->Read(c, request, response, std::move(cb));
    }, std::move(done));
  }
  // The request's ids and values go out as slices over the request itself (ZeroCopyMessage), not
  // copied first: `done` runs once the call has finished and gRPC has let go of that memory (both
  // are counted down by `pending`), as the caller may free the request from `done`.
  void UpdateAsync(const UpdateRequest* request, UpdateResponse* response, Done done) override {
    SendUpdate(request, nullptr, response, std::move(done));
  }
  // The same, with the values spliced into each op as its field 5 (after the op's own fields: a
  // parser takes the last), referenced like the request's own large fields.
  void UpdateWithValuesAsync(const UpdateRequest* request,
                             const std::vector<absl::string_view>* values,
                             UpdateResponse* response, Done done) override {
    SendUpdate(request, values, response, std::move(done));
  }

  void ExportAsync(const ExportRequest* request, ExportResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->Export(c, request, response, std::move(cb));
    }, std::move(done));
  }
  void HealthAsync(const HealthRequest* request, HealthResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->Health(c, request, response, std::move(cb));
    }, std::move(done));
  }
  void SaveShardsAsync(const SaveShardsRequest* request, SaveShardsResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->SaveShards(c, request, response, std::move(cb));
    }, std::move(done), /*wait_for_ready=*/true);
  }
  void RestoreShardsAsync(const RestoreShardsRequest* request, RestoreShardsResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->RestoreShards(c, request, response, std::move(cb));
    }, std::move(done), /*wait_for_ready=*/true);
  }
  void CommitRestoreAsync(const CommitRestoreRequest* request, CommitRestoreResponse* response, Done done) override {
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      stub_->async()->CommitRestore(c, request, response, std::move(cb));
    }, std::move(done), /*wait_for_ready=*/true);
  }

 private:
  // UpdateRequest's wire format: each op as its own fields, then (*values)[i] as field 5; then the
  // request's step (field 2), return_rows (field 3) and return_slots (field 4).
  static absl::StatusOr<grpc::ByteBuffer> ZeroCopyUpdate(
      const UpdateRequest& request, const std::vector<absl::string_view>& values,
      std::function<void()> released) {
    using google::protobuf::internal::WireFormatLite;
    using google::protobuf::io::CodedOutputStream;
    auto extra = [&values](int i) {
      return i < static_cast<int>(values.size()) ? values[i] : absl::string_view();
    };
    std::vector<size_t> op_bytes(request.ops_size());
    size_t total = 0;
    for (int i = 0; i < request.ops_size(); ++i) {
      op_bytes[i] = request.ops(i).ByteSizeLong();  // also caches the sizes serializing needs
      if (!extra(i).empty()) {
        op_bytes[i] += 1 + CodedOutputStream::VarintSize64(extra(i).size()) + extra(i).size();
      }
      total += 1 + CodedOutputStream::VarintSize64(op_bytes[i]) + op_bytes[i];
    }
    const uint64_t step = static_cast<uint64_t>(request.step());
    if (step != 0) total += 1 + CodedOutputStream::VarintSize64(step);
    if (request.return_rows()) total += 2;
    if (request.return_slots()) total += 2;
    return ZeroCopyWrite(
        total,
        [&](CodedOutputStream* out) {
          for (int i = 0; i < request.ops_size(); ++i) {
            out->WriteTag(WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
            out->WriteVarint64(op_bytes[i]);
            request.ops(i).SerializeWithCachedSizes(out);
            if (extra(i).empty()) continue;
            out->WriteTag(WireFormatLite::MakeTag(5, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
            out->WriteVarint64(extra(i).size());
            out->WriteRawMaybeAliased(extra(i).data(), static_cast<int>(extra(i).size()));
          }
          if (step != 0) {
            out->WriteTag(WireFormatLite::MakeTag(2, WireFormatLite::WIRETYPE_VARINT));
            out->WriteVarint64(step);
          }
          if (request.return_rows()) {
            out->WriteTag(WireFormatLite::MakeTag(3, WireFormatLite::WIRETYPE_VARINT));
            out->WriteVarint64(1);
          }
          if (request.return_slots()) {
            out->WriteTag(WireFormatLite::MakeTag(4, WireFormatLite::WIRETYPE_VARINT));
            out->WriteVarint64(1);
          }
        },
        std::move(released), "UpdateRequest");
  }

  void SendUpdate(const UpdateRequest* request, const std::vector<absl::string_view>* values,
                  UpdateResponse* response, Done done) {
    if (std::shared_ptr<RawTcpChannel> data = DataPlane()) {
      // UpdateRequest's wire format as pieces: each op's own fields serialized, its values (from
      // the caller's buffers, not copied) spliced in as field 5, then the step.
      auto frame = std::make_shared<UpdateFrame>(*request, values);
      data->Call(kUpdateMethod, frame->pieces,
                 [this, data, frame, response, done = std::move(done)](absl::Status s,
                                                                       RawTcpReply reply) {
                   // Empty unless the request asked for the rows (return_rows).
                   if (s.ok() && !response->ParseFromArray(reply.bytes.data(),
                                                           static_cast<int>(reply.bytes.size()))) {
                     s = absl::InternalError("update reply: malformed");
                   }
                   done(DataPlaneStatus(data, std::move(s)));
                 },
                 /*priority=*/request->return_rows());
      return;
    }
    struct Pending {
      std::atomic<int> count{2};
      absl::Status status;
      Done done;
      void CountDown() {
        if (count.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          done(std::move(status));
          delete this;
        }
      }
    };
    auto* pending = new Pending;
    pending->done = std::move(done);
    auto released = [pending] { pending->CountDown(); };
    absl::StatusOr<grpc::ByteBuffer> serialized =
        values == nullptr ? ZeroCopyMessage(*request, released)
                          : ZeroCopyUpdate(*request, *values, released);
    if (!serialized.ok()) {
      pending->status = absl::Status(serialized.status().code(),
                                     absl::StrCat(name_, ": update request: ",
                                                  serialized.status().message()));
      pending->CountDown();
      return;
    }
    auto bytes = std::make_shared<grpc::ByteBuffer>();
    bytes->Swap(&*serialized);  // (a copy would hold references of its own)
    Call([=](grpc::ClientContext* c, std::function<void(grpc::Status)> cb) {
      raw_update_.UnaryCall(c, "/pstrain.PsService/Update", grpc::StubOptions(), bytes.get(),
                            response, std::move(cb));
    }, [bytes, pending](absl::Status status) mutable {
      bytes.reset();  // our reference to the slices
      pending->status = std::move(status);
      pending->CountDown();
    });
  }

  // Issues one callback-API call through `start`; the context lives until the callback has run.
  // Creating shards and checkpoint calls wait for the connection, up to the deadline: a ps still
  // starting, or a handshake lost on a busy machine, is waited for rather than failed. Data-path
  // calls, ListShards and Health fail fast, so a down ps is noticed at once (and recovered).
  template <typename Start>
  void Call(Start start, Done done, bool wait_for_ready = false) {
    auto* context = new grpc::ClientContext();
    context->set_wait_for_ready(wait_for_ready);
    context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
    start(context, [this, context, done = std::move(done)](grpc::Status status) {
      delete context;
      done(FromGrpcStatus(status, name_));
    });
  }

  // UpdateRequest's wire format in pieces over the request and the caller's values.
  struct UpdateFrame {
    std::string header;  // the small encoded parts (tags, lengths, shard names), back to back
    std::vector<absl::string_view> pieces;

    UpdateFrame(const UpdateRequest& request, const std::vector<absl::string_view>* values) {
      // Each piece: a range of `header`, or a view of the caller's ids or values (not copied).
      struct Piece {
        size_t begin = 0, end = 0;
        absl::string_view external;
      };
      using google::protobuf::internal::WireFormatLite;
      using google::protobuf::io::CodedOutputStream;
      constexpr WireFormatLite::WireType kLen = WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
      constexpr WireFormatLite::WireType kVarint = WireFormatLite::WIRETYPE_VARINT;
      std::vector<Piece> parts;
      auto varint = [this](uint64_t v) {
        uint8_t bytes[10];  // a varint's most
        const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(v, bytes);
        header.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(end - bytes));
      };
      auto varint_size = [](uint64_t v) -> size_t { return CodedOutputStream::VarintSize64(v); };
      auto tag = [&](int field, WireFormatLite::WireType wire) {
        varint(WireFormatLite::MakeTag(field, wire));
      };
      auto open = [&] { parts.push_back(Piece{header.size(), header.size(), {}}); };
      auto close = [&] { parts.back().end = header.size(); };
      auto external = [&](absl::string_view v) { parts.push_back(Piece{0, 0, v}); };
      for (int i = 0; i < request.ops_size(); ++i) {
        const UpdateOp& op = request.ops(i);
        absl::string_view v = op.values();
        if (values != nullptr && i < static_cast<int>(values->size()) && !(*values)[i].empty()) {
          v = (*values)[i];
        }
        const bool has_ids = op.rows_case() == UpdateOp::kIds;
        const std::string range = op.rows_case() == UpdateOp::kRange
                                      ? op.range().SerializeAsString() : std::string();
        // The op's size, field by field: shard (1), kind (2), ids (3) or range (4), dtype (6),
        // values (5) last.
        size_t bytes = 0;
        if (!op.shard().empty()) bytes += 1 + varint_size(op.shard().size()) + op.shard().size();
        if (op.kind() != 0) bytes += 1 + varint_size(static_cast<uint64_t>(op.kind()));
        if (has_ids) bytes += 1 + varint_size(op.ids().size()) + op.ids().size();
        if (op.rows_case() == UpdateOp::kRange) bytes += 1 + varint_size(range.size()) + range.size();
        if (op.dtype() != 0) bytes += 1 + varint_size(static_cast<uint64_t>(op.dtype()));
        if (op.read_version() != 0) {
          bytes += 1 + varint_size(static_cast<uint64_t>(op.read_version()));
        }
        if (!v.empty()) bytes += 1 + varint_size(v.size()) + v.size();
        open();
        tag(1, kLen);
        varint(bytes);
        if (!op.shard().empty()) {
          tag(1, kLen);
          varint(op.shard().size());
          header.append(op.shard());
        }
        if (op.kind() != 0) {
          tag(2, kVarint);
          varint(static_cast<uint64_t>(op.kind()));
        }
        if (has_ids) {
          tag(3, kLen);
          varint(op.ids().size());
          close();
          external(op.ids());
          open();
        }
        if (op.rows_case() == UpdateOp::kRange) {
          tag(4, kLen);
          varint(range.size());
          header.append(range);
        }
        if (op.dtype() != 0) {
          tag(6, kVarint);
          varint(static_cast<uint64_t>(op.dtype()));
        }
        if (op.read_version() != 0) {
          tag(7, kVarint);
          varint(static_cast<uint64_t>(op.read_version()));
        }
        if (!v.empty()) {
          tag(5, kLen);
          varint(v.size());
          close();
          external(v);
          continue;
        }
        close();
      }
      if (request.step() != 0 || request.return_rows() || request.return_slots()) {
        open();
        if (request.step() != 0) {
          tag(2, kVarint);
          varint(static_cast<uint64_t>(request.step()));
        }
        if (request.return_rows()) {
          tag(3, kVarint);
          varint(1);
        }
        if (request.return_slots()) {
          tag(4, kVarint);
          varint(1);
        }
        close();
      }
      // `header` stops growing here: the views into it stay valid.
      for (const Piece& p : parts) {
        const absl::string_view piece =
            p.external.data() != nullptr || p.end == p.begin
                ? p.external
                : absl::string_view(header).substr(p.begin, p.end - p.begin);
        if (!piece.empty()) pieces.push_back(piece);
      }
    }
  };

  // Method numbers of PsService (as the server's handlers use them).
  inline static const int kLookupMethod = PsMethodNumber("Lookup");
  inline static const int kReadMethod = PsMethodNumber("Read");
  inline static const int kUpdateMethod = PsMethodNumber("Update");

  // The data plane's channel, or null (use gRPC): found through Health on first use, and again
  // after it broke (at most once a second while the ps has none or can't be asked).
  std::shared_ptr<RawTcpChannel> DataPlane() {
    if (!options_.data_plane) return nullptr;
    absl::MutexLock lock(&data_mu_);
    if (data_ != nullptr) return data_;
    const std::shared_ptr<const TransportSecurity> security = CurrentTransportSecurity();
    if (security->tls() || absl::Now() - data_probed_ < absl::Seconds(1)) return nullptr;
    data_probed_ = absl::Now();
    HealthResponse health;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    if (!stub_->Health(&context, HealthRequest(), &health).ok() || health.data_port() <= 0) {
      return nullptr;
    }
    std::string host = address_.substr(0, address_.rfind(':'));
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    RawTcpChannelOptions o;
    o.token = security->auth_token;
    o.timeout = options_.timeout;
    o.name = absl::StrCat(name_, " (data plane port ", health.data_port(), ")");
    // Pushes that end a worker's turn at the dense part (they ask for the rows back) travel on
    // their own connection, not behind the table rows' traffic.
    o.priority_connection = true;
    data_ = std::make_shared<RawTcpChannel>(host, health.data_port(), o);
    return data_;
  }

  // A data-plane call's status as the gRPC path reports it (the ps named); a broken connection
  // also drops the channel, so the next call asks the (maybe restarted) ps again.
  absl::Status DataPlaneStatus(const std::shared_ptr<RawTcpChannel>& channel, absl::Status s) {
    if (s.ok()) return s;
    if (s.code() == absl::StatusCode::kUnavailable ||
        s.code() == absl::StatusCode::kDeadlineExceeded) {
      absl::MutexLock lock(&data_mu_);
      if (data_ == channel) {
        data_.reset();
        data_probed_ = absl::InfinitePast();
      }
      return s;  // its message names the ps already
    }
    return absl::Status(s.code(), absl::StrCat(name_, ": ", s.message()));
  }

  const std::string name_;
  const std::string address_;
  const GrpcPsClientOptions options_;
  mutable absl::Mutex data_mu_;
  std::shared_ptr<RawTcpChannel> data_ ABSL_GUARDED_BY(data_mu_);
  absl::Time data_probed_ ABSL_GUARDED_BY(data_mu_) = absl::InfinitePast();
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<PsService::Stub> stub_;
  // Lookup with the reply as raw bytes (LookupWireAsync).
  grpc::TemplatedGenericStub<LookupRequest, grpc::ByteBuffer> raw_lookup_;
  // Update with the request serialized by ZeroCopyMessage.
  grpc::TemplatedGenericStub<grpc::ByteBuffer, UpdateResponse> raw_update_;
};

}  // namespace

std::unique_ptr<PsClient> NewGrpcPsClient(int task_index, const std::string& address,
                                          const GrpcPsClientOptions& options) {
  return std::make_unique<GrpcPsClient>(task_index, address, options);
}

}  // namespace pstrain
