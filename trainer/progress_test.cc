#include "trainer/progress.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

// A clock the test moves by hand, and output captured in a string.
class ProgressTest : public ::testing::Test {
 protected:
  ProgressOptions FakeOptions(bool is_tty) {
    ProgressOptions options;
    options.out = &out_;
    options.is_tty = is_tty;
    options.clock = [this] { return now_; };
    return options;
  }

  std::unique_ptr<ProgressReporter> MakeReporter(const ProgressOptions& options) {
    absl::StatusOr<std::unique_ptr<ProgressReporter>> reporter = ProgressReporter::Create(options);
    EXPECT_TRUE(reporter.ok()) << reporter.status();
    return reporter.ok() ? *std::move(reporter) : nullptr;
  }

  // Plain-mode output as lines (without the trailing empty piece).
  std::vector<std::string> Lines() const {
    std::vector<std::string> lines = absl::StrSplit(out_.str(), '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    return lines;
  }

  void Advance(absl::Duration d) { now_ += d; }

  absl::Time now_ = absl::FromUnixSeconds(1700000000);
  std::ostringstream out_;
};

TEST_F(ProgressTest, Update_PlainOutput_OneLinePerLineInterval) {
  ProgressOptions options = FakeOptions(/*is_tty=*/false);
  options.line_interval = absl::Seconds(5);
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  for (int step = 1; step <= 12; ++step) {
    Advance(absl::Seconds(1));
    reporter->Update(step, /*examples_done=*/step * 10, /*loss=*/1.0);
  }
  // Printed at t = 1 s (the first update), 6 s and 11 s.
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  EXPECT_THAT(lines[0], HasSubstr("step 1 "));
  EXPECT_THAT(lines[1], HasSubstr("step 6 "));
  EXPECT_THAT(lines[2], HasSubstr("step 11 "));
  EXPECT_THAT(out_.str(), Not(HasSubstr("\r")));
}

TEST_F(ProgressTest, Update_SteadyRun_ShowsStepRateLossElapsedEta) {
  ProgressOptions options = FakeOptions(/*is_tty=*/false);
  options.total_steps = 100;
  options.line_interval = absl::ZeroDuration();  // every update prints
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  // 10 steps/s, 32 examples per step, loss 0.5.
  for (int step = 1; step <= 50; ++step) {
    Advance(absl::Milliseconds(100));
    reporter->Update(step, /*examples_done=*/step * 32, /*loss=*/0.5);
  }
  EXPECT_EQ(Lines().back(),
            "step 50/100 (50.0%)  320.0 ex/s  loss 0.5  elapsed 5s  eta 5s");
}

// The note (e.g. the data dealt so far) follows the figures, read afresh for each line.
TEST_F(ProgressTest, Update_Note_AppendedAfterElapsed) {
  ProgressOptions options = FakeOptions(/*is_tty=*/false);
  options.total_steps = 100;
  options.line_interval = absl::ZeroDuration();
  int calls = 0;
  options.note = [&calls] { return absl::StrCat("splits ", ++calls, "/9 done"); };
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  for (int step = 1; step <= 2; ++step) {
    Advance(absl::Milliseconds(100));
    reporter->Update(step, /*examples_done=*/step * 32, /*loss=*/0.5);
  }
  EXPECT_THAT(Lines().back(), HasSubstr("elapsed 0s  splits 2/9 done  eta"));
}

// A synchronous chief counts its part of each batch; examples_scale shows the job's rate.
TEST_F(ProgressTest, Update_ExamplesScale_RateScaled_NonPositiveRefused) {
  ProgressOptions options = FakeOptions(/*is_tty=*/false);
  options.total_steps = 100;
  options.line_interval = absl::ZeroDuration();
  options.examples_scale = 3;
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  for (int step = 1; step <= 50; ++step) {
    Advance(absl::Milliseconds(100));
    reporter->Update(step, /*examples_done=*/step * 32, /*loss=*/0.5);
  }
  EXPECT_THAT(Lines().back(), HasSubstr("  960.0 ex/s  "));
  options.examples_scale = 0;
  absl::StatusOr<std::unique_ptr<ProgressReporter>> bad = ProgressReporter::Create(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("examples_scale"));
}

TEST_F(ProgressTest, Update_NoTotalSteps_NoPercentageOrEta) {
  ProgressOptions options = FakeOptions(/*is_tty=*/false);
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  Advance(absl::Seconds(2));
  reporter->Update(/*step=*/7, /*examples_done=*/70, /*loss=*/0.25);
  EXPECT_EQ(Lines().back(), "step 7  35.0 ex/s  loss 0.25  elapsed 2s");
}

TEST_F(ProgressTest, Update_SpeedAndLossChange_WindowShowsRecentValues) {
  ProgressOptions options = FakeOptions(/*is_tty=*/false);
  options.total_steps = 10000;
  options.window = absl::Seconds(10);
  options.line_interval = absl::ZeroDuration();
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  int64_t step = 0;
  int64_t examples = 0;
  // 30 s at 10 steps/s of 100 examples, loss 2; then 30 s at 1 step/s of 100 examples, loss 0.5.
  for (int i = 0; i < 300; ++i) {
    Advance(absl::Milliseconds(100));
    reporter->Update(++step, examples += 100, /*loss=*/2.0);
  }
  for (int i = 0; i < 30; ++i) {
    Advance(absl::Seconds(1));
    reporter->Update(++step, examples += 100, /*loss=*/0.5);
  }
  // Whole-run mean would be 550 ex/s and loss ~1.9; the window sees only the slow part.
  // ETA: 10000 - 330 steps at 1 step/s = 9670 s.
  EXPECT_EQ(Lines().back(),
            "step 330/10000 (3.3%)  100.0 ex/s  loss 0.5  elapsed 1m00s  eta 2h41m10s");
}

TEST_F(ProgressTest, Update_ManyUpdatesPerSecond_WindowStaysBounded) {
  ProgressOptions options = FakeOptions(/*is_tty=*/false);
  options.line_interval = absl::ZeroDuration();
  options.window = absl::Seconds(1);
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  // 200k updates, 10 us apart (2 s): the loss mean covers only the last second.
  for (int i = 1; i <= 200000; ++i) {
    Advance(absl::Microseconds(10));
    reporter->Update(i, /*examples_done=*/i, /*loss=*/i <= 100000 ? 4.0 : 1.0);
  }
  EXPECT_THAT(Lines().back(), HasSubstr("  100000.0 ex/s  loss 1  "));
}

TEST_F(ProgressTest, Update_Tty_RewritesOneLineAtMostTenTimesPerSecond) {
  ProgressOptions options = FakeOptions(/*is_tty=*/true);
  options.total_steps = 1000;
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  for (int step = 1; step <= 100; ++step) {  // 1 s of updates every 10 ms
    Advance(absl::Milliseconds(10));
    reporter->Update(step, /*examples_done=*/step, /*loss=*/1.0);
  }
  const std::string text = out_.str();
  EXPECT_THAT(text, Not(HasSubstr("\n")));
  const int rewrites = static_cast<int>(std::count(text.begin(), text.end(), '\r'));
  EXPECT_GE(rewrites, 9);
  EXPECT_LE(rewrites, 11);

  reporter->Finish();
  EXPECT_THAT(out_.str(), EndsWith("done\n"));
}

TEST_F(ProgressTest, Update_TtyShorterLine_PaddedOverOldText) {
  ProgressOptions options = FakeOptions(/*is_tty=*/true);
  options.window = absl::Seconds(1);  // the second line's rate and loss cover only its second
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  Advance(absl::Seconds(1));
  reporter->Update(/*step=*/1, /*examples_done=*/123456789, /*loss=*/123.456);
  Advance(absl::Seconds(1));
  reporter->Update(/*step=*/2, /*examples_done=*/123456790, /*loss=*/0);
  std::vector<std::string> parts = absl::StrSplit(out_.str(), '\r');
  ASSERT_EQ(parts.size(), 3u);  // "", first, second
  const std::string second = "step 2  1.0 ex/s  loss 0  elapsed 2s";
  ASSERT_GT(parts[1].size(), second.size());
  EXPECT_EQ(parts[2], second + std::string(parts[1].size() - second.size(), ' '));
}

TEST_F(ProgressTest, Finish_AfterUpdates_MeanRateOverWholeRunAndDone) {
  ProgressOptions options = FakeOptions(/*is_tty=*/false);
  options.total_steps = 20;
  options.window = absl::Seconds(1);
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  for (int step = 1; step <= 20; ++step) {
    Advance(absl::Seconds(step <= 10 ? 1 : 3));  // 10 s, then 30 s
    reporter->Update(step, /*examples_done=*/step * 100, /*loss=*/1.0);
  }
  reporter->Finish();
  EXPECT_EQ(Lines().back(), "step 20/20 (100.0%)  50.0 ex/s  loss 1  elapsed 40s  done");
  const size_t lines = Lines().size();
  reporter->Finish();
  reporter->Update(/*step=*/21, /*examples_done=*/2100, /*loss=*/1.0);
  EXPECT_EQ(Lines().size(), lines);
}

TEST_F(ProgressTest, Finish_NoUpdates_PrintsNothing) {
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(FakeOptions(/*is_tty=*/true));
  ASSERT_NE(reporter, nullptr);
  reporter->Finish();
  EXPECT_EQ(out_.str(), "");
}

TEST_F(ProgressTest, Destructor_WithoutFinish_PrintsFinalLine) {
  {
    std::unique_ptr<ProgressReporter> reporter = MakeReporter(FakeOptions(/*is_tty=*/true));
    ASSERT_NE(reporter, nullptr);
    Advance(absl::Seconds(1));
    reporter->Update(/*step=*/1, /*examples_done=*/10, /*loss=*/1.0);
  }
  EXPECT_THAT(out_.str(), EndsWith("done\n"));
}

TEST_F(ProgressTest, Update_ResumedRun_RatesCountOnlyThisRun) {
  ProgressOptions options = FakeOptions(/*is_tty=*/false);
  options.total_steps = 2000;
  options.initial_step = 1000;
  options.initial_examples = 100000;
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  Advance(absl::Seconds(10));
  reporter->Update(/*step=*/1100, /*examples_done=*/110000, /*loss=*/1.0);
  EXPECT_EQ(Lines().back(),
            "step 1100/2000 (55.0%)  1000.0 ex/s  loss 1  elapsed 10s  eta 1m30s");
}

TEST_F(ProgressTest, Update_NoTimePassed_RateUnknown) {
  ProgressOptions options = FakeOptions(/*is_tty=*/false);
  options.total_steps = 10;
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);
  ASSERT_NE(reporter, nullptr);
  reporter->Update(/*step=*/1, /*examples_done=*/10, /*loss=*/2.0);
  EXPECT_EQ(Lines().back(), "step 1/10 (10.0%)  ? ex/s  loss 2  elapsed 0s  eta ?");
}

