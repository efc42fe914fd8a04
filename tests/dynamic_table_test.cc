// Dynamic tables across rooms, over real gRPC in in-process clusters: the client handle and the
// batches; bad requests; checkpoints consistent while pushes run; restores into other numbers of
// ps tasks and shards with every key intact; incremental chains restoring bit-exact; keep-N by
// whole chains.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "coordinator/checkpoint_files.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/in_process_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "partitioners/key_routing.h"
#include "ps/initializers.h"
#include "ps/optimizers.h"
#include "ps/sharded_variable.h"

namespace pstrain {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kDim = 8;

// What an export shows of one key: its row, its slots, its sightings and last step.
struct KeyState {
  std::vector<float> row, slots;
  uint32_t count = 0;
  int64_t step = 0;
  bool operator==(const KeyState& o) const {
    return row == o.row && slots == o.slots && count == o.count && step == o.step;
  }
};

// A cluster of `num_ps` ps tasks and one worker, a coordinator and a checkpoint manager.
struct Job {
  Job(int num_ps, const std::string& dir, CheckpointOptions options = {}) {
    InProcessClusterOptions cluster_options;
    cluster_options.num_ps = num_ps;
    cluster_options.num_workers = 1;
    auto c = InProcessCluster::Start(cluster_options);
    EXPECT_TRUE(c.ok()) << c.status();
    cluster = std::move(*c);
    auto co = ClusterCoordinator::Create(cluster->spec());
    EXPECT_TRUE(co.ok()) << co.status();
    coordinator = std::move(*co);
    options.dir = dir;
    auto m = CheckpointManager::Create(options, coordinator->ps()->clients(),
                                       coordinator->variables());
    EXPECT_TRUE(m.ok()) << m.status();
    checkpoints = std::move(*m);
  }

  DynamicTable Table(int num_shards = 0, DynamicTableDef options = {},
                     OptimizerDef::Kind optimizer = OptimizerDef::ADAGRAD,
                     const std::string& name = "emb") {
    TableSpec spec;
    spec.name = name;
    spec.dim = kDim;
    spec.num_shards = num_shards;
    spec.initializer.set_kind(InitializerDef::UNIFORM);
    spec.initializer.set_minval(-0.1);
    spec.initializer.set_maxval(0.1);
    spec.initializer.set_seed(9);
    spec.optimizer = OptimizerDef();
    spec.optimizer->set_kind(optimizer);
    spec.optimizer->set_learning_rate(0.05);
    spec.options = options;
    absl::StatusOr<DynamicTable> t = coordinator->variables()->CreateTable(spec);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }

