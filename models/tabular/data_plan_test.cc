// The scan, the shares and the streams of the tabular model's data, on CSV files the tests write:
// every training row goes to exactly one worker (by file and by row ranges, plain and gzip), a
// stream's epoch yields each of its rows once from a bounded buffer, the splits and statistics
// are what they should be, and bad rows are errors naming the file, line and column (or skipped
// and counted alike by the scan and the readers).
#include <zlib.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tabular/data_plan.h"
#include "models/tabular/example_stream.h"
#include "models/tabular/spec_test_util.h"

namespace pstrain {
namespace tabular {
namespace {

using ::testing::HasSubstr;

// id (unique per row), x (numeric), g (categorical), y (0/1 label).
const char* kSpec = R"({'label': {'column': 'y'},
  'features': [{'name': 'id', 'column': 'id'},
               {'name': 'x', 'type': 'numeric', 'column': 'x'},
               {'name': 'g', 'column': 'g'}]})";

void WriteText(const std::string& path, const std::string& text, bool gzip = false) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())),
              static_cast<int>(text.size()));
    gzclose(f);
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Rows [first, first + n) of the table.
std::string Rows(int first, int n, bool header = true) {
  std::string text = header ? "id,x,g,y\n" : "";
  for (int i = first; i < first + n; ++i) {
    absl::StrAppend(&text, "r", i, ",", i % 97, ",g", i % 5, ",", i % 3 == 0 ? 1 : 0, "\n");
  }
  return text;
}

// The id key of every training row in `share`, read by a RangeReader.
std::vector<int64_t> ReadShare(DataContext* context, const std::vector<Range>& share,
                               Split split = Split::kTrain) {
  std::vector<int64_t> ids;
  Batch b;
  b.Resize(1, context->transformer().layout());
  for (const Range& r : share) {
    absl::StatusOr<std::unique_ptr<RangeReader>> reader = RangeReader::Open(context, r, split);
    EXPECT_TRUE(reader.ok()) << reader.status();
    while (true) {
      absl::StatusOr<bool> got = (*reader)->Next(b.At(0, context->transformer().layout()));
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok() || !*got) break;
      ids.push_back(b.keys[0]);
    }
  }
  return ids;
}

// Every training row's id key, each exactly once over all the shares, and the shares' sizes.
void ExpectEveryTrainingRowOnce(const Spec& spec, const DataPlan& plan, int64_t expected_train) {
  DataContext context(spec, plan, {});
  std::multiset<int64_t> seen;
  for (size_t w = 0; w < plan.shares.size(); ++w) {
    const std::vector<int64_t> ids = ReadShare(&context, plan.shares[w]);
    EXPECT_GT(ids.size(), 0u) << "worker " << w;
    int64_t declared = 0;
    for (const Range& r : plan.shares[w]) declared += r.train_rows;
    EXPECT_EQ(static_cast<int64_t>(ids.size()), declared) << "worker " << w;
    seen.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), expected_train);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a row twice";
}

TEST(DataPlanTest, ManyFiles_ShardedByFile_EveryRowToExactlyOneWorker) {
  const std::string dir = FreshTempDir("by_file");
  for (int f = 0; f < 5; ++f) WriteText(absl::StrCat(dir, "/part-", f, ".csv"), Rows(f * 300, 300));
  WriteText(dir + "/_SUCCESS", "");  // skipped, as Spark's marker files
  Spec spec = MustParse(kSpec);
  ScanOptions o;
  o.data = dir;
  o.workers = 2;
  absl::StatusOr<DataPlan> plan = Scan(spec, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->files.size(), 5u);
  // Worker 0 reads files 0, 2, 4; worker 1 files 1, 3.
  std::set<int> files0, files1;
  for (const Range& r : plan->shares[0]) files0.insert(r.file);
  for (const Range& r : plan->shares[1]) files1.insert(r.file);
  EXPECT_EQ(files0, (std::set<int>{0, 2, 4}));
  EXPECT_EQ(files1, (std::set<int>{1, 3}));
  EXPECT_EQ(plan->rows[0] + plan->rows[1] + plan->rows[2], 1500);
  ExpectEveryTrainingRowOnce(spec, *plan, plan->rows[0]);
}

