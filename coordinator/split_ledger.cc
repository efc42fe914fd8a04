#include "coordinator/split_ledger.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_parse.h"
#include "nlohmann/json.hpp"

namespace pstrain {

Tensor EncodeDeal(const Deal& deal) {
  // [seq, count, then per split: id, skips, skip...]
  std::vector<int64_t> v{deal.seq, static_cast<int64_t>(deal.splits.size())};
  for (const DealtSplit& s : deal.splits) {
    v.push_back(s.id);
    v.push_back(static_cast<int64_t>(s.skip.size()));
    v.insert(v.end(), s.skip.begin(), s.skip.end());
  }
  return Tensor::FromVector(v);
}

absl::StatusOr<Deal> ParseDeal(const Tensor& t) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("a malformed deal of splits: ", what));
  };
  if (!t.Is<int64_t>()) return bad("not int64");
  const std::vector<int64_t> v = t.ToVector<int64_t>();
  if (v.size() < 2 || v[0] < 0 || v[1] < 0) return bad("no count");
  Deal deal;
  deal.seq = v[0];
  std::vector<DealtSplit>& out = deal.splits;
  size_t at = 2;
  for (int64_t i = 0; i < v[1]; ++i) {
    if (at + 2 > v.size()) return bad("shorter than its count");
    DealtSplit s;
    s.id = v[at];
    const int64_t skips = v[at + 1];
    at += 2;
    if (s.id < 0 || skips < 0 || static_cast<uint64_t>(skips) > v.size() - at) {
      return bad(absl::StrCat("split ", s.id, " with ", skips, " rows to skip"));
    }
    s.skip.assign(v.begin() + static_cast<std::ptrdiff_t>(at),
                  v.begin() + static_cast<std::ptrdiff_t>(at + skips));
    at += static_cast<size_t>(skips);
    out.push_back(std::move(s));
  }
  if (at != v.size()) return bad("longer than its count");
  return deal;
}

absl::StatusOr<std::shared_ptr<SplitLedger>> SplitLedger::Create(SplitLedgerOptions options) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("split ledger: ", what));
  };
  int64_t rows = 0;
  for (size_t i = 0; i < options.split_rows.size(); ++i) {
    const int64_t r = options.split_rows[i];
    if (r < 0 || r >= (int64_t{1} << 32)) {
      return bad(absl::StrCat("split ", i, " has ", r, " rows (0 to 2^32 - 1)"));
    }
    rows += r;
  }
  if (rows == 0 && !options.follow) return bad("the splits hold no training rows");
  if (options.follow && options.epochs != 1) {
    return bad(absl::StrCat("a ledger that follows its data deals it once (epochs ",
                            options.epochs, ", not 1)"));
  }
  if (options.epochs < 1) return bad(absl::StrCat("epochs ", options.epochs, " < 1"));
  if (options.num_workers < 1) return bad(absl::StrCat("num_workers ", options.num_workers, " < 1"));
  if (options.batch_size < 1) return bad(absl::StrCat("batch_size ", options.batch_size, " < 1"));
  if (options.hold_rows < 1) return bad(absl::StrCat("hold_rows ", options.hold_rows, " < 1"));
  if (options.rows_output < 0) return bad("rows_output < 0");
  const int64_t ids = static_cast<int64_t>(options.split_rows.size()) * options.epochs;
  if (ids >= (int64_t{1} << 31)) return bad(absl::StrCat(ids, " splits over all epochs (< 2^31)"));
  return std::shared_ptr<SplitLedger>(new SplitLedger(std::move(options)));
}

SplitLedger::SplitLedger(SplitLedgerOptions options) : options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  split_rows_ = options_.split_rows;
  num_splits_ = static_cast<int64_t>(split_rows_.size());
  if (options_.follow) descriptors_.assign(split_rows_.size(), std::string());
  done_.assign(static_cast<size_t>(num_splits_ * options_.epochs), false);
  held_.assign(options_.num_workers, 0);
  inflight_.assign(options_.num_workers, 0);
  seq_.assign(options_.num_workers, 0);
  counts_.splits = 0;
  for (int64_t r : split_rows_) counts_.splits += r > 0 ? 1 : 0;
  int64_t rows = 0;
  for (int64_t r : split_rows_) rows += r;
  counts_.rows_left = rows * options_.epochs;
}

