#include "coordinator/split_ledger.h"

#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

// A worker as the ledger sees it: it reads the splits it is dealt (leaving out their skipped
// rows) and trains batches of what it holds.
class FakeWorker {
 public:
  FakeWorker(int index, const std::vector<int64_t>& split_rows)
      : index_(index), split_rows_(split_rows) {}

  // One closure: dealt, then a batch of up to `batch` rows. Returns the rows' ids.
  std::vector<int64_t> Run(SplitLedger& ledger, int64_t batch) {
    std::vector<Tensor> extra = ledger.Deal(index_);
    EXPECT_EQ(extra.size(), 1u);
    absl::StatusOr<Deal> dealt = ParseDeal(extra[0]);
    EXPECT_TRUE(dealt.ok()) << dealt.status();
    if (!dealt->splits.empty()) EXPECT_EQ(dealt->seq, ++deals_);
    EXPECT_EQ(dealt->seq, deals_);
    const int64_t n = static_cast<int64_t>(split_rows_.size());
    for (const DealtSplit& d : dealt->splits) {
      std::set<int64_t> skip(d.skip.begin(), d.skip.end());
      for (int64_t r = 0; r < split_rows_[d.id % n]; ++r) {
        if (skip.count(r) == 0) held_.push_back(RowId(d.id, r));
      }
    }
    std::vector<int64_t> rows;
    while (static_cast<int64_t>(rows.size()) < batch && !held_.empty()) {
      rows.push_back(held_.front());
      held_.erase(held_.begin());
    }
    return rows;
  }
  void Complete(SplitLedger& ledger, const std::vector<int64_t>& rows) {
    ledger.Completed(index_, {Tensor::Scalar<float>(0), Tensor::Scalar<int64_t>(0),
                              Tensor::Scalar<float>(0), Tensor::FromVector(rows)});
  }
  void Crash() {
    held_.clear();
    deals_ = 0;
  }
  int64_t held() const { return static_cast<int64_t>(held_.size()); }

 private:
  const int index_;
  const std::vector<int64_t> split_rows_;
  std::vector<int64_t> held_;
  int64_t deals_ = 0;
};

SplitLedgerOptions Options(std::vector<int64_t> rows, int workers) {
  SplitLedgerOptions o;
  o.split_rows = std::move(rows);
  o.num_workers = workers;
  o.batch_size = 8;
  o.hold_rows = 20;
  return o;
}

// Every row id trained, with how many times.
using Seen = std::map<int64_t, int>;

void Train(SplitLedger& ledger, std::vector<FakeWorker>& workers, Seen* seen, int64_t batch) {
  for (int round = 0; round < 10000; ++round) {
    bool any = false;
    for (size_t w = 0; w < workers.size(); ++w) {
      if (!ledger.CanTake(static_cast<int>(w))) continue;
      std::vector<int64_t> rows = workers[w].Run(ledger, batch);
      workers[w].Complete(ledger, rows);
      for (int64_t r : rows) ++(*seen)[r];
      any = any || !rows.empty();
    }
    if (!any && ledger.PendingSteps() == 0) return;
  }
  FAIL() << "training did not end";
}

TEST(SplitLedgerTest, NoFailure_EveryRowExactlyOnce) {
  const std::vector<int64_t> rows = {10, 0, 7, 25, 3, 16, 9};
  absl::StatusOr<std::shared_ptr<SplitLedger>> ledger = SplitLedger::Create(Options(rows, 2));
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  std::vector<FakeWorker> workers = {FakeWorker(0, rows), FakeWorker(1, rows)};
  Seen seen;
  Train(**ledger, workers, &seen, 8);
  EXPECT_EQ(seen.size(), 70u);
  for (const auto& [id, times] : seen) EXPECT_EQ(times, 1) << id;
  const SplitLedger::Counts c = (*ledger)->counts();
  EXPECT_EQ(c.rows_trained, 70);
  EXPECT_EQ(c.rows_twice, 0);
  EXPECT_EQ(c.rows_left, 0);
  EXPECT_EQ(c.splits, 6);  // the split without training rows is not counted
  EXPECT_EQ(c.splits_done, 6);
  EXPECT_EQ(c.splits_reassigned, 0);
  EXPECT_EQ((*ledger)->PendingSteps(), 0);
}

