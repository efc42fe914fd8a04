// The NCCL collective group (nccl_group.h). Compiled only in a build with CUDA (plain C++: the host
// compiler, no kernels of its own); nccl_group_stub.cc otherwise.
//
// Forming the group:
//
//   CUDA stream --> Join (GroupMembership: heartbeats start) --> rank 0 makes the ncclUniqueId and
//   Sets it at the rendezvous; the others Get it --> ncclCommInitRankConfig (nonblocking) --> Poll
//
// Each collective, one at a time (op_mu_):
//
//   whole? --> stage the host data in buffer_ --> enqueue NCCL's op(s) on stream_ --> Poll
//          --> copy the result back --> Poll
//
// Poll waits for NCCL's nonblocking enqueue and for the stream, and fails on an NCCL or CUDA
// error, past the deadline, or when the group breaks (Abort, a heartbeat that learns the
// generation was aborted). A failure aborts the communicator (ncclCommAbort: it never waits for
// peers, and stops this rank's kernels still waiting for them) and is diagnosed by
// GroupMembership::Fail; every later call is kAborted.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/group_membership.h"
#include "collective/nccl_group.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// Where rank 0 publishes the communicator's unique id in the generation's key-value store.
constexpr char kUniqueIdKey[] = "nccl/unique_id";
// A count of more elements than this from a peer is corrupt (as GlooGroup's all-gather checks).
constexpr int64_t kMaxGatherCount = int64_t{1} << 40;