  std::unique_ptr<InProcessCluster> cluster;
  std::unique_ptr<ClusterCoordinator> coordinator;
  std::unique_ptr<CheckpointManager> checkpoints;
};

std::map<int64_t, KeyState> ExportAll(const DynamicTable& t) {
  std::map<int64_t, KeyState> all;
  absl::Status s = t.Export(/*with_slots=*/true, /*max_keys_per_chunk=*/1000,
                            [&](int, const ExportResponse& r) -> absl::Status {
                              const int64_t n = static_cast<int64_t>(r.keys().size() / 8);
                              const int64_t slot_floats = n == 0 ? 0 : r.slots().size() / 4 / n;
                              for (int64_t i = 0; i < n; ++i) {
                                int64_t key;
                                std::memcpy(&key, r.keys().data() + 8 * i, 8);
                                KeyState k;
                                k.row.resize(kDim);
                                std::memcpy(k.row.data(), r.values().data() + 4 * kDim * i, 4 * kDim);
                                k.slots.resize(slot_floats);
                                std::memcpy(k.slots.data(), r.slots().data() + 4 * slot_floats * i,
                                            4 * slot_floats);
                                std::memcpy(&k.count, r.counts().data() + 4 * i, 4);
                                std::memcpy(&k.step, r.steps().data() + 8 * i, 8);
                                if (!all.emplace(key, k).second) {
                                  return absl::InternalError("a key exported twice");
                                }
                              }
                              return absl::OkStatus();
                            });
  EXPECT_TRUE(s.ok()) << s;
  return all;
}

std::vector<float> InitialRow(const DynamicTable&, int64_t key) {
  InitializerDef init;
  init.set_kind(InitializerDef::UNIFORM);
  init.set_minval(-0.1);
  init.set_maxval(0.1);
  init.set_seed(9);
  std::vector<float> row(kDim);
  InitializeFloatForKey(init, key, kDim, row.data());
  return row;
}

// Random training from `threads` threads: each step looks up a batch of keys (some new) in
// training mode and pushes a gradient for them, at its global step.
void Train(const DynamicTable& t, int threads, int steps, uint64_t seed, int64_t key_space,
           std::atomic<int64_t>* next_step) {
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937_64 rng(seed * 100 + w);
      for (int i = 0; i < steps; ++i) {
        const int64_t step = next_step->fetch_add(1);
        std::vector<int64_t> keys(64);
        for (int64_t& k : keys) k = static_cast<int64_t>(rng() % key_space) * 7 - 1000;
        std::vector<float> rows(keys.size() * kDim), grads(keys.size() * kDim);
        for (float& g : grads) g = static_cast<float>(static_cast<int>(rng() % 200) - 100) / 100;
        LookupBatch lookup;
        lookup.set_step(step);
        if (!lookup.Add(t, keys, reinterpret_cast<char*>(rows.data()), LookupMode::kTrain).ok() ||
            !lookup.Run().ok()) {
          failures++;
          continue;
        }
        UpdateBatch update;
        update.set_step(step);
        if (!update.AddSparse(t, UpdateOp::APPLY_GRADIENT, keys,
                              reinterpret_cast<const char*>(grads.data())).ok() ||
            !update.Run().ok()) {
          failures++;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(DynamicTableTest, HandleOverGrpc_TrainEvalPushExportAndStats) {
  Job job(/*num_ps=*/2, FreshTempDir("dyn_handle"));
  DynamicTable t = job.Table();
  EXPECT_EQ(t.num_shards(), 2);
  // The handle a worker finds by name is the same table.
  absl::StatusOr<DynamicTable> found = job.coordinator->ps()->Table("emb");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->num_shards(), 2);
  EXPECT_EQ(found->shard_name(1), "emb/part_1");

  const std::vector<int64_t> keys = {3, 1'000'000'007, -5, 3};
  std::vector<float> out(keys.size() * kDim);
  ASSERT_TRUE(t.Lookup(keys, out.data(), LookupMode::kEval).ok());
  EXPECT_EQ(out, std::vector<float>(out.size(), 0.0f));  // nothing stored: default rows
  EXPECT_EQ(*t.Size(), 0);
  ASSERT_TRUE(t.Lookup(keys, out.data(), LookupMode::kTrain, /*step=*/1).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(std::vector<float>(out.begin() + i * kDim, out.begin() + (i + 1) * kDim),
              InitialRow(t, keys[i]))
        << keys[i];
  }
  EXPECT_EQ(*t.Size(), 3);
  std::vector<float> g(keys.size() * kDim, 1.0f);
  ASSERT_TRUE(t.ApplyGradients(keys, g.data(), 2).ok());
  std::map<int64_t, KeyState> all = ExportAll(t);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_FLOAT_EQ(all[3].slots[0], 0.1f + 4.0f);  // key 3 twice: its gradient rows summed (2^2)
  EXPECT_FLOAT_EQ(all[-5].slots[0], 0.1f + 1.0f);
  EXPECT_EQ(all[3].count, 1u);  // the handle sends a repeated key once: one sighting per lookup
  EXPECT_EQ(all[3].step, 2);
  ASSERT_TRUE(t.Erase({-5}).ok());
  absl::StatusOr<std::vector<DynamicShardStats>> stats = t.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  int64_t admitted = 0, erased = 0, keys_held = 0;
  for (const DynamicShardStats& s : *stats) {
    admitted += s.admitted();
    erased += s.erased();
    keys_held += s.keys();
  }
  EXPECT_EQ(admitted, 3);
  EXPECT_EQ(erased, 1);
  EXPECT_EQ(keys_held, 2);
}

// The same keys read the same initial rows however many shards the table has.
TEST(DynamicTableTest, InitialRows_SameWhateverTheSharding) {
  Job a(2, FreshTempDir("dyn_init_a"));
  Job b(3, FreshTempDir("dyn_init_b"));
  DynamicTable ta = a.Table(/*num_shards=*/2);
  DynamicTable tb = b.Table(/*num_shards=*/5);
  std::vector<int64_t> keys(500);
  for (int i = 0; i < 500; ++i) keys[i] = i * 104729 - 7;
  std::vector<float> ra(keys.size() * kDim), rb(keys.size() * kDim);
  ASSERT_TRUE(ta.Lookup(keys, ra.data(), LookupMode::kTrain, 1).ok());
  ASSERT_TRUE(tb.Lookup(keys, rb.data(), LookupMode::kTrain, 1).ok());
  EXPECT_EQ(ra, rb);
}

TEST(DynamicTableTest, BadRequests_SpecificErrorsAndNothingApplied) {
  Job job(2, FreshTempDir("dyn_bad"));
  DynamicTable t = job.Table();
  ASSERT_TRUE(t.Lookup({1, 2, 3}, std::vector<float>(3 * kDim).data(), LookupMode::kTrain, 1).ok());
  const std::map<int64_t, KeyState> before = ExportAll(t);
  PsClient* ps0 = job.coordinator->ps()->ps(t.ps_task(0));

  // A key sent to a shard that doesn't own it, beside a valid op: INVALID_ARGUMENT naming the key,
  // and the valid op is not applied either.
  int64_t foreign = 0;
  while (t.ShardOf(foreign) == 0) ++foreign;
  int64_t own = 1;
  while (t.ShardOf(own) != 0) ++own;
  UpdateRequest update;
  UpdateOp* ok_op = update.add_ops();
  ok_op->set_shard(t.shard_name(0));
  ok_op->set_kind(UpdateOp::ASSIGN);
  ok_op->set_ids(std::string(reinterpret_cast<const char*>(&own), 8));
  ok_op->set_values(std::string(4 * kDim, '\x01'));
  ok_op->set_dtype(DT_FLOAT32);
  UpdateOp* bad_op = update.add_ops();
  *bad_op = *ok_op;
  bad_op->set_ids(std::string(reinterpret_cast<const char*>(&foreign), 8));
  UpdateResponse response;
  EXPECT_THAT(ps0->Update(update, &response),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("key " + std::to_string(foreign)), HasSubstr("emb/part_0"))));
  // A wrong row width.
  update.mutable_ops()->DeleteSubrange(1, 1);
  update.mutable_ops(0)->set_values(std::string(4 * (kDim + 1), '\x01'));
  EXPECT_THAT(ps0->Update(update, &response),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("emb/part_0"), HasSubstr("wrong width"))));
  // An unknown table.
  LookupRequest lookup;
  lookup.add_ops()->set_shard("nope/part_0");
  LookupResponse lookup_response;
  EXPECT_THAT(ps0->Lookup(lookup, &lookup_response),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope/part_0")));
  EXPECT_EQ(ExportAll(t), before);

  // A definition that conflicts with the existing table: ALREADY_EXISTS naming it.
  TableSpec other;
  other.name = "emb";
  other.dim = kDim + 1;
  EXPECT_THAT(job.coordinator->variables()->CreateTable(other),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("\"emb\"")));
  CreateShardsRequest create;
  VariableShardDef* def = create.add_shards();
  ListShardsResponse listed;
  ASSERT_TRUE(ps0->ListShards(ListShardsRequest(), &listed).ok());
  for (const VariableShardDef& d : listed.shards()) {
    if (d.name() == t.shard_name(0)) *def = d;
  }
  def->mutable_dynamic()->set_ttl_steps(99);
  CreateShardsResponse created;
  EXPECT_THAT(ps0->CreateShards(create, &created),
              StatusIs(absl::StatusCode::kAlreadyExists, AllOf(HasSubstr("emb/part_0"),
                                                               HasSubstr("ttl_steps"))));
}