TEST(SplitLedgerTest, AddMetrics_CountsAsPrometheusSamples) {
  const std::vector<int64_t> rows = {10, 10};
  absl::StatusOr<std::shared_ptr<SplitLedger>> ledger = SplitLedger::Create(Options(rows, 1));
  ASSERT_TRUE(ledger.ok());
  FakeWorker w(0, rows);
  w.Complete(**ledger, w.Run(**ledger, 8));
  MetricsRegistry registry;
  registry.AddCollector([&](MetricsRegistry::Sink& out) { (*ledger)->AddMetrics(out); });
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("pstrain_data_rows_trained_total 8"));
  EXPECT_THAT(text, HasSubstr("pstrain_data_rows_left 12"));
  EXPECT_THAT(text, HasSubstr("pstrain_data_splits_in_flight 2"));
}

TEST(SplitLedgerTest, TwoEpochs_EachRowOncePerEpochInItsOwnOrder) {
  const std::vector<int64_t> rows = {5, 5, 5, 5, 5, 5};
  SplitLedgerOptions o = Options(rows, 1);
  o.epochs = 2;
  o.hold_rows = 1;  // one split at a time: the deal order is visible
  absl::StatusOr<std::shared_ptr<SplitLedger>> ledger = SplitLedger::Create(o);
  ASSERT_TRUE(ledger.ok());
  std::vector<FakeWorker> workers = {FakeWorker(0, rows)};
  std::vector<int64_t> order;
  Seen seen;
  for (int i = 0; i < 100 && (*ledger)->PendingSteps() > 0; ++i) {
    std::vector<int64_t> got = workers[0].Run(**ledger, 5);
    for (int64_t r : got) ++seen[r];
    if (!got.empty()) order.push_back(RowIdSplit(got[0]) % 6);
    workers[0].Complete(**ledger, got);
  }
  EXPECT_EQ(seen.size(), 60u);  // 30 rows, each under both epochs' ids
  ASSERT_EQ(order.size(), 12u);
  EXPECT_EQ(std::set<int64_t>(order.begin(), order.begin() + 6).size(), 6u);
  EXPECT_EQ(std::set<int64_t>(order.begin() + 6, order.end()).size(), 6u);
  EXPECT_NE(std::vector<int64_t>(order.begin(), order.begin() + 6),
            std::vector<int64_t>(order.begin() + 6, order.end()));
}

TEST(SplitLedgerTest, WorkerLost_ItsUntrainedRowsDealtAgainWithoutTheTrainedOnes) {
  const std::vector<int64_t> rows = {12, 12, 12, 12, 12};
  absl::StatusOr<std::shared_ptr<SplitLedger>> ledger = SplitLedger::Create(Options(rows, 2));
  ASSERT_TRUE(ledger.ok());
  std::vector<FakeWorker> workers = {FakeWorker(0, rows), FakeWorker(1, rows)};
  Seen seen;
  // Worker 1 trains one batch, completes it; its second batch trains (reaches the ps) but the
  // worker dies before its closure completes.
  std::vector<int64_t> first = workers[1].Run(**ledger, 8);
  workers[1].Complete(**ledger, first);
  for (int64_t r : first) ++seen[r];
  std::vector<int64_t> lost = workers[1].Run(**ledger, 8);
  (*ledger)->Returned(1);
  for (int64_t r : lost) ++seen[r];
  workers[1].Crash();
  (*ledger)->WorkerLost(1);
  std::vector<FakeWorker> survivors = {FakeWorker(0, rows)};
  // Worker 1 is gone for good: only worker 0 asks.
  for (int i = 0; i < 100 && (*ledger)->PendingSteps() > 0; ++i) {
    ASSERT_TRUE((*ledger)->CanTake(0));
    std::vector<int64_t> got = survivors[0].Run(**ledger, 8);
    survivors[0].Complete(**ledger, got);
    for (int64_t r : got) ++seen[r];
  }
  EXPECT_EQ(seen.size(), 60u);
  int twice = 0;
  for (const auto& [id, times] : seen) twice += times - 1;
  EXPECT_EQ(twice, 8);  // the lost closure's batch, and nothing else
  const SplitLedger::Counts c = (*ledger)->counts();
  EXPECT_EQ(c.rows_trained, 60);
  EXPECT_EQ(c.rows_twice, 0);  // the lost batch was never reported
  EXPECT_GE(c.splits_reassigned, 1);
  EXPECT_EQ(c.workers_lost, 1);
}

