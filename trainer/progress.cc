#include "trainer/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <deque>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {
namespace {

// "12s", "5m07s", "1h02m03s".
std::string HumanDuration(absl::Duration d) {
  const int64_t s = std::max<int64_t>(0, absl::ToInt64Seconds(d));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm%02ds", s / 3600, (s / 60) % 60, s % 60);
}

// Where the run stood at one time.
struct Point {
  absl::Time time;
  int64_t step = 0;
  int64_t examples = 0;
};

// Updates close together in time folded into one: the window holds at most ~20 of these, however
// fast Update is called.
struct Sample {
  absl::Time first;  // time of the first update folded in
  Point last;        // the last update folded in
  double loss_sum = 0;
  int64_t loss_count = 0;
};

constexpr int kSamplesPerWindow = 20;

class ProgressReporterImpl : public ProgressReporter {
 public:
  explicit ProgressReporterImpl(ProgressOptions options)
      : options_(std::move(options)),
        is_tty_(*options_.is_tty),
        start_(options_.clock()),
        base_{start_, options_.initial_step, options_.initial_examples} {}

  ~ProgressReporterImpl() override { Finish(); }

  void Update(int64_t step, int64_t examples_done, double loss) override {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    const absl::Time now = options_.clock();
    const Point point{now, step, examples_done};
    if (!samples_.empty() && now - samples_.back().first < options_.window / kSamplesPerWindow) {
      Sample& sample = samples_.back();
      sample.last = point;
      sample.loss_sum += loss;
      ++sample.loss_count;
    } else {
      samples_.push_back(Sample{now, point, loss, 1});
    }
    // Keep the samples inside the window; the newest one dropped is where the rates start.
    while (samples_.size() > 1 && samples_.front().last.time <= now - options_.window) {
      base_ = samples_.front().last;
      samples_.pop_front();
    }
    const absl::Duration interval = is_tty_ ? options_.tty_interval : options_.line_interval;
    if (printed_ && now - last_print_ < interval) return;
    printed_ = true;
    last_print_ = now;
    EmitLocked(LineLocked(point, base_, /*final=*/false), /*final=*/false);
  }

  void Finish() override {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    if (samples_.empty()) return;  // nothing was reported
    Point now = samples_.back().last;
    now.time = options_.clock();
    const Point start{start_, options_.initial_step, options_.initial_examples};
    EmitLocked(LineLocked(now, start, /*final=*/true), /*final=*/true);
  }

  void Message(const std::string& line) override {
    absl::MutexLock lock(&mu_);
    if (is_tty_) {
      // Over the progress line, padded to hide it; the next Update starts a new one below.
      std::string text = line;
      if (text.size() < last_line_size_) text.append(last_line_size_ - text.size(), ' ');
      last_line_size_ = 0;
      EmitLocked(text, /*final=*/true);
      last_line_size_ = 0;
      printed_ = false;  // draw the progress line again at the next Update
      return;
    }
    EmitLocked(line, /*final=*/false);
  }

 private:
  // The line for the run at `now`, with rates measured from `from`.
  std::string LineLocked(const Point& now, const Point& from, bool final)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string line = absl::StrCat("step ", now.step);
    if (options_.total_steps > 0) {
      absl::StrAppendFormat(&line, "/%d (%.1f%%)", options_.total_steps,
                            100.0 * now.step / options_.total_steps);
    }
    const double seconds = absl::ToDoubleSeconds(now.time - from.time);
    const double examples_per_s =
        seconds > 0 ? options_.examples_scale * (now.examples - from.examples) / seconds : NAN;
    const double steps_per_s = seconds > 0 ? (now.step - from.step) / seconds : NAN;
    if (std::isfinite(examples_per_s)) {
      absl::StrAppendFormat(&line, "  %.1f ex/s", examples_per_s);
    } else {
      absl::StrAppend(&line, "  ? ex/s");
    }
    double loss_sum = 0;
    int64_t loss_count = 0;
    for (const Sample& sample : samples_) {
      loss_sum += sample.loss_sum;
      loss_count += sample.loss_count;
    }
    absl::StrAppendFormat(&line, "  loss %.4g", loss_sum / loss_count);
    absl::StrAppend(&line, "  elapsed ", HumanDuration(now.time - start_));
    if (options_.note) {
      const std::string note = options_.note();
      if (!note.empty()) absl::StrAppend(&line, "  ", note);
    }
    if (final) {
      absl::StrAppend(&line, "  done");
    } else if (options_.total_steps > 0) {
      const int64_t remaining = std::max<int64_t>(0, options_.total_steps - now.step);
      if (remaining == 0) {
        absl::StrAppend(&line, "  eta 0s");
      } else if (std::isfinite(steps_per_s) && steps_per_s > 0) {
        const double eta_s = remaining / steps_per_s;
        // Beyond ~100 years the figure means nothing (and absl::Seconds would saturate anyway).
        absl::StrAppend(&line, "  eta ",
                        eta_s < 3e9 ? HumanDuration(absl::Seconds(eta_s)) : std::string("?"));
      } else {
        absl::StrAppend(&line, "  eta ?");
      }
    }
    return line;
  }

  // On a terminal: return to the line's start, write over the last line (padding with spaces if
  // it was longer) and, for the final line, end it. Elsewhere: one line.
  void EmitLocked(const std::string& line, bool final) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string text;
    if (is_tty_) {
      text = absl::StrCat("\r", line);
      if (line.size() < last_line_size_) text.append(last_line_size_ - line.size(), ' ');
      last_line_size_ = line.size();
      if (final) text.push_back('\n');
    } else {
      text = absl::StrCat(line, "\n");
    }
    if (options_.out != nullptr) {
      *options_.out << text << std::flush;
      return;
    }
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(options_.fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      // Progress is best effort: a failed write (closed stderr, full disk) drops the line.
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

  const ProgressOptions options_;
  const bool is_tty_;
  const absl::Time start_;

  absl::Mutex mu_;
  // Below: guarded by mu_.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool printed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_print_ ABSL_GUARDED_BY(mu_);
  size_t last_line_size_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Sample> samples_ ABSL_GUARDED_BY(mu_);  // the window, oldest first
  Point base_ ABSL_GUARDED_BY(mu_);                  // where the window's rates start
};

}  // namespace

absl::StatusOr<std::unique_ptr<ProgressReporter>> ProgressReporter::Create(
    ProgressOptions options) {
  auto invalid = [](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("ProgressOptions.", field, " ", why));
  };
  if (options.total_steps < 0) return invalid("total_steps", "is negative");
  if (options.initial_step < 0) return invalid("initial_step", "is negative");
  if (options.initial_examples < 0) return invalid("initial_examples", "is negative");
  if (!(options.examples_scale > 0)) return invalid("examples_scale", "is not positive");
  if (options.tty_interval < absl::ZeroDuration()) return invalid("tty_interval", "is negative");
  if (options.line_interval < absl::ZeroDuration()) return invalid("line_interval", "is negative");
  if (options.window <= absl::ZeroDuration()) return invalid("window", "is not positive");
  if (options.out == nullptr && options.fd < 0) {
    return invalid("fd", "is negative and no `out` stream is set");
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  if (!options.is_tty.has_value()) {
    options.is_tty = options.out == nullptr && ::isatty(options.fd) == 1;
  }
  return std::unique_ptr<ProgressReporter>(new ProgressReporterImpl(std::move(options)));
}

}  // namespace pstrain