std::string CudaText(const char* call, cudaError_t e) {
  return absl::StrCat(call, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

std::string NcclText(const char* call, ncclResult_t r) {
  std::string text = absl::StrCat(call, ": ", ncclGetErrorString(r));
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') absl::StrAppend(&text, " (", last, ")");
  return text;
}

// An NCCL call's result inside a collective: ncclInProgress is fine (the communicator is
// nonblocking; Poll waits for it).
absl::Status NcclStatus(const char* call, ncclResult_t r) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  return absl::InternalError(NcclText(call, r));
}

absl::Status CudaStatus(const char* call, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // clears a non-sticky error, so later calls don't see it again
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(CudaText(call, e));
  return absl::InternalError(CudaText(call, e));
}

template <typename T>
ncclDataType_t NcclType();
template <>
ncclDataType_t NcclType<float>() {
  return ncclFloat;
}
template <>
ncclDataType_t NcclType<int64_t>() {
  return ncclInt64;
}

// Makes `gpu` the calling thread's current CUDA device for a scope, then restores the caller's: a
// collective or an Abort must not move the caller's own GPU work to another device.
class ScopedDevice {
 public:
  explicit ScopedDevice(int gpu) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    status_ = CudaStatus("cudaSetDevice", cudaSetDevice(gpu));
  }
  ~ScopedDevice() {
    if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

// Thread-safe: collectives are serialized on op_mu_, which also guards every use of the
// communicator, stream and buffer (so the communicator is used from one thread at a time); Abort
// and the heartbeat's break reach a collective in flight through the membership (Poll).
class NcclGroup final : public CollectiveGroup {
 public:
  NcclGroup(const CollectiveGroupOptions& options, int gpu)
      : membership_(options, /*on_break=*/nullptr),  // Poll naps on the membership's break
        options_(membership_.options()),
        gpu_(gpu) {}

  ~NcclGroup() override {
    membership_.Stop();
    absl::MutexLock lock(&op_mu_);
    ScopedDevice device(gpu_);
    if (comm_ != nullptr) CloseLocked();
    if (stream_ == nullptr) return;
    // The stream drains once the communicator is gone (an aborted kernel returns); freeing the
    // buffer under a kernel still running would fault.
    StartClockLocked(options_.timeout);
    const absl::Status drained =
        PollLocked(/*comm=*/false, /*stream=*/true, /*interruptible=*/false);
    if (!drained.ok()) {
      LOG(WARNING) << Describe() << " leaves its device buffer and stream behind: "
                   << drained.message();
      return;
    }
    if (buffer_ != nullptr) cudaFree(buffer_);
    cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    absl::MutexLock lock(&op_mu_);
    ScopedDevice device(gpu_);
    const std::string where = absl::StrCat(Describe(), " on GPU ", gpu_);
    if (!device.status().ok()) {
      return absl::Status(device.status().code(),
                          absl::StrCat(where, ": ", device.status().message()));
    }
    cudaStream_t stream = nullptr;
    const absl::Status created = CudaStatus(
        "cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (!created.ok()) {
      return absl::Status(created.code(), absl::StrCat(where, ": ", created.message()));
    }
    stream_ = stream;

    RETURN_IF_ERROR(membership_.Join());
    ncclUniqueId id;
    if (options_.rank == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) {
        return membership_.Fail("ncclGetUniqueId", NcclText("ncclGetUniqueId", r),
                                /*timed_out=*/false, "nccl");
      }
      const absl::Status set = membership_.rendezvous().Set(
          kUniqueIdKey, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
      if (!set.ok()) {
        return absl::Status(set.code(), absl::StrCat(Describe(),
                                                     " could not publish its NCCL id: ",
                                                     set.message()));
      }
    } else {
      absl::StatusOr<std::string> value =
          membership_.rendezvous().Get(kUniqueIdKey, options_.join_timeout);
      if (!value.ok()) {
        return absl::Status(value.status().code(),
                            absl::StrCat(Describe(), " could not get rank 0's NCCL id: ",
                                         value.status().message()));
      }
      if (value->size() != sizeof(id)) {
        return absl::FailedPreconditionError(
            absl::StrCat(Describe(), ": rank 0's NCCL id is ", value->size(), " bytes, this NCCL's ",
                         sizeof(id), " (the ranks run different NCCL versions?)"));
      }
      std::copy(value->begin(), value->end(), reinterpret_cast<char*>(&id));
    }

    // Nonblocking, so that a peer that never arrives can't hold this rank: Poll waits for it,
    // up to the join timeout, and a break ends the wait.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    absl::Status status = NcclStatus(
        "ncclCommInitRankConfig",
        ncclCommInitRankConfig(&comm, options_.size, id, options_.rank, &config));
    comm_ = comm;
    if (status.ok() && comm_ == nullptr) {
      status = absl::InternalError("ncclCommInitRankConfig made no communicator");
    }
    if (status.ok()) {
      StartClockLocked(options_.join_timeout);
      status = PollLocked(/*comm=*/true, /*stream=*/false, /*interruptible=*/true);
    }
    if (!status.ok()) return FailLocked("ncclCommInitRank", status);
    return absl::OkStatus();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  const std::vector<std::string>& names() const override { return membership_.names(); }

  absl::Status AllReduce(float* data, int64_t n, ReduceOp op) override {
    RETURN_IF_ERROR(CheckLength("all_reduce", n));
    RETURN_IF_ERROR(Run("all_reduce", [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
      if (n == 0) return absl::OkStatus();
      const size_t bytes = static_cast<size_t>(n) * sizeof(float);
      RETURN_IF_ERROR(ReserveLocked(bytes));
      RETURN_IF_ERROR(CopyInLocked(buffer_, data, bytes));
      RETURN_IF_ERROR(NcclStatus("ncclAllReduce",
                                 ncclAllReduce(buffer_, buffer_, static_cast<size_t>(n), ncclFloat,
                                               ncclSum, comm_, stream_)));
      return CopyOutLocked(data, buffer_, bytes);
    }));
    FinishReduce(op, data, n, options_.size);
    return absl::OkStatus();
  }

  absl::Status Broadcast(float* data, int64_t n, int root) override {
    RETURN_IF_ERROR(CheckBroadcast(root, n, options_.size));
    return Run("broadcast", [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
      if (n == 0) return absl::OkStatus();
      const size_t bytes = static_cast<size_t>(n) * sizeof(float);
      RETURN_IF_ERROR(ReserveLocked(bytes));
      if (options_.rank == root) RETURN_IF_ERROR(CopyInLocked(buffer_, data, bytes));
      RETURN_IF_ERROR(NcclStatus("ncclBroadcast",
                                 ncclBroadcast(buffer_, buffer_, static_cast<size_t>(n), ncclFloat,
                                               root, comm_, stream_)));
      return CopyOutLocked(data, buffer_, bytes);
    });
  }

  absl::Status AllGather(absl::Span<const float> mine, std::vector<float>* all,
                         std::vector<int64_t>* counts) override {
    return Gather(mine, all, counts);
  }
  absl::Status AllGather(absl::Span<const int64_t> mine, std::vector<int64_t>* all,
                         std::vector<int64_t>* counts) override {
    return Gather(mine, all, counts);
  }

  absl::Status Barrier() override {
    return Run("barrier", [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
      RETURN_IF_ERROR(ReserveLocked(sizeof(float)));
      RETURN_IF_ERROR(CudaStatus("cudaMemsetAsync",
                                 cudaMemsetAsync(buffer_, 0, sizeof(float), stream_)));
      RETURN_IF_ERROR(NcclStatus(
          "ncclAllReduce", ncclAllReduce(buffer_, buffer_, 1, ncclFloat, ncclSum, comm_, stream_)));
      return PollLocked(/*comm=*/true, /*stream=*/true, /*interruptible=*/true);
    });
  }

  // Wakes a collective in flight, which aborts the communicator; with none in flight, the next
  // call (kAborted) or the destructor does: the communicator is used from one thread at a time.
  // The peers learn of it from the rendezvous at their next heartbeat (NCCL would not tell them).
  void Abort(absl::string_view reason) override { membership_.Abort(reason); }

 private:
  std::string Describe() const { return membership_.Describe(); }

  // Every rank's `mine`, in rank order: the lengths first (each rank's in its slot, gathered in
  // place), then each rank's values broadcast from it into its place in one grouped launch, so
  // that unequal lengths need no padding.
  template <typename T>
  absl::Status Gather(absl::Span<const T> mine, std::vector<T>* all, std::vector<int64_t>* counts) {
    return Run("all_gather", [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
      const int size = options_.size;
      const int rank = options_.rank;
      counts->assign(size, 0);
      (*counts)[rank] = static_cast<int64_t>(mine.size());
      const size_t count_bytes = static_cast<size_t>(size) * sizeof(int64_t);
      RETURN_IF_ERROR(ReserveLocked(count_bytes));
      int64_t* slots = static_cast<int64_t*>(buffer_);
      RETURN_IF_ERROR(CopyInLocked(slots + rank, &(*counts)[rank], sizeof(int64_t)));
      RETURN_IF_ERROR(NcclStatus("ncclAllGather", ncclAllGather(slots + rank, slots, 1,
                                                                ncclInt64, comm_, stream_)));
      RETURN_IF_ERROR(CopyOutLocked(counts->data(), slots, count_bytes));
      std::vector<size_t> offsets(size);
      size_t total = 0;
      for (int r = 0; r < size; ++r) {
        if ((*counts)[r] < 0 || (*counts)[r] > kMaxGatherCount) {
          return absl::InternalError(absl::StrCat("rank ", r, " sent a length of ", (*counts)[r]));
        }
        offsets[r] = total;
        total += static_cast<size_t>((*counts)[r]);
      }
      all->resize(total);
      if (total == 0) return absl::OkStatus();
      RETURN_IF_ERROR(ReserveLocked(total * sizeof(T)));
      T* values = static_cast<T*>(buffer_);
      if (!mine.empty()) {
        RETURN_IF_ERROR(CopyInLocked(values + offsets[rank], mine.data(), mine.size() * sizeof(T)));
      }
      RETURN_IF_ERROR(NcclStatus("ncclGroupStart", ncclGroupStart()));
      ncclResult_t r = ncclSuccess;
      for (int from = 0; from < size && (r == ncclSuccess || r == ncclInProgress); ++from) {
        if ((*counts)[from] == 0) continue;
        T* place = values + offsets[from];
        r = ncclBroadcast(place, place, static_cast<size_t>((*counts)[from]), NcclType<T>(), from,
                          comm_, stream_);
      }
      const ncclResult_t end = ncclGroupEnd();  // always, to close the group
      RETURN_IF_ERROR(NcclStatus("ncclBroadcast", r));
      RETURN_IF_ERROR(NcclStatus("ncclGroupEnd", end));
      return CopyOutLocked(all->data(), values, total * sizeof(T));
    });
  }

  // Runs one collective (`fn` answers the failure's detail: kDeadlineExceeded for a timeout) and
  // turns a failure into the diagnosed status, breaking the group.
  template <typename Fn>
  absl::Status Run(const char* what, Fn&& fn) {
    absl::MutexLock op_lock(&op_mu_);
    ScopedDevice device(gpu_);
    absl::Status whole = membership_.CheckWhole(what);
    if (!whole.ok()) {
      AbortCommLocked();  // the group broke between collectives
      return whole;
    }
    StartClockLocked(options_.timeout);
    absl::Status status = device.status();
    if (status.ok()) status = fn();
    if (status.ok()) return absl::OkStatus();
    return FailLocked(what, status);
  }

  // Aborts the communicator, then lets the membership break the group and name the cause.
  absl::Status FailLocked(const char* what, const absl::Status& trouble)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
    AbortCommLocked();
    return membership_.Fail(what, trouble.message(),
                            trouble.code() == absl::StatusCode::kDeadlineExceeded, "nccl");
  }

  void AbortCommLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
    if (comm_ == nullptr) return;
    const ncclResult_t r = ncclCommAbort(comm_);
    if (r != ncclSuccess) {
      LOG(WARNING) << Describe() << ": " << NcclText("ncclCommAbort", r)
                   << " (the communicator is dropped anyway)";
    }
    comm_ = nullptr;
  }

  // The destructor's: a whole group flushes what this rank sent (ncclCommFinalize) before freeing
  // the communicator, so that a peer still receiving its last bytes gets them; a broken group, or
  // one whose flush does not end within options.timeout, is aborted (no waiting for peers).
  void CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
    if (membership_.broken_reason().empty()) {
      StartClockLocked(options_.timeout);
      absl::Status status = NcclStatus("ncclCommFinalize", ncclCommFinalize(comm_));
      if (status.ok()) status = PollLocked(/*comm=*/true, /*stream=*/false, /*interruptible=*/true);
      if (status.ok()) status = NcclStatus("ncclCommDestroy", ncclCommDestroy(comm_));
      if (status.ok()) {
        comm_ = nullptr;
        return;
      }
      LOG(WARNING) << Describe() << " could not close its communicator (" << status.message()
                   << "): aborting it";
    }
    AbortCommLocked();
  }

  void StartClockLocked(absl::Duration limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
    limit_ = limit;
    deadline_ = absl::Now() + limit;
  }

  // Waits until NCCL has finished what was enqueued (`comm`: the communicator is nonblocking, so a
  // call may answer ncclInProgress and go on in the background) and the stream has run everything
  // given to it (`stream`), until the deadline StartClockLocked set.
  //
  // This polls, napping between polls (20 us, doubling up to 1 ms), because CUDA offers no
  // blocking wait with a timeout: cudaStreamSynchronize and cudaEventSynchronize wait forever, and
  // a collective whose peer is gone never completes; NCCL's async error can only be polled too.
  // An `interruptible` nap waits on the membership's break, so that Abort or a heartbeat's abort
  // ends it at once; the teardown's waits are not interruptible.
  //
  // Errors (a failure's detail): kDeadlineExceeded past the deadline; kCancelled when the group
  // broke; kInternal for an NCCL or CUDA error.
  absl::Status PollLocked(bool comm, bool stream, bool interruptible)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
    absl::Duration nap = absl::Microseconds(20);
    while (true) {
      bool done = true;
      if (comm) {
        ncclResult_t async = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
        if (r != ncclSuccess) return absl::InternalError(NcclText("ncclCommGetAsyncError", r));
        if (async == ncclInProgress) {
          done = false;
        } else if (async != ncclSuccess) {
          return absl::InternalError(NcclText("the communicator failed", async));
        }
      }
      if (done && stream) {
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaErrorNotReady) {
          done = false;
        } else if (e != cudaSuccess) {
          return CudaStatus("cudaStreamQuery", e);
        }
      }
      if (done) return absl::OkStatus();
      if (interruptible && !membership_.broken_reason().empty()) {
        return absl::CancelledError(
            absl::StrCat("abandoned ", absl::ToInt64Milliseconds(absl::Now() - (deadline_ - limit_)),
                         " ms in, and the communicator aborted"));
      }
      const absl::Time now = absl::Now();
      if (now >= deadline_) {
        return absl::DeadlineExceededError(absl::StrCat(
            "timed out after ", absl::ToInt64Milliseconds(limit_), " ms waiting for ",
            comm ? "NCCL" : "the GPU stream", ", and the communicator aborted"));
      }
      const absl::Duration wait = std::min(nap, deadline_ - now);
      if (interruptible) {
        membership_.AwaitBreak(wait);
      } else {
        absl::SleepFor(wait);
      }
      nap = std::min(nap * 2, absl::Milliseconds(1));
    }
  }

  // Grows buffer_ to at least `bytes`. The stream is idle here (every collective waits for it), so
  // the old buffer is freed at once.
  absl::Status ReserveLocked(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
    if (bytes <= capacity_) return absl::OkStatus();
    if (buffer_ != nullptr) {
      cudaFree(buffer_);
      buffer_ = nullptr;
      capacity_ = 0;
    }
    void* buffer = nullptr;
    RETURN_IF_ERROR(CudaStatus("cudaMalloc", cudaMalloc(&buffer, bytes)));
    buffer_ = buffer;
    capacity_ = bytes;
    return absl::OkStatus();
  }

  // From pageable host memory: the copy is staged before the call returns, so the caller's buffer
  // is free again at once.
  absl::Status CopyInLocked(void* device, const void* host, size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
    return CudaStatus("cudaMemcpyAsync",
                      cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_));
  }

  // Waits for the collective, then copies its result back. Only then: a copy to pageable memory
  // returns when it is done, so it must not queue behind a collective that may never end.
  absl::Status CopyOutLocked(void* host, const void* device, size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_) {
    RETURN_IF_ERROR(PollLocked(/*comm=*/true, /*stream=*/true, /*interruptible=*/true));
    RETURN_IF_ERROR(CudaStatus(
        "cudaMemcpyAsync", cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_)));
    return PollLocked(/*comm=*/false, /*stream=*/true, /*interruptible=*/true);
  }

  GroupMembership membership_;
  const CollectiveGroupOptions& options_;  // membership_'s, with the name filled in
  const int gpu_;
  absl::Mutex op_mu_;  // one collective at a time, and every use of what follows
  // Below: guarded by op_mu_.
  ncclComm_t comm_ ABSL_GUARDED_BY(op_mu_) = nullptr;  // null once aborted
  cudaStream_t stream_ ABSL_GUARDED_BY(op_mu_) = nullptr;
  void* buffer_ ABSL_GUARDED_BY(op_mu_) = nullptr;  // device memory, capacity_ bytes
  size_t capacity_ ABSL_GUARDED_BY(op_mu_) = 0;
  absl::Time deadline_ ABSL_GUARDED_BY(op_mu_);  // of the current wait, and its length
  absl::Duration limit_ ABSL_GUARDED_BY(op_mu_);
};

}  // namespace