std::vector<int64_t> SplitLedger::EpochOrder(int epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(num_splits_));
  for (int64_t s = 0; s < num_splits_; ++s) order[s] = epoch * num_splits_ + s;
  if (options_.follow) return order;  // arrival order
  std::mt19937_64 rng(options_.seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(epoch) + 1);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

void SplitLedger::PushEpochLocked() {
  const int epoch = next_epoch_++;
  counts_.epoch = epoch;
  for (int64_t id : EpochOrder(epoch)) {
    if (RowsOfLocked(id) == 0) {
      done_[id] = true;  // nothing to train in it (not counted: Counts::splits leaves it out)
      continue;
    }
    if (!done_[id]) pool_.push_back(id);
  }
}

int64_t SplitLedger::NextLocked() {
  while (true) {
    while (pool_.empty() && next_epoch_ < options_.epochs) PushEpochLocked();
    if (pool_.empty()) {
      counts_.epoch = options_.epochs;
      return -1;
    }
    const int64_t id = pool_.front();
    pool_.pop_front();
    if (!done_[id]) return id;
  }
}

bool SplitLedger::AllDealtLocked() const {
  if (next_epoch_ < options_.epochs) return false;
  for (int64_t id : pool_) {
    if (!done_[id]) return false;
  }
  return true;
}

bool SplitLedger::CanTake(int worker) {
  absl::MutexLock lock(&mu_);
  if (worker < 0 || worker >= options_.num_workers) return true;
  if (!AllDealtLocked()) return true;  // Deal gives it rows
  if (held_[worker] > static_cast<int64_t>(inflight_[worker]) * options_.batch_size) return true;
  // Nothing to deal and its rows are in its closures already: other workers' rows are theirs to
  // train; once none is left anywhere, closures run (and train nothing). Following, more data will
  // come: the closure waits for it.
  return counts_.rows_left == 0 && !options_.follow;
}

std::vector<Tensor> SplitLedger::Deal(int worker) {
  absl::MutexLock lock(&mu_);
  pstrain::Deal deal;  // (the struct, not this method)
  std::vector<DealtSplit>& dealt = deal.splits;
  if (worker >= 0 && worker < options_.num_workers) {
    ++inflight_[worker];
    // Enough for this closure's batch beside those of its closures in flight, and hold_rows ahead.
    const int64_t want = std::max(options_.hold_rows, inflight_[worker] * options_.batch_size);
    while (held_[worker] < want) {
      const int64_t id = NextLocked();
      if (id < 0) break;
      auto [it, fresh] = open_.try_emplace(id);
      Split& s = it->second;
      if (fresh) s.rows = RowsOfLocked(id);
      if (s.dealt_before) ++counts_.splits_reassigned;
      s.dealt_before = true;
      s.worker = worker;
      held_[worker] += s.rows - s.trained;
      DealtSplit d;
      d.id = id;
      for (int64_t r = 0; r < static_cast<int64_t>(s.seen.size()); ++r) {
        if (s.seen[r]) d.skip.push_back(r);
      }
      dealt.push_back(std::move(d));
    }
    if (!dealt.empty()) ++seq_[worker];
    deal.seq = seq_[worker];
  }
  if (!options_.follow) return {EncodeDeal(deal)};
  nlohmann::json descriptors = nlohmann::json::array();
  for (const DealtSplit& d : dealt) descriptors.push_back(descriptors_[d.id]);
  return {EncodeDeal(deal), Tensor::String(descriptors.dump())};
}