TEST(SplitLedgerTest, LateReportOfALostWorker_CountedAsTwice) {
  const std::vector<int64_t> rows = {10};
  absl::StatusOr<std::shared_ptr<SplitLedger>> ledger = SplitLedger::Create(Options(rows, 2));
  ASSERT_TRUE(ledger.ok());
  FakeWorker w0(0, rows), w1(1, rows);
  std::vector<int64_t> late = w1.Run(**ledger, 4);
  (*ledger)->WorkerLost(1);  // declared lost, but its closure still completes
  std::vector<int64_t> all = w0.Run(**ledger, 10);
  EXPECT_EQ(all.size(), 10u);
  w1.Complete(**ledger, late);
  w0.Complete(**ledger, all);
  EXPECT_EQ((*ledger)->counts().rows_twice, 4);
  EXPECT_EQ((*ledger)->counts().rows_left, 0);
}

TEST(SplitLedgerTest, CanTake_WorkerWithoutRowsWaitsWhileOthersHoldTheLast) {
  const std::vector<int64_t> rows = {6};
  absl::StatusOr<std::shared_ptr<SplitLedger>> ledger = SplitLedger::Create(Options(rows, 2));
  ASSERT_TRUE(ledger.ok());
  FakeWorker w0(0, rows);
  EXPECT_TRUE((*ledger)->CanTake(1));
  std::vector<int64_t> got = w0.Run(**ledger, 4);  // w0 holds all 6, 4 in its running closure
  EXPECT_FALSE((*ledger)->CanTake(1));  // nothing to deal; the rows are w0's
  EXPECT_FALSE((*ledger)->CanTake(0));  // its held rows are all in its closure (6 <= 1 * 8)
  w0.Complete(**ledger, got);
  EXPECT_TRUE((*ledger)->CanTake(0));  // 2 left, none in flight
  EXPECT_FALSE((*ledger)->CanTake(1));
  EXPECT_EQ((*ledger)->PendingSteps(), 1);
  got = w0.Run(**ledger, 4);
  w0.Complete(**ledger, got);
  EXPECT_TRUE((*ledger)->CanTake(1));  // all trained: closures run (and train nothing)
  EXPECT_EQ((*ledger)->PendingSteps(), 0);
}

TEST(SplitLedgerTest, StateRestore_ContinuesTheEpochWithoutRepeats) {
  const std::vector<int64_t> rows = {9, 14, 3, 20, 11, 6};
  SplitLedgerOptions o = Options(rows, 2);
  o.epochs = 2;
  absl::StatusOr<std::shared_ptr<SplitLedger>> ledger = SplitLedger::Create(o);
  ASSERT_TRUE(ledger.ok());
  std::vector<FakeWorker> workers = {FakeWorker(0, rows), FakeWorker(1, rows)};
  Seen seen;
  for (int i = 0; i < 5; ++i) {
    for (int w = 0; w < 2; ++w) {
      std::vector<int64_t> got = workers[w].Run(**ledger, 8);
      workers[w].Complete(**ledger, got);
      for (int64_t r : got) ++seen[r];
    }
  }
  const std::string state = (*ledger)->State();
  // The job stops (the workers' buffers go with it) and resumes from the checkpoint.
  absl::StatusOr<std::shared_ptr<SplitLedger>> resumed = SplitLedger::Create(o);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->Restore(state).ok());
  EXPECT_EQ((*resumed)->counts().rows_trained, 80);
  std::vector<FakeWorker> fresh = {FakeWorker(0, rows), FakeWorker(1, rows)};
  Train(**resumed, fresh, &seen, 8);
  EXPECT_EQ(seen.size(), 126u);
  for (const auto& [id, times] : seen) EXPECT_EQ(times, 1) << id;
  EXPECT_EQ((*resumed)->counts().rows_left, 0);
}

