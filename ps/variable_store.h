// All the variable shards one ps task holds (fixed shards and dynamic tables' shards), and the
// batched operations on them.
#ifndef PSTRAIN_PS_VARIABLE_STORE_H_
#define PSTRAIN_PS_VARIABLE_STORE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/thread_pool.h"
#include "proto/ps_service.pb.h"
#include "ps/dynamic_shard.h"
#include "ps/memory_budget.h"
#include "ps/shard_checkpoint.h"
#include "ps/shard_directory.h"
#include "ps/variable_shard.h"

namespace pstrain {

// Thread-safe. The map of shards is guarded by a reader-writer lock taken only to find shards;
// the rows themselves are guarded by each shard's row locks, so requests on different rows run in
// parallel. Each batched call validates every op before applying any: a rejected request changes
// nothing.
class VariableStore {
 public:
  // `data_threads`: pool threads that large requests' rows are split across, beside the calling
  // (gRPC) thread; -1 (default): one fewer than the machine's cores, so one request can use every
  // core while the others are idle; 0: none.
  // `memory_budget_bytes`: the ps's memory budget (0: none), see ps/memory_budget.h.
  // `disk_dir`: where dynamic tables' disk tiers go (ps/disk_tier.h): this store's tiers live in
  // its subdirectory pstrain-tiers-<pid>-<n>, made when a table first asks for a tier and removed with
  // the store (and, at that moment, those of processes no longer running); empty: under $TMPDIR
  // (or /tmp).
  explicit VariableStore(int data_threads = -1, int64_t memory_budget_bytes = 0,
                         std::string disk_dir = "");

  // The most ids one Lookup or Update may carry, over all its ops (0: no limit); more is
  // kResourceExhausted saying so. Call before serving.
  void set_max_ids_per_request(int64_t ids) { max_ids_per_request_ = ids; }

  // Creates every shard, or none. A shard that exists with the same definition is left as it is
  // (created[i] = false). Errors: kInvalidArgument (bad definition, same name twice in the request,
  // a shard that disagrees with another shard of its variable held here: says which field),
  // kAlreadyExists (same name, different definition: says which field differs),
  // kResourceExhausted (past the memory budget, naming the shard and the bytes).
  absl::StatusOr<std::vector<bool>> CreateShards(const std::vector<VariableShardDef>& defs);

  // Every shard's definition (fixed and dynamic), by name.
  std::vector<VariableShardDef> ListShards() const;
  // Every dynamic shard's counters, by name.
  std::vector<DynamicShardStats> DynamicStats() const;
  // Every fixed shard's gradient staleness so far (ps/staleness.h), by name.
  std::vector<std::pair<std::string, StalenessTracker::Summary>> Staleness() const;
  // nullptr if unknown (or of the other kind).
  std::shared_ptr<VariableShard> Find(const std::string& name) const;
  std::shared_ptr<DynamicShard> FindDynamic(const std::string& name) const;
  const MemoryBudget& budget() const { return budget_; }