void SplitLedger::Completed(int worker, const std::vector<Tensor>& outputs) {
  absl::MutexLock lock(&mu_);
  ++closures_completed_;
  if (worker >= 0 && worker < options_.num_workers && inflight_[worker] > 0) --inflight_[worker];
  if (static_cast<int>(outputs.size()) <= options_.rows_output ||
      !outputs[options_.rows_output].Is<int64_t>()) {
    ++counts_.bad_reports;
    return;
  }
  const std::vector<int64_t> ids = outputs[options_.rows_output].ToVector<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = RowIdSplit(ids[i]), row = RowIdRow(ids[i]);
    if (id < 0 || id >= static_cast<int64_t>(done_.size())) {
      ++counts_.bad_reports;
      continue;
    }
    if (done_[id]) {
      ++counts_.rows_twice;
      continue;
    }
    auto it = open_.find(id);
    if (it == open_.end() || row >= it->second.rows) {
      ++counts_.bad_reports;
      continue;
    }
    Split& s = it->second;
    if (s.seen.empty()) s.seen.assign(static_cast<size_t>(s.rows), false);
    if (s.seen[row]) {
      ++counts_.rows_twice;
      continue;
    }
    s.seen[row] = true;
    ++s.trained;
    ++counts_.rows_trained;
    --counts_.rows_left;
    if (s.worker >= 0) --held_[s.worker];
    if (s.trained == s.rows) {
      done_[id] = true;
      ++counts_.splits_done;
      open_.erase(it);
    }
  }
}

void SplitLedger::Returned(int worker) {
  absl::MutexLock lock(&mu_);
  if (worker >= 0 && worker < options_.num_workers && inflight_[worker] > 0) --inflight_[worker];
}

void SplitLedger::WorkerLost(int worker) {
  absl::MutexLock lock(&mu_);
  if (worker < 0 || worker >= options_.num_workers) return;
  bool held_any = false;
  // Back to the front of the pool, in id order (the next worker to ask takes them first).
  for (auto it = open_.rbegin(); it != open_.rend(); ++it) {
    if (it->second.worker != worker) continue;
    it->second.worker = -1;
    pool_.push_front(it->first);
    held_any = true;
  }
  held_[worker] = 0;
  inflight_[worker] = 0;
  seq_[worker] = 0;  // a worker set up again starts with no deals
  if (held_any) ++counts_.workers_lost;
}

void SplitLedger::AddMetrics(MetricsRegistry::Sink& out) {
  const Counts c = counts();
  out.AddGauge("pstrain_data_splits_done", "Data splits trained whole (every epoch so far).", {},
               static_cast<double>(c.splits_done));
  out.AddGauge("pstrain_data_splits_in_flight", "Data splits dealt to a worker, not yet done.", {},
               static_cast<double>(c.splits_in_flight));
  out.AddCounter("pstrain_data_splits_reassigned_total",
                 "Data splits dealt again after their worker was lost.", {},
                 static_cast<double>(c.splits_reassigned));
  out.AddCounter("pstrain_data_rows_trained_total", "Training rows reported trained (once each).",
                 {}, static_cast<double>(c.rows_trained));
  out.AddCounter("pstrain_data_rows_twice_total",
                 "Reports of a training row already reported (trained again).", {},
                 static_cast<double>(c.rows_twice));
  out.AddGauge("pstrain_data_rows_left", "Training rows of the job not yet trained.", {},
               static_cast<double>(c.rows_left));
}

absl::Status SplitLedger::Append(const std::vector<int64_t>& split_rows,
                                 const std::vector<std::string>& descriptors) {
  if (!options_.follow) {
    return absl::FailedPreconditionError("split ledger: splits arrive only when following");
  }
  if (split_rows.size() != descriptors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("split ledger: ", split_rows.size(),
                                                   " splits but ", descriptors.size(),
                                                   " descriptors"));
  }
  for (size_t i = 0; i < split_rows.size(); ++i) {
    if (split_rows[i] < 0 || split_rows[i] >= (int64_t{1} << 32)) {
      return absl::InvalidArgumentError(absl::StrCat("split ledger: an arriving split has ",
                                                     split_rows[i], " rows (0 to 2^32 - 1)"));
    }
  }
  absl::MutexLock lock(&mu_);
  if (num_splits_ + static_cast<int64_t>(split_rows.size()) >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError("split ledger: 2^31 splits followed");
  }
  for (size_t i = 0; i < split_rows.size(); ++i) {
    const int64_t id = num_splits_++;
    const int64_t rows = split_rows[i];
    split_rows_.push_back(rows);
    descriptors_.push_back(descriptors[i]);
    done_.push_back(rows == 0);  // nothing to train in it (not counted)
    counts_.splits += rows > 0 ? 1 : 0;
    counts_.rows_left += rows;
    // Dealt after those before it (once dealing began; else with the first deal).
    if (rows > 0 && next_epoch_ > 0) pool_.push_back(id);
  }
  return absl::OkStatus();
}

