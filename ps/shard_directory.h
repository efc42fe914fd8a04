// The shards one ps holds, by name (fixed shards and dynamic tables' shards), and the one way to
// reach them.
//
// A ps may answer an update before it applies it (VariableStore::UpdateWire, when nothing can fail
// any more): the answer overlaps the client's next request. Whoever learns of that success must
// then see the update, exactly as if it had been answered after: every request that reaches a
// shard after the answer waits until the apply is done. That wait is not a call each entry point
// has to remember: the maps are reachable only through a Reader, and a Reader waits for every
// update answered early (an Answered) to be applied before it takes the maps' lock.
//
//   update:  FindTargets (Reader) -> validate -> Answered answered(&directory) -> answer the
//            client -> apply -> ~Answered
//   any request entering meanwhile: Reader waits here ------------------------^ then goes on
//
// Thread-safe.
#ifndef PSTRAIN_PS_SHARD_DIRECTORY_H_
#define PSTRAIN_PS_SHARD_DIRECTORY_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "ps/dynamic_shard.h"
#include "ps/variable_shard.h"

namespace pstrain {

class ShardDirectory {
 public:
  using FixedMap = absl::flat_hash_map<std::string, std::shared_ptr<VariableShard>>;
  using DynamicMap = absl::flat_hash_map<std::string, std::shared_ptr<DynamicShard>>;

  ShardDirectory() = default;
  ShardDirectory(const ShardDirectory&) = delete;
  ShardDirectory& operator=(const ShardDirectory&) = delete;

  // Reads the maps, beside other readers, for the Reader's lifetime (keep it short: find the
  // shards, copy their pointers, let go). Its constructor first waits until no update answered
  // early is still being applied.
  class ABSL_SCOPED_LOCKABLE Reader {
   public:
    explicit Reader(const ShardDirectory* directory) ABSL_SHARED_LOCK_FUNCTION(directory->mu_);
    ~Reader() ABSL_UNLOCK_FUNCTION();
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;

    // A name is in at most one of the two.
    const FixedMap& fixed() const;
    const DynamicMap& dynamic() const;
    // nullptr if unknown (or of the other kind).
    std::shared_ptr<VariableShard> FindFixed(const std::string& name) const;
    std::shared_ptr<DynamicShard> FindDynamic(const std::string& name) const;

   private:
    const ShardDirectory* const directory_;
  };

  // Changes the maps (new shards, a restore's swap), alone. Doesn't wait for answered updates:
  // adding or replacing a shard reads none.
  class ABSL_SCOPED_LOCKABLE Writer {
   public:
    explicit Writer(ShardDirectory* directory) ABSL_EXCLUSIVE_LOCK_FUNCTION(directory->mu_);
    ~Writer() ABSL_UNLOCK_FUNCTION();
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    FixedMap& fixed();
    DynamicMap& dynamic();

   private:
    ShardDirectory* const directory_;
  };

  // An update answered before it is applied: from its construction (before the answer goes
  // out) until its destruction (once applied) or Cancel() (it was not answered after all),
  // every Reader constructed waits.
  class Answered {
   public:
    explicit Answered(ShardDirectory* directory);
    ~Answered();
    Answered(const Answered&) = delete;
    Answered& operator=(const Answered&) = delete;
    // No longer counted (idempotent).
    void Cancel();

   private:
    ShardDirectory* directory_;  // null once cancelled
  };

 private:
  // Waits while an update answered early is being applied.
  void AwaitAnswered() const;
  bool NoneAnsweredLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(answered_mu_) {
    return answered_applying_ == 0;
  }

  // Updates answered early and not yet applied. (The data plane answers early only while none of
  // its other requests is in the handler, waiters included: its own waiters can't starve.)
  mutable absl::Mutex answered_mu_;
  int answered_applying_ ABSL_GUARDED_BY(answered_mu_) = 0;
  std::atomic<int> answered_any_{0};  // answered_applying_, read without the lock

  mutable absl::Mutex mu_;
  FixedMap fixed_ ABSL_GUARDED_BY(mu_);
  DynamicMap dynamic_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_SHARD_DIRECTORY_H_