  // Errors for these: kNotFound (unknown shard), kInvalidArgument (as VariableShard's and
  // DynamicShard's Validate*; a training lookup of a fixed shard), each naming the shard; for
  // dynamic tables also kResourceExhausted (an insert past the memory budget: that op stores
  // nothing, the ops before it in the request are applied). Lookups and updates of dynamic tables
  // take the request's step (LookupRequest.step, UpdateRequest.step).
  absl::Status Lookup(const LookupRequest& request, LookupResponse* response) const;
  // Lookup with the reply written straight in LookupResponse's wire format (field 1, one
  // length-delimited value per op) into ONE buffer of `bytes` that `allocate(bytes)` returns, so a
  // server can send it as it is: no zero-filled strings, no serializing copy. Errors: as Lookup;
  // `allocate` is called only once the request is valid. `ready` (may be empty) is called with n
  // as the first n bytes of that buffer become final, only where the call can no longer fail
  // (lookups of fixed shards: a dynamic table's may run out of memory), so a server may stream
  // them (ReplyAllocator::Ready).
  absl::Status LookupSerialized(const LookupRequest& request,
                                const std::function<char*(size_t bytes)>& allocate,
                                const std::function<void(size_t bytes)>& ready = nullptr) const;
  absl::Status Read(const ReadRequest& request, ReadResponse* response) const;
  // Read written straight in ReadResponse's wire format, as LookupSerialized (a read can't fail
  // once planned: `ready` streams every reply).
  absl::Status ReadSerialized(const ReadRequest& request,
                              const std::function<char*(size_t bytes)>& allocate,
                              const std::function<void(size_t bytes)>& ready = nullptr) const;
  // With request.return_rows, `response` (may be null: no rows) gets every dense op's rows after
  // the update and its shard's version (UpdateResponse), with return_slots their slots too.
  absl::Status Update(const UpdateRequest& request, UpdateResponse* response = nullptr);
  // Update from UpdateRequest's wire format in pieces (gRPC's received slices), applied from where
  // it lies: no copy of the values into protobuf strings. Errors: as Update, plus kInvalidArgument
  // for a malformed message (nothing is applied).
  //
  // A request with return_rows is answered with UpdateResponse's wire format, written into one
  // buffer of `reply` (may be empty: an empty reply) once the update is applied; it is never
  // answered early. Errors: as above, plus kResourceExhausted for rows over the message limit
  // (the update is applied).
  //
  // `answer` (may be empty) is called once the update is valid and certain to be applied in full
  // (every op on a fixed shard, or a dynamic table's gradients or erasures: its assignments store
  // keys, and may still run out of memory), before it is applied, so a server may answer it
  // meanwhile (ReplyAllocator::Complete); it returns whether it did. If it did, whatever enters
  // the store after the call (a lookup, read, update, export, or a listing of its shards and their
  // stats) waits until the update is applied, so whoever learned of its success reads it, as if it
  // had been answered after. (Saves and a restore's swap wait anyway: the apply holds the update
  // gate.)
  absl::Status UpdateWire(const std::vector<absl::string_view>& message,
                          const std::function<bool()>& answer = nullptr,
                          const std::function<char*(size_t bytes)>& reply = nullptr);
  // A chunk of a dynamic table's shard. Errors: kNotFound (unknown shard), kInvalidArgument (a
  // fixed shard, a malformed cursor).
  absl::Status Export(const ExportRequest& request, ExportResponse* response) const;

  // Checkpoints (see ps/shard_checkpoint.h). SaveShards writes every shard into a new database;
  // updates (and training lookups of dynamic tables) wait while it writes, so values and slots are
  // of one instant. It covers the store's current generation G and then starts G + 1 (every change
  // to a dynamic table is stamped with the generation it happened in); with
  // delta_since_generation B > 0 it writes only the dynamic tables' keys changed after B and those
  // erased after B. Errors: as WriteShardCheckpoint.
  absl::StatusOr<SaveShardsResponse> SaveShards(const SaveShardsRequest& request);
  // Reads every op into new shards beside the live ones and keeps them under the request's id
  // (replacing any earlier staged restore). Errors: kNotFound (unknown shard), and those of
  // ShardCheckpointReader::ReadInto. Nothing live changes.
  absl::StatusOr<RestoreShardsResponse> RestoreShards(const RestoreShardsRequest& request);
  // Swaps the staged shards in (or drops them, with `abort`). Errors: kFailedPrecondition if
  // nothing is staged under `restore_id`.
  absl::Status CommitRestore(uint64_t restore_id, bool abort);

