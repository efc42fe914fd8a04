// A fixed-size pool of threads running queued functions. Waits on a CondVar; never polls.
#ifndef PSTRAIN_COMMON_THREAD_POOL_H_
#define PSTRAIN_COMMON_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {

// Thread-safe. The destructor runs every function already queued, then joins the threads.
class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> fn);
  int num_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();

  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  // Below: guarded by mu_.
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

// Runs fn(0), ..., fn(pieces - 1) on the calling thread and on up to pieces - 1 of `pool`'s threads
// (null: the caller alone), and returns when all have run. Pieces are claimed from a shared
// counter, and the caller only waits for pieces some thread has already started: if the pool is
// busy (or the caller is one of its threads), the caller simply runs every piece itself, so it is
// safe to call from anywhere, pool threads included. Helpers that start late find nothing left.
void ParallelFor(ThreadPool* pool, int64_t pieces, const std::function<void(int64_t)>& fn);

// Calls fn(begin, end) over [0, n) cut into `pieces` nearly equal ranges (at most n), in parallel
// as ParallelFor.
void ParallelRanges(ThreadPool* pool, int64_t n, int64_t pieces,
                    const std::function<void(int64_t, int64_t)>& fn);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_THREAD_POOL_H_