TEST(DataPlanTest, OneFile_ShardedByRowRanges_PlainAndGzip) {
  for (bool gzip : {false, true}) {
    const std::string dir = FreshTempDir(gzip ? "by_rows_gz" : "by_rows");
    const std::string path = dir + (gzip ? "/t.csv.gz" : "/t.csv");
    WriteText(path, Rows(0, 5000), gzip);
    Spec spec = MustParse(kSpec);
    ScanOptions o;
    o.data = path;
    o.workers = 3;
    absl::StatusOr<DataPlan> plan = Scan(spec, o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->files[0].gzip, gzip);
    ASSERT_EQ(plan->shares.size(), 3u);
    for (const auto& share : plan->shares) {
      int64_t rows = 0;
      for (const Range& r : share) rows += r.rows;
      EXPECT_NEAR(rows, 5000 / 3, 50) << (gzip ? "gzip" : "plain");
    }
    ExpectEveryTrainingRowOnce(spec, *plan, plan->rows[0]);
  }
}

TEST(DataPlanTest, TinyFileManyWorkers_EveryWorkerStillTrains) {
  const std::string dir = FreshTempDir("tiny");
  WriteText(dir + "/t.csv", Rows(0, 12));
  Spec spec = MustParse(R"({'label': {'column': 'y'}, 'split': {'test_fraction': 0.1},
                            'features': [{'name': 'id', 'column': 'id'}]})");
  ScanOptions o;
  o.data = dir + "/t.csv";
  o.workers = 4;
  o.validation_fraction = 0;
  absl::StatusOr<DataPlan> plan = Scan(spec, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const auto& share : plan->shares) {
    int64_t train = 0;
    for (const Range& r : share) train += r.train_rows;
    EXPECT_GT(train, 0);
  }
}

// A file that arrived while a job follows its data: every row training, cut into ranges whose
// descriptors carry the file to a worker that never saw it, which reads each row once.
TEST(DataPlanTest, ScanArrival_EveryRowTraining_ReadByAWorkerFromItsDescriptors) {
  const std::string dir = FreshTempDir("arrival");
  WriteText(dir + "/000.csv", Rows(0, 300));
  WriteText(dir + "/001.csv", Rows(300, 12000));
  Spec spec = MustParse(kSpec);
  ScanOptions o;
  o.data = dir + "/000.csv";
  absl::StatusOr<DataPlan> plan = Scan(spec, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  FileInfo file;
  file.path = dir + "/001.csv";
  int64_t bad = 0;
  const int number = static_cast<int>(plan->files.size());
  absl::StatusOr<std::vector<Range>> ranges = ScanArrival(spec, o, number, &file, &bad);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_EQ(file.role, FileRole::kStream);
  EXPECT_EQ(file.rows, 12000);
  EXPECT_EQ(file.train_rows, 12000);  // no held-out rows in a stream
  EXPECT_EQ(bad, 0);
  ASSERT_GT(ranges->size(), 1u);
  // A worker's context knows only the plan; the descriptors bring the file.
  DataContext context(spec, *plan, {});
  std::vector<Range> parsed;
  int64_t train = 0;
  for (const Range& r : *ranges) {
    FileInfo f;
    Range back;
    ASSERT_TRUE(ParseFollowedSplit(FollowedSplitDescriptor(file, r), &f, &back).ok());
    EXPECT_EQ(back.file, number);
    ASSERT_TRUE(context.AddFile(back.file, f).ok());
    parsed.push_back(back);
    train += back.train_rows;
  }
  EXPECT_EQ(train, 12000);
  const std::vector<int64_t> ids = ReadShare(&context, parsed);
  EXPECT_EQ(ids.size(), 12000u);
  EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), 12000u);
  // Another file under the same number is refused; a malformed descriptor is named.
  FileInfo other = file;
  other.path = dir + "/002.csv";
  EXPECT_THAT(context.AddFile(number, other).message(), HasSubstr("not " + other.path));
  FileInfo f;
  Range r;
  EXPECT_THAT(ParseFollowedSplit("{\"file\": 3}", &f, &r).message(), HasSubstr("malformed"));
}