TEST(SplitLedgerTest, StateRestore_MoreEpochs_TrainsOnlyTheNewOnes_FewerPastTheEndRejected) {
  const std::vector<int64_t> rows = {9, 14, 3};
  SplitLedgerOptions o = Options(rows, 1);
  o.epochs = 1;
  absl::StatusOr<std::shared_ptr<SplitLedger>> ledger = SplitLedger::Create(o);
  ASSERT_TRUE(ledger.ok());
  std::vector<FakeWorker> workers = {FakeWorker(0, rows)};
  Seen first;
  Train(**ledger, workers, &first, 8);
  EXPECT_EQ(first.size(), 26u);
  const std::string state = (*ledger)->State();
  // The finished 1-epoch job resumed with --epochs=3: epochs 1 and 2 alone, each row once.
  o.epochs = 3;
  absl::StatusOr<std::shared_ptr<SplitLedger>> more = SplitLedger::Create(o);
  ASSERT_TRUE(more.ok());
  ASSERT_TRUE((*more)->Restore(state).ok());
  EXPECT_EQ((*more)->counts().rows_trained, 26);
  EXPECT_EQ((*more)->counts().rows_left, 52);
  std::vector<FakeWorker> fresh = {FakeWorker(0, rows)};
  Seen later;
  Train(**more, fresh, &later, 8);
  EXPECT_EQ(later.size(), 52u);
  for (const auto& [id, times] : later) {
    EXPECT_EQ(times, 1) << id;
    EXPECT_GE(RowIdSplit(id), 3) << id;  // not epoch 0's
  }
  // A 3-epoch job that began its third epoch can't be resumed as a 2-epoch one.
  const std::string third = (*more)->State();
  o.epochs = 2;
  absl::StatusOr<std::shared_ptr<SplitLedger>> fewer = SplitLedger::Create(o);
  ASSERT_TRUE(fewer.ok());
  absl::Status s = (*fewer)->Restore(third);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("past this job's 2"));
}

