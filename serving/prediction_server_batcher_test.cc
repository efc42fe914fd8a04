// PredictionBatcher over fake models: concurrent requests merge into one model call and each gets
// its own rows back (columns in any order), a request the merge can't take or whose value is bad
// fails alone with the model's own message, a batch runs once its wait is over, and new batches
// go to a new version while the old one is freed after its last answer.
#include "serving/prediction_server_batcher.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Predicts x * scale + y for each row (a missing field reads 0); "bad" is an error naming the row
// and column, as the real heads do. Records the rows of each call.
class FakeModel final : public ServableModel {
 public:
  FakeModel(int64_t version, float scale, int extra_floats = 0)
      : version_(version), scale_(scale), extra_floats_(extra_floats) {}

  int64_t version() const override { return version_; }
  const std::vector<std::string>& columns() const override { return columns_; }
  const std::vector<std::string>& outputs() const override { return outputs_; }

  absl::Status Predict(const RawExamples& examples, std::vector<float>* out) const override {
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(static_cast<int>(examples.rows.size()));
    }
    int at[2] = {-1, -1};
    for (int c = 0; c < 2; ++c) {
      for (size_t i = 0; i < examples.columns.size(); ++i) {
        if (examples.columns[i] == columns_[c]) at[c] = static_cast<int>(i);
      }
      if (at[c] < 0) return absl::InvalidArgumentError(absl::StrCat("fake: no column ", columns_[c]));
    }
    out->clear();
    for (size_t r = 0; r < examples.rows.size(); ++r) {
      float v[2] = {0, 0};
      for (int c = 0; c < 2; ++c) {
        const std::vector<std::string>& row = examples.rows[r];
        if (at[c] >= static_cast<int>(row.size()) || row[at[c]].empty()) continue;
        if (!absl::SimpleAtof(row[at[c]], &v[c])) {
          return absl::InvalidArgumentError(
              absl::StrCat("fake: row ", r, ": column ", columns_[c], ": \"", row[at[c]], "\""));
        }
      }
      out->push_back(v[0] * scale_ + v[1]);
    }
    for (int i = 0; i < extra_floats_; ++i) out->push_back(0);
    return absl::OkStatus();
  }

  std::vector<int> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  const int64_t version_;
  const float scale_;
  const int extra_floats_;
  const std::vector<std::string> columns_ = {"x", "y"};
  const std::vector<std::string> outputs_ = {"value"};
  mutable absl::Mutex mu_;
  mutable std::vector<int> calls_ ABSL_GUARDED_BY(mu_);
};

RawExamples Rows(std::vector<std::string> columns, std::vector<std::vector<std::string>> rows) {
  RawExamples e;
  e.columns = std::move(columns);
  e.rows = std::move(rows);
  return e;
}

// Runs every request of `requests` on its own thread at once; their answers in order.
std::vector<absl::StatusOr<BatchedPrediction>> PredictAll(PredictionBatcher* batcher,
                                                          const std::vector<RawExamples>& requests) {
  std::vector<absl::StatusOr<BatchedPrediction>> got(requests.size(),
                                                     absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { got[i] = batcher->Predict(requests[i]); });
  }
  for (std::thread& t : threads) t.join();
  return got;
}

// A batch that closes only when full: `examples` examples, and a wait far longer than any test.
PredictionBatcherOptions FullBatches(int examples) {
  PredictionBatcherOptions o;
  o.max_batch_examples = examples;
  o.max_batch_wait = absl::Seconds(60);
  o.threads = 1;
  return o;
}

TEST(PredictionBatcherTest, Predict_ConcurrentRequests_OneModelCallEachGetsItsRows) {
  auto model = std::make_shared<FakeModel>(/*version=*/1, /*scale=*/10);
  PredictionBatcher batcher(FullBatches(/*examples=*/5), [model] { return model; });
  const std::vector<RawExamples> requests = {
      Rows({"x", "y"}, {{"1", "2"}}),
      Rows({"y", "x"}, {{"3", "4"}, {"5", "6"}}),  // another order
      Rows({"label", "x", "y", "z"}, {{"0", "7", "8", "9"}}),  // columns the model doesn't read
      Rows({"x", "y"}, {{"9"}}),  // a short row: y missing
  };
  const std::vector<absl::StatusOr<BatchedPrediction>> got = PredictAll(&batcher, requests);
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_THAT(got[0]->predictions, ElementsAre(12));
  ASSERT_TRUE(got[1].ok()) << got[1].status();
  EXPECT_THAT(got[1]->predictions, ElementsAre(43, 65));
  ASSERT_TRUE(got[2].ok()) << got[2].status();
  EXPECT_THAT(got[2]->predictions, ElementsAre(78));
  ASSERT_TRUE(got[3].ok()) << got[3].status();
  EXPECT_THAT(got[3]->predictions, ElementsAre(90));
  for (const auto& g : got) {
    EXPECT_EQ(g->model->version(), 1);
    EXPECT_EQ(g->batch_requests, 4);
  }
  EXPECT_THAT(model->calls(), ElementsAre(5));
  const BatchStats stats = batcher.stats();
  EXPECT_EQ(stats.requests, 4);
  EXPECT_EQ(stats.examples, 5);
  EXPECT_EQ(stats.batches, 1);
  EXPECT_EQ(stats.merged_batches, 1);
  EXPECT_EQ(stats.largest_batch_requests, 4);
  EXPECT_EQ(stats.largest_batch_examples, 5);
  EXPECT_EQ(stats.alone, 0);
}