// Pushes keep running while a checkpoint is saved: every saved key has its row and its slot from
// one instant. Each push adds a gradient of exactly 1 to each of its keys (Adagrad), so a key's
// accumulator says how many it got, and its row must be exactly what that many gives.
TEST(DynamicTableTest, SaveWhilePushing_EveryKeysRowAndSlotFromOneInstant) {
  const std::string dir = FreshTempDir("dyn_consistent");
  Job job(2, dir);
  DynamicTable t = job.Table();
  std::vector<int64_t> keys(2000);
  for (int i = 0; i < 2000; ++i) keys[i] = i;
  ASSERT_TRUE(t.Lookup(keys, std::vector<float>(keys.size() * kDim).data(), LookupMode::kTrain, 1).ok());
  std::atomic<bool> stop{false};
  std::vector<std::thread> pushers;
  for (int w = 0; w < 3; ++w) {
    pushers.emplace_back([&, w] {
      std::mt19937_64 rng(w);
      while (!stop.load()) {
        std::vector<int64_t> some(256);
        const int64_t first = static_cast<int64_t>(rng() % 1744);
        for (int i = 0; i < 256; ++i) some[i] = first + i;  // distinct keys
        std::vector<float> ones(some.size() * kDim, 1.0f);
        EXPECT_TRUE(t.ApplyGradients(some, ones.data(), 2).ok());
      }
    });
  }
  std::vector<std::string> saved;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> path = job.checkpoints->Save(10 + i, {});
    ASSERT_TRUE(path.ok()) << path.status();
    saved.push_back(*path);
  }
  stop.store(true);
  for (auto& p : pushers) p.join();

  OptimizerDef adagrad;
  adagrad.set_kind(OptimizerDef::ADAGRAD);
  adagrad.set_learning_rate(0.05);
  auto optimizer = *Optimizer::Create(adagrad);
  for (const std::string& path : saved) {
    Job fresh(1, FreshTempDir("dyn_consistent_restore"));
    DynamicTable r = fresh.Table();
    ASSERT_TRUE(fresh.checkpoints->Restore(path).ok());
    std::map<int64_t, KeyState> all = ExportAll(r);
    ASSERT_EQ(all.size(), 2000u);
    int checked = 0;
    for (const auto& [key, state] : all) {
      const int n = static_cast<int>(std::lround(state.slots[0] - 0.1f));
      std::vector<float> row = InitialRow(r, key), acc(kDim, 0.1f);
      std::vector<float> one(kDim, 1.0f);
      float* slots[1] = {acc.data()};
      for (int k = 1; k <= n; ++k) {
        optimizer->ApplyRow(row.data(), slots, reinterpret_cast<const UnalignedFloat*>(one.data()),
                            kDim, optimizer->Prepare(k, k - 1));
      }
      ASSERT_EQ(acc, state.slots) << "key " << key;
      ASSERT_EQ(row, state.row) << "key " << key << " after " << n << " pushes";
      ++checked;
    }
    EXPECT_EQ(checked, 2000);
  }
}