 private:
  // Finds every named shard, in order. Errors: kNotFound naming the first unknown shard.
  template <typename Ops>
  absl::StatusOr<std::vector<std::shared_ptr<VariableShard>>> FindAll(const Ops& ops) const;
  // An op's shard: one of the two is set.
  struct Target {
    std::shared_ptr<VariableShard> fixed;
    std::shared_ptr<DynamicShard> dynamic;
    DynamicShard::KeyBatch keys;  // a dynamic table's op: its keys, checked and prepared
    int64_t row_bytes() const { return fixed != nullptr ? fixed->row_bytes() : dynamic->row_bytes(); }
  };
  // Finds every named shard of either kind, in order. Errors: kNotFound naming the first unknown.
  template <typename Ops>
  absl::StatusOr<std::vector<Target>> FindTargets(const Ops& ops) const;
  // Validates a lookup request: its targets, and whether any op inserts into a dynamic table.
  absl::Status CheckIdCount(int64_t ids, absl::string_view what) const;
  absl::StatusOr<std::vector<Target>> PlanLookup(const LookupRequest& request,
                                                 bool* inserts) const;
  // Runs a validated lookup into one buffer per op (out(i)).
  absl::Status RunLookup(const LookupRequest& request, const std::vector<Target>& targets,
                         bool inserts, const std::function<char*(int i)>& out) const;
  // Validates every op, then applies them (`answer`: as UpdateWire's); with `reply_rows`, then
  // writes the dense ops' rows and versions into the reply it allocates (ReplyRows).
  absl::Status Update(const std::vector<UpdateOpView>& ops, int64_t step,
                      const std::function<bool()>& answer,
                      const std::function<char*(size_t bytes)>* reply_rows, bool with_slots);
  // The reply with the rows (UpdateResponse): values, versions, and with_slots the slots.
  absl::Status ReplyRows(const std::vector<UpdateOpView>& ops, const std::vector<Target>& targets,
                         const std::function<char*(size_t bytes)>& allocate,
                         bool with_slots) const;
  DynamicOpContext ContextLocked(int64_t step) const ABSL_SHARED_LOCKS_REQUIRED(update_gate_);
  // A validated read request: per op, its shard, local rows [begin, end) and reply bytes.
  struct ReadPlan {
    std::vector<std::shared_ptr<VariableShard>> shards;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::vector<uint64_t> bytes;
  };
  absl::StatusOr<ReadPlan> PlanRead(const ReadRequest& request) const;

  std::unique_ptr<ThreadPool> pool_;  // null: no helper threads
  MemoryBudget budget_;
  // Below: the disk tiers' directory.
  // The ps's disk store (ps/disk_tier.h), opened on first use in the tiers' directory, its buffers
  // sized to the budget (a restore's staged shards share it, under tiers of their own).
  absl::StatusOr<std::shared_ptr<DiskStore>> TierStore();
  const std::string disk_dir_;
  // A directory removed when it goes: declared before the shards, so it goes after them (their
  // tiers closed).
  struct OwnedDir {
    std::string path;  // empty: none made yet
    OwnedDir() = default;
    OwnedDir(const OwnedDir&) = delete;
    OwnedDir& operator=(const OwnedDir&) = delete;
    ~OwnedDir();
  };
  absl::Mutex tier_mu_;
  OwnedDir tier_root_ ABSL_GUARDED_BY(tier_mu_);  // made: pstrain-tiers-<pid>-<n>
  std::shared_ptr<DiskStore> tier_store_ ABSL_GUARDED_BY(tier_mu_);
  int64_t max_ids_per_request_ = 0;  // 0: no limit

  // Updates and training lookups of dynamic tables hold it shared; a save or a restore's swap
  // holds it exclusively.
  mutable absl::Mutex update_gate_;
  // Below: guarded by update_gate_. The generation changes are stamped with, and whether erased
  // keys are remembered (from the first save that asks for it: incremental checkpoints).
  uint32_t generation_ ABSL_GUARDED_BY(update_gate_) = 1;
  bool track_erasures_ ABSL_GUARDED_BY(update_gate_) = false;

  // The shards by name: every entry point finds its shards through a ShardDirectory::Reader,
  // which waits for updates answered early (UpdateWire's `answer`) to be applied.
  ShardDirectory directory_;

  absl::Mutex restore_mu_;
  // Below: guarded by restore_mu_. The staged restore, if any.
  uint64_t staged_id_ ABSL_GUARDED_BY(restore_mu_) = 0;
  std::vector<std::unique_ptr<VariableShard>> staged_ ABSL_GUARDED_BY(restore_mu_);
  std::vector<std::unique_ptr<DynamicShard>> staged_dynamic_ ABSL_GUARDED_BY(restore_mu_);
  bool has_staged_ ABSL_GUARDED_BY(restore_mu_) = false;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_VARIABLE_STORE_H_
