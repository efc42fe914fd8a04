#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace pstrain {

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 0; i < std::max(1, num_threads); ++i) threads_.emplace_back([this] { Loop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
}

void ThreadPool::Loop() {
  while (true) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return !p->queue_.empty() || p->stopping_;
          },
          this));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

void ParallelFor(ThreadPool* pool, int64_t pieces, const std::function<void(int64_t)>& fn) {
  if (pool == nullptr || pieces <= 1) {
    for (int64_t i = 0; i < pieces; ++i) fn(i);
    return;
  }
  struct State {
    explicit State(int64_t pieces, const std::function<void(int64_t)>* fn)
        : pieces(pieces), fn(fn) {}
    const int64_t pieces;
    const std::function<void(int64_t)>* const fn;  // valid while some piece is unclaimed
    std::atomic<int64_t> next{0};
    absl::Mutex mu;
    int64_t done ABSL_GUARDED_BY(mu) = 0;
  };
  auto state = std::make_shared<State>(pieces, &fn);
  auto work = [](State& s) {
    int64_t ran = 0;
    for (int64_t i; (i = s.next.fetch_add(1, std::memory_order_relaxed)) < s.pieces;) {
      (*s.fn)(i);
      ++ran;
    }
    if (ran > 0) {
      absl::MutexLock lock(&s.mu);
      s.done += ran;
    }
  };
  const int64_t helpers = std::min<int64_t>(pool->num_threads(), pieces - 1);
  for (int64_t h = 0; h < helpers; ++h) pool->Schedule([state, work] { work(*state); });
  work(*state);
  absl::MutexLock lock(&state->mu);
  state->mu.Await(absl::Condition(
      +[](State* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->done == s->pieces; },
      state.get()));
}

void ParallelRanges(ThreadPool* pool, int64_t n, int64_t pieces,
                    const std::function<void(int64_t, int64_t)>& fn) {
  pieces = std::max<int64_t>(1, std::min(pieces, n));
  ParallelFor(pool, pieces, [&](int64_t p) { fn(n * p / pieces, n * (p + 1) / pieces); });
}

}  // namespace pstrain