TEST(DataPlanTest, Splits_FractionsColumnAndFiles) {
  const std::string dir = FreshTempDir("splits");
  WriteText(dir + "/t.csv", Rows(0, 20000));
  Spec spec = MustParse(kSpec);
  ScanOptions o;
  o.data = dir + "/t.csv";
  absl::StatusOr<DataPlan> plan = Scan(spec, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 20% test; 10% of the rest validates.
  EXPECT_NEAR(plan->rows[2], 4000, 250);
  EXPECT_NEAR(plan->rows[1], 1600, 200);
  EXPECT_EQ(plan->rows[0] + plan->rows[1] + plan->rows[2], 20000);
  // The evaluation units hold exactly the held-out rows.
  DataContext context(spec, *plan, {});
  EXPECT_EQ(static_cast<int64_t>(ReadShare(&context, plan->EvalUnits(Split::kTest), Split::kTest)
                                     .size()),
            plan->rows[2]);
  EXPECT_EQ(static_cast<int64_t>(
                ReadShare(&context, plan->EvalUnits(Split::kValidation), Split::kValidation)
                    .size()),
            plan->rows[1]);

  // A time split: rows whose id sorts >= "r5" are test (r5, r50.., r5000..).
  Spec by_column = MustParse(absl::StrReplaceAll(
      kSpec, {{"'features'", "'split': {'test': {'column': 'id', 'at_least': 'r5'}}, 'features'"}}));
  absl::StatusOr<DataPlan> p2 = Scan(by_column, o);
  ASSERT_TRUE(p2.ok()) << p2.status();
  int64_t expected_test = 0;
  for (int i = 0; i < 20000; ++i) expected_test += absl::StrCat("r", i) >= "r5";
  EXPECT_EQ(p2->rows[2], expected_test);

  // Validation and test files: all their rows are that split; the data only trains.
  WriteText(dir + "/v.csv", Rows(30000, 100));
  WriteText(dir + "/test.csv", Rows(40000, 70));
  Spec with_files = MustParse(absl::StrReplaceAll(
      kSpec, {{"'features'", "'split': {'test_data': '" + dir + "/test.csv'}, 'features'"}}));
  o.validation_data = dir + "/v.csv";
  absl::StatusOr<DataPlan> p3 = Scan(with_files, o);
  ASSERT_TRUE(p3.ok()) << p3.status();
  EXPECT_EQ(p3->rows[0], 20000);
  EXPECT_EQ(p3->rows[1], 100);
  EXPECT_EQ(p3->rows[2], 70);
}

TEST(DataPlanTest, Stats_MeanStddevQuantilesAndVocabulary) {
  const std::string dir = FreshTempDir("stats");
  std::string text = "x,q,d,y\n";
  for (int i = 0; i < 10000; ++i) {
    absl::StrAppend(&text, i % 10, ",", i, ",", absl::StrFormat("2001-01-%02d", 1 + i % 28), ",",
                    i % 2, "\n");
  }
  WriteText(dir + "/t.csv", text);
  Spec spec = MustParse(R"({'label': {'column': 'y'}, 'split': {'test_fraction': 0.01},
    'features': [{'name': 'x', 'type': 'numeric', 'column': 'x'},
                 {'name': 'q', 'type': 'numeric', 'column': 'q', 'transform': 'bucketize',
                  'quantiles': 4},
                 {'name': 'd', 'type': 'datetime', 'column': 'd', 'part': 'day',
                  'unknown_fraction': 0.1}]})");
  ScanOptions o;
  o.data = dir + "/t.csv";
  o.validation_fraction = 0;
  absl::StatusOr<DataPlan> plan = Scan(spec, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NEAR(plan->stats.features[0].mean, 4.5, 0.05);
  EXPECT_NEAR(plan->stats.features[0].stddev, std::sqrt(8.25), 0.05);  // uniform on 0..9
  ASSERT_EQ(plan->stats.features[1].boundaries.size(), 3u);
  EXPECT_NEAR(plan->stats.features[1].boundaries[0], 2500, 150);
  EXPECT_NEAR(plan->stats.features[1].boundaries[1], 5000, 150);
  EXPECT_NEAR(plan->stats.features[1].boundaries[2], 7500, 150);
  EXPECT_EQ(plan->stats.features[2].vocabulary.size(), 28u);
  EXPECT_NEAR(plan->stats.label_mean, 0.5, 0.02);
  // Through JSON, as the workers get it.
  absl::StatusOr<DataPlan> back = DataPlan::FromJson(
      nlohmann::json::parse(plan->ToJson().dump()), spec.features.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->stats.features[1].boundaries, plan->stats.features[1].boundaries);
  EXPECT_EQ(back->shares.size(), plan->shares.size());
  EXPECT_EQ(back->rows[0], plan->rows[0]);
}

// A stream over a share: each epoch gives every row once, in another order, from a buffer of 64.
TEST(TrainStreamTest, EachEpochEveryRowOnce_BoundedBuffer) {
  const std::string dir = FreshTempDir("stream");
  WriteText(dir + "/t.csv", Rows(0, 3000));
  Spec spec = MustParse(kSpec);
  ScanOptions o;
  o.data = dir + "/t.csv";
  o.workers = 2;
  absl::StatusOr<DataPlan> plan = Scan(spec, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  DataContext context(spec, *plan, {});
  int64_t share_rows = 0;
  for (const Range& r : plan->shares[1]) share_rows += r.train_rows;
  TrainStream::Options so;
  so.worker = 1;
  so.shuffle_buffer = 64;
  so.interleave = 3;
  TrainStream stream(&context, plan->shares[1], so);
  EXPECT_EQ(stream.BufferBytes(), 64 * (8 * 2 + 4 * 1 + 4));
  std::vector<int64_t> epochs[2];
  Batch b;
  for (int e = 0; e < 2; ++e) {
    while (static_cast<int64_t>(epochs[e].size()) < share_rows) {
      const int64_t n = std::min<int64_t>(50, share_rows - epochs[e].size());
      ASSERT_TRUE(stream.Next(0, n, &b).ok());
      for (int64_t i = 0; i < n; ++i) epochs[e].push_back(b.keys[i * 2]);
    }
  }
  for (const auto& ids : epochs) {
    EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), static_cast<size_t>(share_rows));
  }
  EXPECT_EQ(std::set<int64_t>(epochs[0].begin(), epochs[0].end()),
            std::set<int64_t>(epochs[1].begin(), epochs[1].end()));
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_EQ(stream.epoch(), 1);
}

