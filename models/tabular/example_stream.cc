#include "models/tabular/example_stream.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "partitioners/key_routing.h"

namespace pstrain {
namespace tabular {
namespace {

constexpr uint64_t kRowSalt = 0x20a5a17000000003ull;  // the unknown_fraction draws

// Copies one example (its keys, dense inputs and label) into `dst`. (A spec may have no sparse or
// no dense features: then there is nothing, not even a pointer, to copy.)
void CopyExample(const ExampleLayout& layout, const int64_t* keys, const float* dense, float label,
                 ExampleRef dst) {
  const size_t slot_bytes = sizeof(int64_t) * layout.num_slots;
  const size_t dense_bytes = sizeof(float) * layout.num_dense;
  if (slot_bytes > 0) std::memcpy(dst.keys, keys, slot_bytes);
  if (dense_bytes > 0) std::memcpy(dst.dense, dense, dense_bytes);
  *dst.label = label;
}

}  // namespace

void Batch::Resize(int64_t rows, const ExampleLayout& layout) {
  n = rows;
  keys.resize(rows * layout.num_slots);
  dense.resize(rows * layout.num_dense);
  labels.resize(rows);
  if (!ids.empty()) ids.resize(rows);
}

ExampleRef Batch::At(int64_t i, const ExampleLayout& layout) {
  return ExampleRef{keys.data() + i * layout.num_slots, dense.data() + i * layout.num_dense,
                    labels.data() + i};
}

DataContext::DataContext(const Spec& spec, const DataPlan& plan, Options options)
    : spec_(spec), plan_(plan), options_(options), transformer_(spec, plan.stats, options.seed) {
  for (const FileInfo& f : plan.files) validation_files_ |= f.role == FileRole::kValidation;
}

absl::StatusOr<ColumnMap> DataContext::Columns(int file) {
  {
    absl::MutexLock lock(&mu_);
    auto it = columns_.find(file);
    if (it != columns_.end()) return it->second;
  }
  const FileInfo* info = File(file);
  if (info == nullptr) return absl::InvalidArgumentError(absl::StrCat("no data file ", file));
  const std::string& path = info->path;
  ASSIGN_OR_RETURN(std::vector<std::string> header,
                   data::ReadCsvHeaderRecord(path, spec_.delimiter));
  ASSIGN_OR_RETURN(ColumnMap columns, transformer_.MapColumns(header, path));
  absl::MutexLock lock(&mu_);
  columns_[file] = columns;
  return columns;
}

const FileInfo* DataContext::File(int file) {
  if (file >= 0 && file < static_cast<int>(plan_.files.size())) return &plan_.files[file];
  absl::MutexLock lock(&mu_);
  auto it = arrived_.find(file);
  return it == arrived_.end() ? nullptr : it->second.get();
}

absl::Status DataContext::AddFile(int file, FileInfo info) {
  if (file >= 0 && file < static_cast<int>(plan_.files.size())) {
    if (plan_.files[file].path == info.path) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("data file ", file, " is ",
                                                   plan_.files[file].path, ", not ", info.path));
  }
  if (file < 0) return absl::InvalidArgumentError(absl::StrCat("data file ", file, " < 0"));
  absl::MutexLock lock(&mu_);
  auto [it, fresh] = arrived_.try_emplace(file);
  if (fresh) {
    it->second = std::make_unique<FileInfo>(std::move(info));
  } else if (it->second->path != info.path) {
    return absl::InvalidArgumentError(absl::StrCat("data file ", file, " is ", it->second->path,
                                                   ", not ", info.path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RangeReader>> RangeReader::Open(DataContext* context,
                                                               const Range& range, Split split) {
  std::unique_ptr<RangeReader> r(new RangeReader(context, range, split));
  ASSIGN_OR_RETURN(r->columns_, context->Columns(range.file));
  r->file_ = context->File(range.file);  // known: Columns found it
  data::CsvRecordOptions o;
  o.delimiter = context->spec().delimiter;
  o.begin = range.begin;
  o.end = range.end;
  o.first_line = range.first_line;
  ASSIGN_OR_RETURN(r->reader_,
                   data::CsvRecordReader::Open(r->file_->path, o));
  return r;
}

absl::StatusOr<bool> RangeReader::Next(ExampleRef out) {
  const FileInfo& file = *file_;
  const DataContext::Options& o = context_->options();
  while (true) {
    ASSIGN_OR_RETURN(bool any, reader_->Next());
    if (!any) return false;
    const std::vector<absl::string_view>& fields = reader_->fields();
    // The split first (as the scan decides it, also for a malformed row), so that each bad row is
    // met, and counted, by the readers of one split only.
    const int64_t line = reader_->line();
    const Split split = SplitOf(context_->spec(), context_->transformer(), file, fields, columns_,
                                line, o.validation_fraction, context_->validation_files(), o.seed);
    if (split != split_) continue;
    absl::Status row;
    if (fields.size() != columns_.num_fields) {
      row = absl::InvalidArgumentError(
          absl::StrCat(fields.size(), " fields, the header has ", columns_.num_fields));
    } else {
      row = context_->transformer().Transform(fields, columns_, split == Split::kTrain,
                                              RowHash(o.seed, kRowSalt, file.index, line), out);
      if (row.ok()) return true;
    }
    if (!o.skip_bad_rows) {
      return absl::InvalidArgumentError(absl::StrCat(reader_->Where(), ": ", row.message()));
    }
    context_->CountBadRow();
  }
}

TrainStream::TrainStream(DataContext* context, std::vector<Range> share, Options options)
    : context_(context),
      share_(std::move(share)),
      options_(options),
      layout_(context->transformer().layout()) {
  capacity_ = std::max<int64_t>(1, options_.shuffle_buffer);
  int64_t share_rows = 0;
  for (const Range& r : share_) share_rows += r.train_rows;
  if (share_rows <= capacity_) {
    cached_ = true;
    capacity_ = std::max<int64_t>(1, share_rows);
  }
}

int64_t TrainStream::BufferBytes() const {
  return capacity_ * (8 * layout_.num_slots + 4 * layout_.num_dense + 4);
}

int64_t TrainStream::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

ExampleRef TrainStream::Slot(int64_t slot) {
  return ExampleRef{keys_.data() + slot * layout_.num_slots,
                    dense_.data() + slot * layout_.num_dense, labels_.data() + slot};
}

void TrainStream::StartEpoch() {
  rng_.seed(MixKey(static_cast<int64_t>(context_->options().seed)) ^
            MixKey(options_.worker * 7919 + 1) ^ MixKey(epoch_ + 104729));
  order_.resize(share_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
  std::shuffle(order_.begin(), order_.end(), rng_);
  next_range_ = 0;
  open_.clear();
  turn_ = 0;
  input_done_ = false;
  read_this_epoch_ = 0;
}

absl::StatusOr<bool> TrainStream::ReadInto(int64_t slot) {
  const size_t cycle = static_cast<size_t>(std::max(1, options_.interleave));
  while (true) {
    while (open_.size() < cycle && next_range_ < order_.size()) {
      ASSIGN_OR_RETURN(std::unique_ptr<RangeReader> r,
                       RangeReader::Open(context_, share_[order_[next_range_++]], Split::kTrain));
      open_.push_back(std::move(r));
    }
    if (open_.empty()) return false;
    const size_t at = turn_ % open_.size();
    ASSIGN_OR_RETURN(bool got, open_[at]->Next(Slot(slot)));
    if (got) {
      ++turn_;
      ++read_this_epoch_;
      return true;
    }
    open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(at));
  }
}

void TrainStream::CopySlot(int64_t from, ExampleRef dst) {
  const ExampleRef src = Slot(from);
  CopyExample(layout_, src.keys, src.dense, *src.label, dst);
}

absl::Status TrainStream::Next(int64_t step, int64_t n, Batch* out) {
  absl::MutexLock lock(&mu_);
  if (!started_) {
    started_ = true;
    epoch_ = std::max<int64_t>(0, step) / std::max<int64_t>(1, options_.steps_per_epoch);
    keys_.resize(capacity_ * layout_.num_slots);
    dense_.resize(capacity_ * layout_.num_dense);
    labels_.resize(capacity_);
    StartEpoch();
  }
  out->Resize(n, layout_);
  if (cached_) {
    if (!loaded_) {
      // The first pass: the whole share into the buffer.
      while (size_ < capacity_) {
        ASSIGN_OR_RETURN(bool got, ReadInto(size_));
        if (!got) break;
        ++size_;
      }
      if (size_ == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "worker ", options_.worker, ": its share of the data has no training rows"));
      }
      open_.clear();
      loaded_ = true;
      permutation_.resize(size_);
      for (int64_t i = 0; i < size_; ++i) permutation_[i] = i;
      std::shuffle(permutation_.begin(), permutation_.end(), rng_);
      cursor_ = 0;
    }
    for (int64_t i = 0; i < n; ++i) {
      if (cursor_ == size_) {
        ++epoch_;
        rng_.seed(MixKey(static_cast<int64_t>(context_->options().seed)) ^
                  MixKey(options_.worker * 7919 + 1) ^ MixKey(epoch_ + 104729));
        std::shuffle(permutation_.begin(), permutation_.end(), rng_);
        cursor_ = 0;
      }
      CopySlot(permutation_[cursor_++], out->At(i, layout_));
    }
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < n;) {
    while (size_ < capacity_ && !input_done_) {
      ASSIGN_OR_RETURN(bool got, ReadInto(size_));
      if (got) {
        ++size_;
      } else {
        input_done_ = true;
      }
    }
    if (size_ == 0) {
      // The epoch's rows are all out: the next pass.
      if (read_this_epoch_ == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "worker ", options_.worker, ": its share of the data has no training rows"));
      }
      ++epoch_;
      StartEpoch();
      continue;
    }
    const int64_t j = static_cast<int64_t>(rng_() % static_cast<uint64_t>(size_));
    CopySlot(j, out->At(i, layout_));
    const int64_t last = size_ - 1;
    if (j != last) CopySlot(last, Slot(j));
    --size_;
    ++i;
  }
  return absl::OkStatus();
}

DealtStream::DealtStream(DataContext* context, std::vector<Range> splits, Options options)
    : context_(context),
      splits_(std::move(splits)),
      options_(options),
      layout_(context->transformer().layout()) {
  absl::MutexLock lock(&mu_);
  rng_.seed(MixKey(static_cast<int64_t>(context_->options().seed)) ^
            MixKey(options_.worker * 7919 + 3));
}

ExampleRef DealtStream::SlotLocked(int64_t slot) {
  return ExampleRef{keys_.data() + slot * layout_.num_slots,
                    dense_.data() + slot * layout_.num_dense, labels_.data() + slot};
}

void DealtStream::GrowLocked(int64_t size) {
  if (static_cast<int64_t>(labels_.size()) >= size) return;
  keys_.resize(size * layout_.num_slots);
  dense_.resize(size * layout_.num_dense);
  labels_.resize(size);
  ids_.resize(size);
}

absl::Status DealtStream::AddSplits(const Deal& deal) {
  absl::MutexLock lock(&mu_);
  for (const DealtSplit& d : deal.splits) {
    if ((splits_.empty() && followed_.count(d.id) == 0) || d.id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("dealt split ", d.id, " is out of range"));
    }
  }
  for (const DealtSplit& d : deal.splits) dealt_.push_back(d);
  if (!deal.splits.empty() && deal.seq > arrived_) {
    deals_.insert(deal.seq);
    while (!deals_.empty() && *deals_.begin() == arrived_ + 1) {
      deals_.erase(deals_.begin());
      ++arrived_;
    }
  }
  return absl::OkStatus();
}