int64_t SplitLedger::num_splits() const {
  absl::MutexLock lock(&mu_);
  return num_splits_;
}

int64_t SplitLedger::ClosuresCompleted() const {
  absl::MutexLock lock(&mu_);
  return closures_completed_;
}

SplitLedger::Counts SplitLedger::counts() const {
  absl::MutexLock lock(&mu_);
  Counts c = counts_;
  for (const auto& [id, s] : open_) c.splits_in_flight += s.worker >= 0 ? 1 : 0;
  return c;
}

int64_t SplitLedger::PendingSteps() const {
  absl::MutexLock lock(&mu_);
  if (counts_.rows_left == 0) return 0;
  const int64_t b = options_.batch_size;
  int64_t steps = 0, held = 0;
  for (int64_t h : held_) {
    steps += (std::max<int64_t>(0, h) + b - 1) / b;
    held += std::max<int64_t>(0, h);
  }
  const int64_t undealt = std::max<int64_t>(0, counts_.rows_left - held);
  steps += (undealt + b - 1) / b;
  return std::max<int64_t>(1, steps);
}

std::string SplitLedger::State() const {
  absl::MutexLock lock(&mu_);
  nlohmann::json j;
  j["splits"] = num_splits_;
  j["epochs"] = options_.epochs;
  j["next_epoch"] = next_epoch_;
  // Done splits as hex, 4 per digit.
  std::string done;
  for (size_t i = 0; i < done_.size(); i += 4) {
    int nibble = 0;
    for (size_t k = 0; k < 4 && i + k < done_.size(); ++k) nibble |= done_[i + k] ? 1 << k : 0;
    done.push_back("0123456789abcdef"[nibble]);
  }
  j["done"] = done;
  nlohmann::json partial = nlohmann::json::array();
  for (const auto& [id, s] : open_) {
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < static_cast<int64_t>(s.seen.size()); ++r) {
      if (s.seen[r]) rows.push_back(r);
    }
    if (!rows.empty()) partial.push_back({{"id", id}, {"trained", rows}});
  }
  j["partial"] = partial;
  j["reassigned"] = counts_.splits_reassigned;
  j["rows_twice"] = counts_.rows_twice;
  j["workers_lost"] = counts_.workers_lost;
  return j.dump();
}

absl::Status SplitLedger::StartAtEpoch(int epochs) {
  absl::MutexLock lock(&mu_);
  if (epochs < 0 || epochs > options_.epochs) {
    return absl::InvalidArgumentError(
        absl::StrCat("split ledger: epoch ", epochs, " outside [0, ", options_.epochs, "]"));
  }
  if (next_epoch_ > 0 || !open_.empty() || counts_.rows_trained > 0) {
    return absl::FailedPreconditionError("split ledger: already dealing");
  }
  int64_t epoch_rows = 0;
  for (int64_t r : split_rows_) epoch_rows += r;
  for (int64_t id = 0; id < epochs * num_splits_; ++id) done_[id] = true;
  next_epoch_ = epochs;
  counts_.epoch = epochs;
  counts_.splits_done = epochs * counts_.splits;
  counts_.rows_trained = epochs * epoch_rows;
  counts_.rows_left = (options_.epochs - epochs) * epoch_rows;
  return absl::OkStatus();
}

