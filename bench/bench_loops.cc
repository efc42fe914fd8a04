#include "bench/bench_loops.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "absl/time/clock.h"

namespace pstrain {

double Round(double x, int digits) {
  double scale = 1;
  for (int i = 0; i < digits; ++i) scale *= 10;
  return std::round(x * scale) / scale;
}

void Emit(const nlohmann::json& line) { std::cout << line.dump() << std::endl; }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void Die(const absl::Status& status, absl::string_view what) {
  std::cerr << "bench: " << what << ": " << status << std::endl;
  std::exit(1);
}

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

RunResult RunSerial(const Timing& timing, const std::function<absl::Status()>& call) {
  RunResult r;
  const absl::Time warm_end = absl::Now() + timing.warmup;
  while (absl::Now() < warm_end) {
    r.status = call();
    if (!r.status.ok()) return r;
  }
  const double cpu0 = ProcessCpuSeconds();
  const absl::Time start = absl::Now();
  const absl::Time end = start + timing.duration;
  absl::Time now;
  do {
    r.status = call();
    if (!r.status.ok()) return r;
    ++r.calls;
    now = absl::Now();
  } while (now < end);
  r.seconds = absl::ToDoubleSeconds(now - start);
  r.cpu_cores = (ProcessCpuSeconds() - cpu0) / r.seconds;
  return r;
}

RunResult InFlightLoop::Run(const Timing& timing, int slots, Issue issue) {
  InFlightLoop loop(slots, std::move(issue));
  for (int s = 0; s < slots; ++s) loop.Start(s);
  RunResult r;
  // A timed window over calls that run by themselves: nothing to wait for but the clock.
  absl::SleepFor(timing.warmup);
  const int64_t calls0 = loop.completed_.load();
  const double cpu0 = ProcessCpuSeconds();
  const absl::Time t0 = absl::Now();
  absl::SleepFor(timing.duration);
  const int64_t calls1 = loop.completed_.load();
  const absl::Time t1 = absl::Now();
  const double cpu1 = ProcessCpuSeconds();
  loop.stop_.store(true);
  if (!loop.drained_.WaitForNotificationWithTimeout(absl::Seconds(120))) {
    r.status = absl::DeadlineExceededError("calls in flight did not finish within 120 s");
    std::cerr << "bench: " << r.status << std::endl;
    std::exit(1);  // the loop's callbacks still reference it: can't return
  }
  r.calls = calls1 - calls0;
  r.seconds = absl::ToDoubleSeconds(t1 - t0);
  r.cpu_cores = (cpu1 - cpu0) / r.seconds;
  absl::MutexLock lock(&loop.mu_);
  r.status = loop.error_;
  return r;
}

void InFlightLoop::Start(int slot) {
  issue_(slot, [this, slot](absl::Status status) { OnDone(slot, std::move(status)); });
}

void InFlightLoop::OnDone(int slot, absl::Status status) {
  if (status.ok()) {
    completed_.fetch_add(1);
  } else {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = std::move(status);
    stop_.store(true);
  }
  if (stop_.load()) {
    if (active_.fetch_sub(1) == 1) drained_.Notify();
    return;
  }
  Start(slot);
}

}  // namespace pstrain
