// One server's account of the bytes it holds for requests and replies in flight: a request is
// read only once its bytes are admitted here, so however many clients send at once, the requests
// held never pass the account's size. Large admissions wait their turn (first come, first served:
// a large request is not starved by a stream of others); small ones (up to small_bytes: a worker's
// lookup) enter as soon as they fit, so they don't queue behind large ones waiting for room. One
// that could never fit is refused at once.
//
//   Admit(bytes)   waits until `bytes` fit beside what is held, then holds them (an Admission,
//                  given back when it goes); kResourceExhausted at once when bytes > size, and
//                  after `wait` when they don't fit in time
//   Charge(bytes)  holds bytes without waiting, even past the size (a reply whose request was
//                  admitted: its handler can't wait once it has started); the requests after it
//                  wait until it is given back
//
// So what is held stays under size + the replies of the requests admitted. Thread-safe.
#ifndef PSTRAIN_COMMON_MEMORY_ACCOUNT_H_
#define PSTRAIN_COMMON_MEMORY_ACCOUNT_H_

#include <cstdint>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pstrain {

class MemoryAccount {
 public:
  // `size_bytes` > 0; `name` says whose account it is in errors ("ps:0's in-flight account").
  // Admissions of up to `small_bytes` (default 1 MiB) don't wait in line.
  MemoryAccount(int64_t size_bytes, std::string name, int64_t small_bytes = int64_t{1} << 20);
  MemoryAccount(const MemoryAccount&) = delete;
  MemoryAccount& operator=(const MemoryAccount&) = delete;

  // Bytes held for as long as it lives (or until Release). Move-only; an empty one holds nothing.
  class Admission {
   public:
    Admission() = default;
    ~Admission() { Release(); }
    Admission(Admission&& other) noexcept : account_(other.account_), bytes_(other.bytes_) {
      other.account_ = nullptr;
      other.bytes_ = 0;
    }
    Admission& operator=(Admission&& other) noexcept;
    Admission(const Admission&) = delete;
    Admission& operator=(const Admission&) = delete;

    int64_t bytes() const { return bytes_; }
    // Gives the bytes back now (idempotent).
    void Release();

   private:
    friend class MemoryAccount;
    Admission(MemoryAccount* account, int64_t bytes) : account_(account), bytes_(bytes) {}
    MemoryAccount* account_ = nullptr;
    int64_t bytes_ = 0;
  };

  // Waits its turn until `bytes` fit, at most `wait`. Errors: kResourceExhausted naming the bytes
  // and the size, at once when bytes > size ("what" says what they are for: "a data-plane request
  // of ps:0"), or after `wait`; kInvalidArgument for bytes < 0.
  absl::StatusOr<Admission> Admit(int64_t bytes, absl::Duration wait, const std::string& what);
  // Holds `bytes` now, past the size if need be.
  Admission Charge(int64_t bytes);

  int64_t size() const { return size_; }
  // Bytes held now.
  int64_t held() const;
  // The most bytes ever held at once.
  int64_t peak() const;

 private:
  void Give(int64_t bytes);
  // Whether the admission holding `ticket` is first in line and its bytes fit.
  bool MayEnterLocked(uint64_t ticket, int64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t size_;
  const std::string name_;
  const int64_t small_bytes_;
  mutable absl::Mutex mu_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  // Large admissions waiting, by ticket (arrival order); the first enters once its bytes fit.
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<uint64_t> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_MEMORY_ACCOUNT_H_