// After random async training with admission and eviction, a save and a restore into other
// numbers of ps tasks and shards: every key with its row, every slot, count and step, bit for bit.
TEST(DynamicTableTest, RestoreIntoOtherPartitionings_EveryKeyIntact) {
  const std::string dir = FreshTempDir("dyn_reshard");
  DynamicTableDef options;
  options.set_admit_min_count(2);
  options.set_ttl_steps(150);
  options.set_max_rows(3000);
  std::map<int64_t, KeyState> live;
  std::string path;
  {
    Job job(2, dir);
    DynamicTable t = job.Table(/*num_shards=*/0, options);
    std::atomic<int64_t> step{1};
    Train(t, /*threads=*/3, /*steps=*/120, /*seed=*/1, /*key_space=*/6000, &step);
    live = ExportAll(t);
    absl::StatusOr<std::string> p = job.checkpoints->Save(step.load(), {});
    ASSERT_TRUE(p.ok()) << p.status();
    path = *p;
  }
  ASSERT_GT(live.size(), 1000u);
  ASSERT_LE(live.size(), 3000u);
  for (const auto& [key, state] : live) {
    ASSERT_EQ(state.row.size(), static_cast<size_t>(kDim));
    ASSERT_EQ(state.slots.size(), static_cast<size_t>(kDim));  // Adagrad: one slot
  }
  for (auto [num_ps, num_shards] : {std::pair{3, 3}, std::pair{1, 1}, std::pair{3, 7}}) {
    Job other(num_ps, FreshTempDir("dyn_reshard_restore"));
    DynamicTable t = other.Table(num_shards, options);
    ASSERT_TRUE(other.checkpoints->Restore(path).ok()) << num_ps << " ps";
    EXPECT_EQ(ExportAll(t), live) << num_ps << " ps, " << num_shards << " shards";
  }
}

