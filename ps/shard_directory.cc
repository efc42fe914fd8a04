#include "ps/shard_directory.h"

namespace pstrain {

ShardDirectory::Reader::Reader(const ShardDirectory* directory) : directory_(directory) {
  directory->AwaitAnswered();
  directory->mu_.ReaderLock();
}

ShardDirectory::Reader::~Reader() { directory_->mu_.ReaderUnlock(); }

// The accessors run while the Reader or Writer holds the lock, which the analysis can't connect
// to the object's own pointer.
const ShardDirectory::FixedMap& ShardDirectory::Reader::fixed() const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return directory_->fixed_;
}

const ShardDirectory::DynamicMap& ShardDirectory::Reader::dynamic() const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return directory_->dynamic_;
}

std::shared_ptr<VariableShard> ShardDirectory::Reader::FindFixed(const std::string& name) const {
  auto it = fixed().find(name);
  return it == fixed().end() ? nullptr : it->second;
}

std::shared_ptr<DynamicShard> ShardDirectory::Reader::FindDynamic(const std::string& name) const {
  auto it = dynamic().find(name);
  return it == dynamic().end() ? nullptr : it->second;
}

ShardDirectory::Writer::Writer(ShardDirectory* directory) : directory_(directory) {
  directory->mu_.Lock();
}

ShardDirectory::Writer::~Writer() { directory_->mu_.Unlock(); }

ShardDirectory::FixedMap& ShardDirectory::Writer::fixed() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return directory_->fixed_;
}

ShardDirectory::DynamicMap& ShardDirectory::Writer::dynamic() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return directory_->dynamic_;
}

ShardDirectory::Answered::Answered(ShardDirectory* directory) : directory_(directory) {
  // Counted before the answer goes out, so any request sent after it finds the count and waits.
  absl::MutexLock lock(&directory->answered_mu_);
  ++directory->answered_applying_;
  directory->answered_any_.fetch_add(1, std::memory_order_relaxed);
}

ShardDirectory::Answered::~Answered() { Cancel(); }

void ShardDirectory::Answered::Cancel() {
  if (directory_ == nullptr) return;
  ShardDirectory* const d = directory_;
  directory_ = nullptr;
  absl::MutexLock lock(&d->answered_mu_);
  --d->answered_applying_;
  d->answered_any_.fetch_sub(1, std::memory_order_release);
}

void ShardDirectory::AwaitAnswered() const {
  if (answered_any_.load(std::memory_order_acquire) == 0) return;
  absl::MutexLock lock(&answered_mu_);
  answered_mu_.Await(absl::Condition(this, &ShardDirectory::NoneAnsweredLocked));
}

}  // namespace pstrain