// Closures run in any order: a closure draws rows only once every deal up to its own arrived, so
// one that ran ahead of an earlier deal never draws the rows counted for a closure before it (whose
// batch would come short). A deal that never comes is waited for once, up to the deadline.
TEST(DealtStreamTest, ClosureDrawsOnlyOnceTheDealsUpToItsOwnArrived) {
  const std::string dir = FreshTempDir("dealt");
  WriteText(dir + "/t.csv", Rows(0, 3000));
  Spec spec = MustParse(kSpec);
  ScanOptions o;
  o.data = dir + "/t.csv";
  o.min_ranges = 4;
  absl::StatusOr<DataPlan> plan = Scan(spec, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->shares.size(), 1u);
  const std::vector<Range>& splits = plan->shares[0];
  ASSERT_GE(splits.size(), 4u);
  DataContext context(spec, *plan, {});
  DealtStream stream(&context, splits, {});
  auto deal = [](int64_t seq, int64_t split) {
    Deal d;
    d.seq = seq;
    d.splits.push_back(DealtSplit{split, {}});
    return d;
  };
  // Deals 1 and 3 arrived, 2 is on its way: the closure of deal 3 waits for it (no deadline is
  // reached in this test), while the closure of deal 1 draws every row there.
  ASSERT_TRUE(stream.AddSplits(deal(1, 0)).ok());
  ASSERT_TRUE(stream.AddSplits(deal(3, 2)).ok());
  std::atomic<bool> done{false};
  Batch ahead;
  std::thread closure([&] {
    EXPECT_TRUE(stream.Next(10, 3, &ahead, absl::Minutes(5)).ok());
    done = true;
  });
  Batch first;
  const int64_t there = splits[0].train_rows + splits[2].train_rows;
  ASSERT_TRUE(stream.Next(there, 1, &first).ok());
  EXPECT_EQ(first.n, there);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(done.load()) << "drew " << ahead.n << " rows before deal 2 arrived";
  ASSERT_TRUE(stream.AddSplits(deal(2, 1)).ok());
  closure.join();
  EXPECT_EQ(ahead.n, 10);
  // Deal 5 arrived, deal 4 never does: a closure of deal 5 waits its deadline then draws, and the
  // next does not wait for deal 4 again.
  ASSERT_TRUE(stream.AddSplits(deal(5, 3)).ok());
  Batch b;
  ASSERT_TRUE(stream.Next(10, 5, &b, absl::Milliseconds(50)).ok());
  EXPECT_EQ(b.n, 10);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(stream.Next(10, 5, &b, absl::Minutes(5)).ok());
  EXPECT_EQ(b.n, 10);
  EXPECT_LT(absl::Now() - start, absl::Minutes(1));
  // Deal 4 coming late still trains: every row of the four splits drawn once.
  ASSERT_TRUE(stream.AddSplits(deal(4, 0)).ok());
  int64_t total = first.n + ahead.n + 20;
  while (true) {
    ASSERT_TRUE(stream.Next(64, 5, &b).ok());
    if (b.n == 0) break;
    total += b.n;
  }
  EXPECT_EQ(total, 2 * splits[0].train_rows + splits[1].train_rows + splits[2].train_rows +
                       splits[3].train_rows);
}