// Incremental checkpoints: a full save, then deltas of the keys changed and erased since; the chain
// restores to a table bit-identical to the live one at the last delta. Keep-N deletes whole chains.
TEST(DynamicTableTest, IncrementalChain_RestoresBitExact_KeepDeletesWholeChains) {
  const std::string dir = FreshTempDir("dyn_incremental");
  CheckpointOptions options;
  options.incremental = true;
  options.full_every = 3;
  options.keep = 2;
  DynamicTableDef table_options;
  table_options.set_ttl_steps(60);  // evictions between saves must reach the deltas too
  std::vector<std::pair<std::string, std::map<int64_t, KeyState>>> saved;
  {
    Job job(2, dir, options);
    DynamicTable t = job.Table(0, table_options);
    std::atomic<int64_t> step{1};
    for (int save = 0; save < 5; ++save) {
      Train(t, 2, 30, save + 1, 3000, &step);
      std::vector<int64_t> gone = {(save * 7) * 7 - 1000, (save * 7 + 1) * 7 - 1000};
      ASSERT_TRUE(t.Erase(gone).ok());
      absl::StatusOr<std::string> p = job.checkpoints->Save(step.load(), {});
      ASSERT_TRUE(p.ok()) << p.status();
      saved.emplace_back(*p, ExportAll(t));
    }
  }
  // Checkpoints 0 (full), 1, 2 (deltas) form the first chain; 3 (full), 4 the second.
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE(saved[i].first);
    absl::StatusOr<CheckpointManifest> m = ReadManifest(saved[i].first);
    if (i < 3) {
      EXPECT_FALSE(m.ok()) << "the first chain should be gone, whole";  // keep = 2: 3 and 4
      continue;
    }
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->delta_index(), i - 3);
  }
  // A delta holds fewer keys than its table.
  absl::StatusOr<CheckpointManifest> delta = ReadManifest(saved[4].first);
  int64_t delta_keys = 0;
  for (const SavedVariable& v : delta->variables()) {
    for (const SavedShardInfo& s : v.shards()) delta_keys += s.keys();
  }
  EXPECT_GT(delta_keys, 0);
  EXPECT_LT(delta_keys, static_cast<int64_t>(saved[4].second.size()));
  Job fresh(3, FreshTempDir("dyn_incremental_restore"));
  DynamicTable t = fresh.Table(0, table_options);
  ASSERT_TRUE(fresh.checkpoints->Restore(saved[4].first).ok());
  EXPECT_EQ(ExportAll(t), saved[4].second);
}

TEST(DynamicTableTest, IncrementalChain_EveryDeltaRestoresItsOwnState) {
  const std::string dir = FreshTempDir("dyn_every_delta");
  CheckpointOptions options;
  options.incremental = true;
  options.full_every = 4;
  options.keep = 10;
  std::vector<std::pair<std::string, std::map<int64_t, KeyState>>> saved;
  {
    Job job(2, dir, options);
    DynamicTable t = job.Table();
    std::atomic<int64_t> step{1};
    for (int save = 0; save < 4; ++save) {
      Train(t, 2, 20, save + 10, 2000, &step);
      ASSERT_TRUE(t.Erase({-1000, 6, 13, 20}).ok());
      absl::StatusOr<std::string> p = job.checkpoints->Save(step.load(), {});
      ASSERT_TRUE(p.ok()) << p.status();
      saved.emplace_back(*p, ExportAll(t));
    }
  }
  for (const auto& [path, state] : saved) {
    Job fresh(1, FreshTempDir("dyn_every_delta_restore"));
    DynamicTable t = fresh.Table();
    ASSERT_TRUE(fresh.checkpoints->Restore(path).ok()) << path;
    EXPECT_EQ(ExportAll(t), state) << path;
  }
}

TEST(DynamicTableTest, RestoreWithAnotherWidth_InvalidArgumentNamingTheTable) {
  const std::string dir = FreshTempDir("dyn_width");
  std::string path;
  {
    Job job(1, dir);
    DynamicTable t = job.Table();
    ASSERT_TRUE(t.Lookup({1}, std::vector<float>(kDim).data(), LookupMode::kTrain, 1).ok());
    path = *job.checkpoints->Save(1, {});
  }
  Job other(1, FreshTempDir("dyn_width_restore"));
  TableSpec spec;
  spec.name = "emb";
  spec.dim = kDim * 2;
  spec.optimizer = OptimizerDef();
  spec.optimizer->set_kind(OptimizerDef::ADAGRAD);
  ASSERT_TRUE(other.coordinator->variables()->CreateTable(spec).ok());
  EXPECT_THAT(other.checkpoints->Restore(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("\"emb\""), HasSubstr("[8]"), HasSubstr("[16]"))));
}

}  // namespace
}  // namespace pstrain
