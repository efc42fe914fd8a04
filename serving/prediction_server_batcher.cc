#include "serving/prediction_server_batcher.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace pstrain {

// One request waiting for its batch: it lives on the stack of the thread that called Predict,
// which waits on `done`.
struct PredictionBatcher::Pending {
  const RawExamples* examples = nullptr;
  absl::Time arrived;
  absl::StatusOr<BatchedPrediction> result;
  absl::Notification done;
};

namespace {

// For each of `wanted`, where it is in `columns`; false if one is missing or named twice (then
// only the model itself can say what is wrong).
bool MapColumns(const std::vector<std::string>& wanted, const std::vector<std::string>& columns,
                std::vector<size_t>* at) {
  absl::flat_hash_map<absl::string_view, size_t> index;
  index.reserve(wanted.size());
  for (size_t c = 0; c < wanted.size(); ++c) index.emplace(wanted[c], c);
  at->assign(wanted.size(), columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    auto it = index.find(columns[i]);
    if (it == index.end()) continue;
    if ((*at)[it->second] != columns.size()) return false;  // named twice
    (*at)[it->second] = i;
  }
  for (size_t a : *at) {
    if (a == columns.size()) return false;
  }
  return true;
}

}  // namespace

PredictionBatcher::PredictionBatcher(const PredictionBatcherOptions& options, ModelSource source)
    : options_([&] {
        PredictionBatcherOptions o = options;
        o.max_batch_examples = std::max(1, o.max_batch_examples);
        o.max_batch_wait = std::max(absl::ZeroDuration(), o.max_batch_wait);
        o.threads = std::max(1, o.threads);
        return o;
      }()),
      source_(std::move(source)) {
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Loop(); });
}

PredictionBatcher::~PredictionBatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

absl::StatusOr<BatchedPrediction> PredictionBatcher::Predict(const RawExamples& examples) {
  Pending pending;
  pending.examples = &examples;
  pending.arrived = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the prediction server is shutting down");
    queue_.push_back(&pending);
    queued_examples_ += static_cast<int64_t>(examples.rows.size());
  }
  pending.done.WaitForNotification();
  return std::move(pending.result);
}

BatchStats PredictionBatcher::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool PredictionBatcher::CanCollectLocked() const {
  return !collecting_ && (!queue_.empty() || stopping_);
}

bool PredictionBatcher::BatchFullLocked() const {
  return stopping_ || queued_examples_ >= options_.max_batch_examples;
}

void PredictionBatcher::Loop() {
  for (;;) {
    std::vector<Pending*> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &PredictionBatcher::CanCollectLocked));
      if (queue_.empty()) return;  // stopping, and every request answered or taken
      // This thread gathers the next batch; the others wait until it has taken it.
      collecting_ = true;
      mu_.AwaitWithDeadline(absl::Condition(this, &PredictionBatcher::BatchFullLocked),
                            queue_.front()->arrived + options_.max_batch_wait);
      int64_t examples = 0;
      while (!queue_.empty()) {
        Pending* next = queue_.front();
        const int64_t n = static_cast<int64_t>(next->examples->rows.size());
        if (!batch.empty() && examples + n > options_.max_batch_examples) break;
        batch.push_back(next);
        examples += n;
        queued_examples_ -= n;
        queue_.pop_front();
      }
      collecting_ = false;
    }
    Run(std::move(batch));
  }
}

void PredictionBatcher::Run(std::vector<Pending*> batch) {
  std::shared_ptr<const ServableModel> model = source_();
  int64_t calls = 0, merged_calls = 0, alone_requests = 0, largest_examples = 0, examples = 0;
  int64_t largest_requests = 0;
  const size_t k = model == nullptr ? 0 : model->outputs().size();

  // One model call on `rows` rows; the floats, or its error.
  auto call = [&](const RawExamples& input, int requests,
                  std::vector<float>* out) -> absl::Status {
    ++calls;
    if (requests > 1) ++merged_calls;
    largest_requests = std::max<int64_t>(largest_requests, requests);
    largest_examples = std::max<int64_t>(largest_examples, input.rows.size());
    absl::Status s = model->Predict(input, out);
    if (s.ok() && out->size() != input.rows.size() * k) {
      s = absl::InternalError(absl::StrCat("model version ", model->version(), " answered ",
                                           out->size(), " floats for ", input.rows.size(),
                                           " examples of ", k, " outputs"));
    }
    return s;
  };
  auto alone = [&](Pending* p) {
    BatchedPrediction got;
    got.model = model;
    got.batch_requests = 1;
    absl::Status s = call(*p->examples, 1, &got.predictions);
    if (s.ok()) {
      p->result = std::move(got);
    } else {
      p->result = std::move(s);
    }
  };

  for (Pending* p : batch) examples += static_cast<int64_t>(p->examples->rows.size());
  if (model == nullptr) {
    for (Pending* p : batch) p->result = absl::UnavailableError("no model version is loaded");
  } else if (batch.size() == 1) {
    alone(batch[0]);
  } else {
    // Every request whose columns map merges into one call, in the model's column order.
    const std::vector<std::string>& columns = model->columns();
    RawExamples merged;
    merged.columns = columns;
    std::vector<Pending*> in_merge, apart;
    std::vector<size_t> at;
    for (Pending* p : batch) {
      if (!MapColumns(columns, p->examples->columns, &at)) {
        apart.push_back(p);
        ++alone_requests;
        continue;
      }
      for (const std::vector<std::string>& row : p->examples->rows) {
        std::vector<std::string>& fields = merged.rows.emplace_back(columns.size());
        for (size_t c = 0; c < columns.size(); ++c) {
          if (at[c] < row.size()) fields[c] = row[at[c]];
        }
      }
      in_merge.push_back(p);
    }
    if (in_merge.size() == 1) {
      apart.push_back(in_merge[0]);
    } else if (in_merge.size() > 1) {
      std::vector<float> out;
      if (call(merged, static_cast<int>(in_merge.size()), &out).ok()) {
        size_t from = 0;
        for (Pending* p : in_merge) {
          BatchedPrediction got;
          got.model = model;
          got.batch_requests = static_cast<int>(in_merge.size());
          const size_t n = p->examples->rows.size() * k;
          got.predictions.assign(out.begin() + from, out.begin() + from + n);
          from += n;
          p->result = std::move(got);
        }
      } else {
        // Some request's value is bad: each one alone, so only that one fails, with its own
        // row numbers.
        apart.insert(apart.end(), in_merge.begin(), in_merge.end());
        alone_requests += static_cast<int64_t>(in_merge.size());
      }
    }
    for (Pending* p : apart) alone(p);
  }
  // Each answer holds the version until its caller is done with it: an old version is freed
  // when the last of them is.
  model.reset();

  {
    absl::MutexLock lock(&mu_);
    stats_.requests += static_cast<int64_t>(batch.size());
    stats_.examples += examples;
    stats_.batches += calls;
    stats_.merged_batches += merged_calls;
    stats_.alone += alone_requests;
    stats_.largest_batch_requests = std::max(stats_.largest_batch_requests, largest_requests);
    stats_.largest_batch_examples = std::max(stats_.largest_batch_examples, largest_examples);
  }
  for (Pending* p : batch) p->done.Notify();
}

}  // namespace pstrain