absl::Status DealtStream::AddSplits(const Deal& deal, const std::vector<Range>& ranges) {
  if (ranges.size() != deal.splits.size()) {
    return absl::InvalidArgumentError(absl::StrCat(deal.splits.size(), " dealt splits but ",
                                                   ranges.size(), " ranges"));
  }
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < ranges.size(); ++i) followed_[deal.splits[i].id] = ranges[i];
  }
  return AddSplits(deal);
}

absl::StatusOr<bool> DealtStream::ReadOneLocked() {
  const size_t cycle = static_cast<size_t>(std::max(1, options_.interleave));
  while (true) {
    while (open_.size() < cycle && !dealt_.empty()) {
      OpenSplit o;
      o.id = dealt_.front().id;
      o.skip = std::move(dealt_.front().skip);
      dealt_.pop_front();
      Range range;
      if (auto it = followed_.find(o.id); it != followed_.end()) {
        range = it->second;
        followed_.erase(it);
      } else if (!splits_.empty()) {
        range = splits_[static_cast<size_t>(o.id) % splits_.size()];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("dealt split ", o.id, " has no range"));
      }
      ASSIGN_OR_RETURN(o.reader, RangeReader::Open(context_, range, Split::kTrain));
      open_.push_back(std::move(o));
    }
    if (open_.empty()) return false;
    const size_t at = turn_ % open_.size();
    OpenSplit& o = open_[at];
    GrowLocked(size_ + 1);
    ASSIGN_OR_RETURN(bool got, o.reader->Next(SlotLocked(size_)));
    if (!got) {
      open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(at));
      continue;
    }
    const int64_t row = o.row++;
    if (o.next_skip < o.skip.size() && o.skip[o.next_skip] == row) {
      ++o.next_skip;  // trained already (by a closure that completed elsewhere)
      continue;
    }
    ids_[size_] = RowId(o.id, row);
    ++size_;
    ++turn_;
    return true;
  }
}