TEST(PredictionBatcherTest, Predict_MissingOrDuplicateColumn_FailsAloneWithModelMessage) {
  auto model = std::make_shared<FakeModel>(/*version=*/1, /*scale=*/10);
  PredictionBatcher batcher(FullBatches(/*examples=*/4), [model] { return model; });
  const std::vector<RawExamples> requests = {
      Rows({"x", "y"}, {{"1", "2"}}),
      Rows({"x", "w"}, {{"3", "4"}}),       // no y
      Rows({"x", "y", "x"}, {{"1", "2", "3"}}),  // x twice: the model decides (its first)
      Rows({"x", "y"}, {{"5", "6"}}),
  };
  const std::vector<absl::StatusOr<BatchedPrediction>> got = PredictAll(&batcher, requests);
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_THAT(got[0]->predictions, ElementsAre(12));
  EXPECT_THAT(got[1].status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("fake: no column y")));
  ASSERT_TRUE(got[2].ok()) << got[2].status();
  EXPECT_EQ(got[2]->batch_requests, 1);
  ASSERT_TRUE(got[3].ok()) << got[3].status();
  EXPECT_THAT(got[3]->predictions, ElementsAre(56));
  EXPECT_EQ(got[3]->batch_requests, 2);
  EXPECT_EQ(batcher.stats().alone, 2);
  EXPECT_EQ(batcher.stats().merged_batches, 1);
}

TEST(PredictionBatcherTest, Predict_BadValueInOneRequest_OnlyItFailsWithItsOwnRowNumber) {
  auto model = std::make_shared<FakeModel>(/*version=*/1, /*scale=*/10);
  PredictionBatcher batcher(FullBatches(/*examples=*/5), [model] { return model; });
  const std::vector<RawExamples> requests = {
      Rows({"x", "y"}, {{"1", "2"}, {"3", "4"}}),
      Rows({"x", "y"}, {{"1", "2"}, {"bad", "4"}}),
      Rows({"x", "y"}, {{"5", "6"}}),
  };
  const std::vector<absl::StatusOr<BatchedPrediction>> got = PredictAll(&batcher, requests);
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_THAT(got[0]->predictions, ElementsAre(12, 34));
  EXPECT_THAT(got[1].status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                        AllOf(HasSubstr("row 1:"), HasSubstr("column x"),
                                              HasSubstr("bad"))));
  ASSERT_TRUE(got[2].ok()) << got[2].status();
  EXPECT_THAT(got[2]->predictions, ElementsAre(56));
  // The merged call, then each request alone (in the order they arrived).
  const std::vector<int> calls = model->calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0], 5);
  EXPECT_THAT(std::vector<int>(calls.begin() + 1, calls.end()),
              ::testing::UnorderedElementsAre(2, 2, 1));
  EXPECT_EQ(batcher.stats().alone, 3);
}

TEST(PredictionBatcherTest, Predict_WaitOver_PartialBatchRuns_LargeRequestAlone) {
  auto model = std::make_shared<FakeModel>(/*version=*/1, /*scale=*/1);
  PredictionBatcherOptions options;
  options.max_batch_examples = 2;
  options.max_batch_wait = absl::Milliseconds(1);
  PredictionBatcher batcher(options, [model] { return model; });
  absl::StatusOr<BatchedPrediction> one = batcher.Predict(Rows({"x", "y"}, {{"1", "1"}}));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(one->predictions, ElementsAre(2));
  absl::StatusOr<BatchedPrediction> big =
      batcher.Predict(Rows({"x", "y"}, {{"1", "1"}, {"2", "2"}, {"3", "3"}}));
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_THAT(big->predictions, ElementsAre(2, 4, 6));
  EXPECT_THAT(model->calls(), ElementsAre(1, 3));
  // No examples: an answer with no predictions.
  absl::StatusOr<BatchedPrediction> none = batcher.Predict(Rows({"x", "y"}, {}));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->predictions.empty());
}

TEST(PredictionBatcherTest, Predict_ModelAnswersWrongCount_Internal) {
  auto model = std::make_shared<FakeModel>(/*version=*/3, /*scale=*/1, /*extra_floats=*/1);
  PredictionBatcher batcher(PredictionBatcherOptions(), [model] { return model; });
  EXPECT_THAT(batcher.Predict(Rows({"x", "y"}, {{"1", "1"}})).status(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("version 3 answered 2 floats")));
}

TEST(PredictionBatcherTest, Predict_SourceSwitches_NewBatchesUseNewVersion_OldFreedAfterAnswers) {
  absl::Mutex mu;
  std::shared_ptr<const ServableModel> current = std::make_shared<FakeModel>(1, /*scale=*/1);
  std::weak_ptr<const ServableModel> first = current;
  PredictionBatcher batcher(PredictionBatcherOptions(), [&] {
    absl::MutexLock lock(&mu);
    return current;
  });
  absl::StatusOr<BatchedPrediction> before = batcher.Predict(Rows({"x", "y"}, {{"1", "1"}}));
  ASSERT_TRUE(before.ok()) << before.status();
  {
    absl::MutexLock lock(&mu);
    current = std::make_shared<FakeModel>(2, /*scale=*/100);
  }
  absl::StatusOr<BatchedPrediction> after = batcher.Predict(Rows({"x", "y"}, {{"1", "1"}}));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->model->version(), 2);
  EXPECT_THAT(after->predictions, ElementsAre(101));
  // The first version lives while an answer holds it, and not after.
  EXPECT_FALSE(first.expired());
  before = absl::UnknownError("dropped");
  EXPECT_TRUE(first.expired());
}

}  // namespace
}  // namespace pstrain