TEST(DataPlanErrorTest, BadRows_NameFileLineAndColumn_OrSkippedAndCountedAlike) {
  const std::string dir = FreshTempDir("bad");
  std::string text = Rows(0, 200);
  text += "r900,ten,g1,1\n";   // line 202: not a number
  text += "r901,1,g1,maybe\n"; // line 203: not a binary label
  text += "r902,1,g1\n";       // line 204: 3 fields
  text += Rows(1000, 200, /*header=*/false);
  WriteText(dir + "/t.csv", text);
  Spec spec = MustParse(kSpec);
  ScanOptions o;
  o.data = dir + "/t.csv";
  EXPECT_THAT(Scan(spec, o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t.csv:202: column 'x': 'ten' is not a number")));
  o.skip_bad_rows = true;
  absl::StatusOr<DataPlan> plan = Scan(spec, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->bad_rows, 3);
  ASSERT_EQ(plan->bad_row_examples.size(), 3u);
  EXPECT_THAT(plan->bad_row_examples[1], HasSubstr(":203: column 'y': 'maybe' is not a binary"));
  EXPECT_THAT(plan->bad_row_examples[2], HasSubstr(":204: 3 fields, the header has 4"));
  EXPECT_EQ(plan->rows[0] + plan->rows[1] + plan->rows[2], 400);
  // The readers skip the same rows (whichever split they fall in) and count them.
  DataContext::Options co;
  co.skip_bad_rows = true;
  DataContext context(spec, *plan, co);
  int64_t read = 0;
  for (Split s : {Split::kTrain, Split::kValidation, Split::kTest}) {
    std::vector<Range> units = plan->EvalUnits(s == Split::kTrain ? Split::kTest : s);
    if (s == Split::kTrain) units = plan->shares[0];
    read += static_cast<int64_t>(ReadShare(&context, units, s).size());
  }
  EXPECT_EQ(read, 400);
  EXPECT_EQ(context.bad_rows(), 3);
  // Without skipping, the reader of a bad row's split names the row.
  DataContext strict(spec, *plan, {});
  std::vector<std::string> errors;
  for (Split s : {Split::kTrain, Split::kValidation, Split::kTest}) {
    std::vector<Range> units = s == Split::kTrain ? plan->shares[0] : plan->EvalUnits(s);
    for (const Range& unit : units) {
      absl::StatusOr<std::unique_ptr<RangeReader>> r = RangeReader::Open(&strict, unit, s);
      ASSERT_TRUE(r.ok());
      Batch b;
      b.Resize(1, strict.transformer().layout());
      while (true) {
        absl::StatusOr<bool> got = (*r)->Next(b.At(0, strict.transformer().layout()));
        if (!got.ok()) errors.push_back(std::string(got.status().message()));
        if (!got.ok() || !*got) break;
      }
    }
  }
  ASSERT_FALSE(errors.empty());
  for (const std::string& e : errors) {
    EXPECT_THAT(e, ::testing::ContainsRegex("t\\.csv:20[234]: ")) << e;
  }
}

TEST(DataPlanErrorTest, MissingColumnEmptyFileNoMatchNoTestRows) {
  const std::string dir = FreshTempDir("errors");
  WriteText(dir + "/a.csv", Rows(0, 10));
  WriteText(dir + "/b.csv", "id,g,y\nr1,g,1\n");
  Spec spec = MustParse(kSpec);
  ScanOptions o;
  o.data = dir + "/*.csv";
  EXPECT_THAT(Scan(spec, o), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("b.csv: no column 'x' (the spec t.json needs it; "
                                                "columns: id, g, y)")));
  WriteText(dir + "/b.csv", "");
  EXPECT_THAT(Scan(spec, o), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("b.csv: empty file (expected a header line)")));
  o.data = dir + "/*.tsv";
  EXPECT_THAT(Scan(spec, o),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no files match")));
  o.data = dir + "/none.csv";
  EXPECT_THAT(Scan(spec, o),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no such data file")));
  Spec all_train = MustParse(absl::StrReplaceAll(
      kSpec, {{"'features'", "'split': {'test': {'column': 'id', 'at_least': 'zzz'}}, 'features'"}}));
  o.data = dir + "/a.csv";
  EXPECT_THAT(Scan(all_train, o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no test rows")));
}

}  // namespace
}  // namespace tabular
}  // namespace pstrain