absl::Status DealtStream::Next(int64_t n, int64_t seq, Batch* out, absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  if (arrived_ < seq) {
    // Closures run in any order. The ledger deals each closure enough rows beside those dealt to
    // the closures before it, so a closure draws only once every deal up to its own arrived: one
    // that ran ahead would draw rows counted for a closure before it, and that one's batch would
    // come short.
    auto arrived = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return arrived_ >= seq; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&arrived), absl::Now() + wait)) {
      // Not come (its closure failed before it ran): draw what there is, and let later closures
      // not wait for it again.
      LOG(WARNING) << "worker " << options_.worker << ": the rows dealt with closure "
                   << arrived_ + 1 << " did not arrive in " << absl::FormatDuration(wait)
                   << "; drawing without them";
      if (!deals_.empty()) arrived_ = std::max(arrived_, *deals_.rbegin());
      arrived_ = std::max(arrived_, seq);
      deals_.clear();
    }
  }
  const int64_t capacity = std::max<int64_t>(1, options_.shuffle_buffer);
  out->ids.assign(static_cast<size_t>(n), 0);
  out->Resize(n, layout_);
  int64_t i = 0;
  while (i < n) {
    while (size_ < capacity) {
      ASSIGN_OR_RETURN(bool got, ReadOneLocked());
      if (!got) break;
    }
    if (size_ == 0) break;  // no more dealt rows here
    const int64_t j = static_cast<int64_t>(rng_() % static_cast<uint64_t>(size_));
    const ExampleRef drawn = SlotLocked(j);
    CopyExample(layout_, drawn.keys, drawn.dense, *drawn.label, out->At(i, layout_));
    out->ids[i] = ids_[j];
    const int64_t last = size_ - 1;
    if (j != last) {
      const ExampleRef l = SlotLocked(last);
      CopyExample(layout_, l.keys, l.dense, *l.label, drawn);
      ids_[j] = ids_[last];
    }
    --size_;
    ++i;
  }
  out->Resize(i, layout_);
  return absl::OkStatus();
}

void DealtStream::PutBack(const Batch& batch) {
  if (batch.ids.size() != static_cast<size_t>(batch.n)) return;
  absl::MutexLock lock(&mu_);
  GrowLocked(size_ + batch.n);
  for (int64_t i = 0; i < batch.n; ++i) {
    CopyExample(layout_, batch.keys.data() + i * layout_.num_slots,
                batch.dense.data() + i * layout_.num_dense, batch.labels[i], SlotLocked(size_));
    ids_[size_] = batch.ids[i];
    ++size_;
  }
}

}  // namespace tabular
}  // namespace pstrain