TEST_F(ProgressTest, Update_ConcurrentCallers_LinesStayWhole) {
  ProgressOptions options;
  options.out = &out_;
  options.is_tty = false;
  options.line_interval = absl::ZeroDuration();
  std::unique_ptr<ProgressReporter> reporter = MakeReporter(options);  // real clock
  ASSERT_NE(reporter, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&reporter, t] {
      for (int i = 0; i < 500; ++i) reporter->Update(t * 1000 + i, i, 1.0);
    });
  }
  for (std::thread& thread : threads) thread.join();
  reporter->Finish();
  std::vector<std::string> lines = Lines();
  EXPECT_EQ(lines.size(), 2001u);
  for (const std::string& line : lines) ASSERT_THAT(line, testing::StartsWith("step "));
}

TEST(ProgressFdTest, Update_PipeFd_PlainLinesWrittenToFd) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ProgressOptions options;
  options.fd = fds[1];  // is_tty unset: isatty(pipe) is false
  absl::Time now = absl::FromUnixSeconds(1700000000);
  options.clock = [&now] { return now; };
  {
    absl::StatusOr<std::unique_ptr<ProgressReporter>> reporter = ProgressReporter::Create(options);
    ASSERT_TRUE(reporter.ok()) << reporter.status();
    now += absl::Seconds(1);
    (*reporter)->Update(/*step=*/3, /*examples_done=*/30, /*loss=*/0.5);
  }  // destructor: final line
  ::close(fds[1]);
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  EXPECT_EQ(text,
            "step 3  30.0 ex/s  loss 0.5  elapsed 1s\n"
            "step 3  30.0 ex/s  loss 0.5  elapsed 1s  done\n");
}

TEST(ProgressCreateTest, Create_BadOptions_InvalidArgumentNamingField) {
  struct Case {
    const char* field;
    std::function<void(ProgressOptions&)> set;
  };
  const Case cases[] = {
      {"total_steps", [](ProgressOptions& o) { o.total_steps = -1; }},
      {"initial_step", [](ProgressOptions& o) { o.initial_step = -1; }},
      {"initial_examples", [](ProgressOptions& o) { o.initial_examples = -5; }},
      {"tty_interval", [](ProgressOptions& o) { o.tty_interval = absl::Seconds(-1); }},
      {"line_interval", [](ProgressOptions& o) { o.line_interval = absl::Seconds(-1); }},
      {"window", [](ProgressOptions& o) { o.window = absl::ZeroDuration(); }},
      {"fd", [](ProgressOptions& o) { o.fd = -1; }},
  };
  for (const Case& c : cases) {
    ProgressOptions options;
    c.set(options);
    absl::StatusOr<std::unique_ptr<ProgressReporter>> reporter = ProgressReporter::Create(options);
    EXPECT_EQ(reporter.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(reporter.status().message()),
                HasSubstr(absl::StrCat("ProgressOptions.", c.field)));
  }
}

}  // namespace
}  // namespace pstrain