absl::Status SplitLedger::Restore(const std::string& state) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("split ledger state: ", what));
  };
  absl::StatusOr<nlohmann::json> parsed = ParseJson(state);
  if (!parsed.ok()) return bad(std::string(parsed.status().message()));
  absl::MutexLock lock(&mu_);
  const nlohmann::json& j = *parsed;
  if (!j.is_object() || !j.value("splits", nlohmann::json()).is_number_integer() ||
      !j.value("epochs", nlohmann::json()).is_number_integer() ||
      !j.value("next_epoch", nlohmann::json()).is_number_integer() ||
      !j.value("done", nlohmann::json()).is_string() ||
      !j.value("partial", nlohmann::json()).is_array()) {
    return bad("malformed");
  }
  if (j["splits"].get<int64_t>() != num_splits_) {
    return bad(absl::StrCat("of ", j["splits"].get<int64_t>(), " splits, this job has ",
                            num_splits_, " (the data changed)"));
  }
  // Another count of epochs: more continue the job (a 1-epoch job's checkpoint resumed with
  // --epochs=2 trains the second); fewer, as long as the saved job began no epoch past them.
  const int saved_epochs = j["epochs"].get<int>();
  const int next_epoch = j["next_epoch"].get<int>();
  const std::string done = j["done"].get<std::string>();
  const size_t saved_ids = static_cast<size_t>(num_splits_) * std::max(0, saved_epochs);
  if (saved_epochs < 1 || next_epoch < 0 || next_epoch > saved_epochs ||
      done.size() != (saved_ids + 3) / 4) {
    return bad("malformed");
  }
  if (next_epoch > options_.epochs) {
    return bad(absl::StrCat("the checkpoint's job began epoch ", next_epoch, " of ", saved_epochs,
                            ", past this job's ", options_.epochs));
  }
  const size_t ids = static_cast<size_t>(num_splits_ * options_.epochs);
  std::vector<bool> done_bits(std::max(ids, saved_ids), false);
  for (size_t i = 0; i < done.size(); ++i) {
    const char c = done[i];
    const int nibble = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (nibble < 0) return bad("malformed");
    for (size_t k = 0; k < 4 && 4 * i + k < done_bits.size(); ++k) {
      done_bits[4 * i + k] = (nibble >> k) & 1;
    }
  }
  std::map<int64_t, Split> open;
  for (const nlohmann::json& p : j["partial"]) {
    if (!p.is_object() || !p.value("id", nlohmann::json()).is_number_integer() ||
        !p.value("trained", nlohmann::json()).is_array()) {
      return bad("malformed");
    }
    const int64_t id = p["id"].get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(ids) || done_bits[id]) {
      return bad(absl::StrCat("partial split ", id));
    }
    Split s;
    s.rows = RowsOfLocked(id);
    s.dealt_before = true;
    s.seen.assign(static_cast<size_t>(s.rows), false);
    for (const nlohmann::json& r : p["trained"]) {
      if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= s.rows ||
          s.seen[r.get<int64_t>()]) {
        return bad(absl::StrCat("partial split ", id, ": a bad row"));
      }
      s.seen[r.get<int64_t>()] = true;
      ++s.trained;
    }
    open.emplace(id, std::move(s));
  }
  done_bits.resize(ids);  // epochs past this job's (none begun) are left out
  done_ = std::move(done_bits);
  open_ = std::move(open);
  pool_.clear();
  std::fill(held_.begin(), held_.end(), 0);
  std::fill(inflight_.begin(), inflight_.end(), 0);
  std::fill(seq_.begin(), seq_.end(), 0);
  // The epochs begun: their splits not done, the partly trained first.
  for (const auto& [id, s] : open_) pool_.push_back(id);
  for (int e = 0; e < next_epoch; ++e) {
    for (int64_t id : EpochOrder(e)) {
      if (!done_[id] && open_.count(id) == 0) pool_.push_back(id);
    }
  }
  next_epoch_ = next_epoch;
  Counts c;
  c.splits = counts_.splits;
  c.epoch = std::max(0, next_epoch - 1);
  c.splits_reassigned = j.value("reassigned", int64_t{0});
  c.rows_twice = j.value("rows_twice", int64_t{0});
  c.workers_lost = j.value("workers_lost", int64_t{0});
  int64_t rows_left = 0;
  for (int64_t id = 0; id < static_cast<int64_t>(done_.size()); ++id) {
    if (done_[id]) {
      c.splits_done += RowsOfLocked(id) > 0 ? 1 : 0;
      c.rows_trained += RowsOfLocked(id);
    } else {
      rows_left += RowsOfLocked(id);
    }
  }
  for (const auto& [id, s] : open_) {
    rows_left -= s.trained;
    c.rows_trained += s.trained;
  }
  c.rows_left = rows_left;
  counts_ = c;
  return absl::OkStatus();
}

}  // namespace pstrain
