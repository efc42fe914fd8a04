#include "common/memory_account.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {

MemoryAccount::MemoryAccount(int64_t size_bytes, std::string name, int64_t small_bytes)
    : size_(std::max<int64_t>(1, size_bytes)), name_(std::move(name)), small_bytes_(small_bytes) {}

MemoryAccount::Admission& MemoryAccount::Admission::operator=(Admission&& other) noexcept {
  if (this != &other) {
    Release();
    account_ = other.account_;
    bytes_ = other.bytes_;
    other.account_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void MemoryAccount::Admission::Release() {
  if (account_ != nullptr && bytes_ > 0) account_->Give(bytes_);
  account_ = nullptr;
  bytes_ = 0;
}

bool MemoryAccount::MayEnterLocked(uint64_t ticket, int64_t bytes) const {
  if (held_ + bytes > size_) return false;
  return bytes <= small_bytes_ || *waiting_.begin() == ticket;
}

absl::StatusOr<MemoryAccount::Admission> MemoryAccount::Admit(int64_t bytes, absl::Duration wait,
                                                               const std::string& what) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes, " bytes"));
  }
  if (bytes > size_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", bytes, " bytes can never fit ", name_, " of ", size_,
                     " bytes for requests in flight; send smaller requests"));
  }
  absl::MutexLock lock(&mu_);
  const uint64_t ticket = next_ticket_++;
  const bool small = bytes <= small_bytes_;  // not in line
  if (!small) waiting_.insert(ticket);
  struct Args {
    const MemoryAccount* account;
    uint64_t ticket;
    int64_t bytes;
  } args{this, ticket, bytes};
  const bool entered = mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // runs with mu_ held
            return a->account->MayEnterLocked(a->ticket, a->bytes);
          },
          &args),
      wait);
  if (!small) waiting_.erase(ticket);  // entered, or leaves the line: the next one is first now
  if (!entered) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", bytes, " bytes did not fit ", name_, " (", held_, " of ", size_,
                     " bytes held) within ", absl::FormatDuration(wait)));
  }
  held_ += bytes;
  peak_ = std::max(peak_, held_);
  return Admission(this, bytes);
}

MemoryAccount::Admission MemoryAccount::Charge(int64_t bytes) {
  bytes = std::max<int64_t>(0, bytes);
  absl::MutexLock lock(&mu_);
  held_ += bytes;
  peak_ = std::max(peak_, held_);
  return Admission(this, bytes);
}

void MemoryAccount::Give(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  held_ -= bytes;
}

int64_t MemoryAccount::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

int64_t MemoryAccount::peak() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

}  // namespace pstrain