int NcclGpuCount(std::string* why_none) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: "no GPU", not a failure
    if (why_none != nullptr) {
      *why_none = absl::StrCat("no GPU usable (cudaGetDeviceCount: ", cudaGetErrorName(e), ", ",
                               cudaGetErrorString(e), ")");
    }
    return 0;
  }
  if (count == 0 && why_none != nullptr) *why_none = "no GPU (cudaGetDeviceCount found 0)";
  return count;
}

bool NcclGroupAvailable() { return NcclGpuCount() > 0; }

absl::StatusOr<std::unique_ptr<CollectiveGroup>> CreateNcclGroup(
    const CollectiveGroupOptions& options, int gpu) {
  RETURN_IF_ERROR(ValidateGroupOptions(options));
  std::string why_none;
  const int count = NcclGpuCount(&why_none);
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL collectives need a GPU (this process has ", why_none, ")"));
  }
  if (gpu < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CreateNcclGroup: gpu ", gpu, " (a GPU ordinal, or -1 for rank modulo the visible GPUs)"));
  }
  if (gpu >= count) {
    return absl::FailedPreconditionError(absl::StrCat("CreateNcclGroup: GPU ", gpu,
                                                      " asked for, but this process sees ", count,
                                                      " GPU(s)"));
  }
  auto group = std::make_unique<NcclGroup>(options, gpu == -1 ? options.rank % count : gpu);
  RETURN_IF_ERROR(group->Init());
  return std::unique_ptr<CollectiveGroup>(std::move(group));
}

}  // namespace pstrain