TEST(SplitLedgerTest, StartAtEpoch_EarlierEpochsCountAsTrained) {
  const std::vector<int64_t> rows = {4, 6};
  SplitLedgerOptions o = Options(rows, 1);
  o.epochs = 3;
  absl::StatusOr<std::shared_ptr<SplitLedger>> ledger = SplitLedger::Create(o);
  ASSERT_TRUE(ledger.ok());
  ASSERT_TRUE((*ledger)->StartAtEpoch(2).ok());
  EXPECT_EQ((*ledger)->counts().rows_left, 10);
  std::vector<FakeWorker> workers = {FakeWorker(0, rows)};
  Seen seen;
  Train(**ledger, workers, &seen, 8);
  EXPECT_EQ(seen.size(), 10u);
  for (const auto& [id, times] : seen) EXPECT_GE(RowIdSplit(id), 4);  // epoch 2's ids only
  EXPECT_EQ((*ledger)->StartAtEpoch(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*ledger)->StartAtEpoch(4).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SplitLedgerTest, Restore_OtherDataOrMalformed_Rejected) {
  absl::StatusOr<std::shared_ptr<SplitLedger>> a = SplitLedger::Create(Options({5, 5}, 1));
  absl::StatusOr<std::shared_ptr<SplitLedger>> b = SplitLedger::Create(Options({5, 5, 5}, 1));
  ASSERT_TRUE(a.ok() && b.ok());
  absl::Status s = (*b)->Restore((*a)->State());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("the data changed"));
  EXPECT_EQ((*a)->Restore("{not json").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*a)->Restore(R"({"splits":2,"epochs":1,"next_epoch":1,"done":"z","partial":[]})")
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Follow mode: one closure on `worker` (dealt, its splits' descriptors checked against `names`),
// training every row it was dealt; returns the dealt split ids.
std::vector<int64_t> FollowClosure(SplitLedger& ledger, int worker,
                                   const std::vector<int64_t>& rows,
                                   const std::vector<std::string>& names, Seen* seen) {
  std::vector<Tensor> extra = ledger.Deal(worker);
  EXPECT_EQ(extra.size(), 2u);
  absl::StatusOr<Deal> deal = ParseDeal(extra[0]);
  EXPECT_TRUE(deal.ok()) << deal.status();
  const nlohmann::json descriptors = nlohmann::json::parse(extra[1].data);
  EXPECT_EQ(descriptors.size(), deal->splits.size());
  std::vector<int64_t> ids, trained;
  for (size_t i = 0; i < deal->splits.size(); ++i) {
    const DealtSplit& d = deal->splits[i];
    ids.push_back(d.id);
    EXPECT_EQ(descriptors[i].get<std::string>(), names[d.id]);
    std::set<int64_t> skip(d.skip.begin(), d.skip.end());
    for (int64_t r = 0; r < rows[d.id]; ++r) {
      if (skip.count(r) == 0) trained.push_back(RowId(d.id, r));
    }
  }
  for (int64_t r : trained) ++(*seen)[r];
  ledger.Completed(worker, {Tensor::Scalar<float>(0), Tensor::Scalar<int64_t>(0),
                            Tensor::Scalar<float>(0), Tensor::FromVector(trained)});
  return ids;
}

TEST(SplitLedgerTest, Follow_SplitsArriveWhileDealing_EachDealtOnceInArrivalOrder) {
  SplitLedgerOptions o = Options({}, 2);
  o.follow = true;
  o.hold_rows = 8;
  auto ledger = *SplitLedger::Create(o);
  std::vector<int64_t> rows;
  std::vector<std::string> names;
  auto arrive = [&](std::vector<int64_t> r) {
    std::vector<std::string> n;
    for (int64_t x : r) {
      rows.push_back(x);
      names.push_back(absl::StrCat("file", names.size()));
      n.push_back(names.back());
    }
    ASSERT_TRUE(ledger->Append(r, n).ok());
  };
  Seen seen;
  // Nothing yet: a deal deals nothing.
  EXPECT_TRUE(FollowClosure(*ledger, 0, rows, names, &seen).empty());
  arrive({5, 5, 0, 5});
  EXPECT_EQ(ledger->num_splits(), 4);
  EXPECT_EQ(ledger->counts().rows_left, 15);
  EXPECT_THAT(FollowClosure(*ledger, 0, rows, names, &seen), ::testing::ElementsAre(0, 1));
  EXPECT_THAT(FollowClosure(*ledger, 1, rows, names, &seen), ::testing::ElementsAre(3));
  // All trained: the data never runs out when following, so no worker takes a closure.
  EXPECT_EQ(ledger->counts().rows_left, 0);
  EXPECT_FALSE(ledger->CanTake(0));
  EXPECT_FALSE(ledger->CanTake(1));
  arrive({3, 4});
  EXPECT_TRUE(ledger->CanTake(1));
  EXPECT_THAT(FollowClosure(*ledger, 1, rows, names, &seen), ::testing::ElementsAre(4, 5));
  EXPECT_EQ(ledger->ClosuresCompleted(), 4);
  EXPECT_EQ(seen.size(), 22u);
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(ledger->counts().splits_done, 5);  // the empty split isn't counted
}

TEST(SplitLedgerTest, Follow_StateRestore_GoesOnWithoutRepeatsAndTakesNewArrivals) {
  SplitLedgerOptions o = Options({}, 1);
  o.follow = true;
  o.hold_rows = 4;
  o.batch_size = 4;
  const std::vector<int64_t> rows = {4, 4, 4, 4};
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  auto first = *SplitLedger::Create(o);
  ASSERT_TRUE(first->Append({4, 4, 4}, {"a", "b", "c"}).ok());
  Seen seen;
  EXPECT_THAT(FollowClosure(*first, 0, rows, names, &seen), ::testing::ElementsAre(0));
  const std::string state = first->State();

  // The job again: the splits known at the checkpoint arrive first, in their order; then the
  // restore; then what arrived since.
  auto second = *SplitLedger::Create(o);
  ASSERT_TRUE(second->Append({4, 4}, {"a", "b"}).ok());
  EXPECT_THAT(second->Restore(state).message(), HasSubstr("the data changed"));
  ASSERT_TRUE(second->Append({4}, {"c"}).ok());
  ASSERT_TRUE(second->Restore(state).ok());
  ASSERT_TRUE(second->Append({4}, {"d"}).ok());
  std::vector<int64_t> dealt;
  for (int i = 0; i < 3; ++i) {
    for (int64_t id : FollowClosure(*second, 0, rows, names, &seen)) dealt.push_back(id);
  }
  EXPECT_THAT(dealt, ::testing::ElementsAre(1, 2, 3));
  EXPECT_EQ(seen.size(), 16u);
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(second->counts().rows_left, 0);
}

TEST(SplitLedgerTest, Follow_BadUse_NamesWhatIsWrong) {
  SplitLedgerOptions o = Options({}, 1);
  o.follow = true;
  o.epochs = 2;
  EXPECT_THAT(SplitLedger::Create(o).status().message(), HasSubstr("deals it once"));
  auto fixed = *SplitLedger::Create(Options({3}, 1));
  EXPECT_EQ(fixed->Append({1}, {"x"}).code(), absl::StatusCode::kFailedPrecondition);
  o.epochs = 1;
  auto follow = *SplitLedger::Create(o);
  EXPECT_THAT(follow->Append({1, 2}, {"x"}).message(), HasSubstr("2 splits but 1 descriptors"));
  EXPECT_THAT(follow->Append({-1}, {"x"}).message(), HasSubstr("-1 rows"));
}

TEST(SplitLedgerTest, Create_BadOptions_NameWhatIsWrong) {
  EXPECT_THAT(std::string(SplitLedger::Create(Options({0, 0}, 1)).status().message()),
              HasSubstr("no training rows"));
  EXPECT_THAT(std::string(SplitLedger::Create(Options({-1}, 1)).status().message()),
              HasSubstr("split 0 has -1 rows"));
  SplitLedgerOptions o = Options({3}, 1);
  o.epochs = 0;
  EXPECT_THAT(std::string(SplitLedger::Create(o).status().message()), HasSubstr("epochs 0"));
}

TEST(SplitLedgerTest, ParseDeal_RoundTripsAndRejectsMalformed) {
  Deal in;
  in.seq = 4;
  in.splits = {{3, {}}, {7, {0, 4, 5}}};
  absl::StatusOr<Deal> out = ParseDeal(EncodeDeal(in));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->seq, 4);
  ASSERT_EQ(out->splits.size(), 2u);
  EXPECT_EQ(out->splits[1].id, 7);
  EXPECT_EQ(out->splits[1].skip, (std::vector<int64_t>{0, 4, 5}));
  EXPECT_FALSE(ParseDeal(Tensor::FromVector(std::vector<int64_t>{1, 2, 3, 0})).ok());
  EXPECT_FALSE(ParseDeal(Tensor::FromVector(std::vector<int64_t>{1, 1, 3, 5, 1})).ok());
  EXPECT_FALSE(ParseDeal(Tensor::FromVector(std::vector<int64_t>{1})).ok());
  EXPECT_FALSE(ParseDeal(Tensor::FromVector(std::vector<float>{1})).ok());
}

}  // namespace
}  // namespace pstrain
