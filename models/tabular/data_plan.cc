#include "models/tabular/data_plan.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json_parse.h"
#include "common/status_macros.h"
#include "models/data/csv_records.h"

namespace pstrain {
namespace tabular {
namespace {

constexpr uint64_t kTestSalt = 0x7e57000000000001ull;
constexpr uint64_t kValidationSalt = 0x7a11da7e00000002ull;
constexpr int64_t kUnitBytes = int64_t{4} << 20;   // evaluation units
// Training chunks: small, so that a worker interleaving many of them reads from many places of its
// share at once (a file sorted by time still gives each batch rows from all over its periods).
constexpr int64_t kTrainChunkBytes = int64_t{64} << 10;
constexpr int64_t kMarkGap = int64_t{64} << 10;    // a row mark about this often (large files)
constexpr size_t kReservoir = 100000;              // quantile samples per feature
constexpr size_t kMaxVocabulary = 1000000;         // unknown_fraction features
constexpr size_t kMaxClasses = 10000;
constexpr size_t kBadRowExamples = 5;
constexpr int kPiecesPerWorker = 8;  // a file cut by row ranges: pieces per worker

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Running mean and variance (Welford).
struct Moments {
  int64_t n = 0;
  double mean = 0, m2 = 0;
  void Add(double x) {
    ++n;
    const double d = x - mean;
    mean += d / static_cast<double>(n);
    m2 += d * (x - mean);
  }
  double stddev() const { return n > 0 ? std::sqrt(m2 / static_cast<double>(n)) : 0; }
};

// `file`'s rows [begin mark a, end mark b) as a Range (b == marks.size(): to the end).
Range RangeOf(const FileInfo& file, int fi, size_t a, size_t b) {
  Range r;
  r.file = fi;
  r.begin = file.marks[a].offset;
  r.first_line = file.marks[a].line;
  const bool to_end = b >= file.marks.size();
  r.end = to_end ? file.end : file.marks[b].offset;
  r.rows = (to_end ? file.rows : file.marks[b].row) - file.marks[a].row;
  r.train_rows = (to_end ? file.train_rows : file.marks[b].train_before) - file.marks[a].train_before;
  return r;
}

// Marks [a, b) of `file` as ranges of <= `bytes` (a gzip file's as one range: it can't be entered
// in the middle without decompressing what comes before).
void Chunks(const FileInfo& file, int fi, size_t a, size_t b, int64_t bytes,
            std::vector<Range>* out) {
  if (a >= b) return;
  if (file.gzip) {
    out->push_back(RangeOf(file, fi, a, b));
    return;
  }
  size_t start = a;
  for (size_t m = a + 1; m < b; ++m) {
    if (file.marks[m].offset - file.marks[start].offset >= bytes) {
      out->push_back(RangeOf(file, fi, start, m));
      start = m;
    }
  }
  out->push_back(RangeOf(file, fi, start, b));
}

nlohmann::json FileJson(const FileInfo& f) {
  return {{"path", f.path}, {"role", static_cast<int>(f.role)},
          {"index", f.index}, {"gzip", f.gzip},
          {"rows", f.rows},   {"train_rows", f.train_rows},
          {"end", f.end}};
}

absl::Status FileFromJson(const nlohmann::json& fj, FileInfo* f) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("tabular data plan: ", what));
  };
  if (!fj.is_object() || !fj.value("path", nlohmann::json()).is_string() ||
      !fj.value("role", nlohmann::json()).is_number_integer() ||
      !fj.value("index", nlohmann::json()).is_number_integer() ||
      !fj.value("gzip", nlohmann::json()).is_boolean() ||
      !fj.value("rows", nlohmann::json()).is_number_integer() ||
      !fj.value("train_rows", nlohmann::json()).is_number_integer() ||
      !fj.value("end", nlohmann::json()).is_number_integer()) {
    return bad("a file's entry is malformed");
  }
  f->path = fj["path"].get<std::string>();
  const int role = fj["role"].get<int>();
  if (role < 0 || role > 3) return bad("a file's role is out of range");
  f->role = static_cast<FileRole>(role);
  f->index = fj["index"].get<int>();
  f->gzip = fj["gzip"].get<bool>();
  f->rows = fj["rows"].get<int64_t>();
  f->train_rows = fj["train_rows"].get<int64_t>();
  f->end = fj["end"].get<int64_t>();
  return absl::OkStatus();
}

nlohmann::json RangeJson(const Range& r) {
  return {r.file, r.begin, r.end, r.first_line, r.rows, r.train_rows};
}

absl::Status RangeFromJson(const nlohmann::json& rj, Range* r) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("tabular data plan: ", what));
  };
  if (!rj.is_array() || rj.size() != 6) return bad("a range is malformed");
  for (const nlohmann::json& v : rj) {
    if (!v.is_number_integer()) return bad("a range is malformed");
  }
  r->file = rj[0].get<int>();
  r->begin = rj[1].get<int64_t>();
  r->end = rj[2].get<int64_t>();
  r->first_line = rj[3].get<int64_t>();
  r->rows = rj[4].get<int64_t>();
  r->train_rows = rj[5].get<int64_t>();
  if (r->file < 0 || r->begin < 0 || r->end < r->begin || r->first_line < 1) {
    return bad("a range is out of bounds");
  }
  return absl::OkStatus();
}

}  // namespace

const char* SplitName(Split split) {
  switch (split) {
    case Split::kTrain: return "train";
    case Split::kValidation: return "validation";
    case Split::kTest: return "test";
  }
  return "?";
}

absl::StatusOr<std::vector<std::string>> ResolveFiles(const std::string& pattern) {
  std::vector<std::string> out;
  if (pattern.find_first_of("*?[") != std::string::npos) {
    glob_t g;
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        if (IsRegularFile(g.gl_pathv[i])) out.emplace_back(g.gl_pathv[i]);
      }
    }
    globfree(&g);
    if (out.empty()) return absl::NotFoundError(absl::StrCat("no files match ", pattern));
  } else {
    std::error_code ec;
    if (std::filesystem::is_directory(pattern, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(pattern, ec)) {
        const std::string name = e.path().filename().string();
        if (name.empty() || name[0] == '.' || name[0] == '_') continue;
        if (IsRegularFile(e.path().string())) out.push_back(e.path().string());
      }
      if (out.empty()) {
        return absl::NotFoundError(absl::StrCat("no data files in the directory ", pattern));
      }
    } else if (IsRegularFile(pattern)) {
      out.push_back(pattern);
    } else {
      return absl::NotFoundError(absl::StrCat("no such data file ", pattern));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Split SplitOf(const Spec& spec, const Transformer& transformer, const FileInfo& file,
              absl::Span<const absl::string_view> fields, const ColumnMap& columns, int64_t line,
              double validation_fraction, bool validation_files, uint64_t seed) {
  if (file.role == FileRole::kValidation) return Split::kValidation;
  if (file.role == FileRole::kTest) return Split::kTest;
  if (file.role == FileRole::kStream) return Split::kTrain;
  bool test = false;
  if (!spec.split.test_column.empty()) {
    test = transformer.IsTestByColumn(fields, columns);
  } else if (spec.split.test_data.empty()) {
    test = UnitOf(RowHash(seed, kTestSalt, file.index, line)) < spec.split.test_fraction;
  }
  if (test) return Split::kTest;
  if (!validation_files &&
      UnitOf(RowHash(seed, kValidationSalt, file.index, line)) < validation_fraction) {
    return Split::kValidation;
  }
  return Split::kTrain;
}

std::vector<Range> DataPlan::EvalUnits(Split split) const {
  bool validation_files = false, test_files = false;
  for (const FileInfo& f : files) {
    validation_files |= f.role == FileRole::kValidation;
    test_files |= f.role == FileRole::kTest;
  }
  std::vector<Range> out;
  for (size_t i = 0; i < files.size(); ++i) {
    const FileInfo& f = files[i];
    bool holds = false;
    if (split == Split::kValidation) {
      holds = f.role == FileRole::kValidation || (f.role == FileRole::kData && !validation_files);
    } else if (split == Split::kTest) {
      holds = f.role == FileRole::kTest || (f.role == FileRole::kData && !test_files);
    }
    if (holds) Chunks(f, static_cast<int>(i), 0, f.marks.size(), kUnitBytes, &out);
  }
  return out;
}

nlohmann::json DataPlan::ToJson() const {
  nlohmann::json j;
  j["files"] = nlohmann::json::array();
  for (const FileInfo& f : files) j["files"].push_back(FileJson(f));
  j["stats"] = stats.ToJson();
  j["rows"] = {rows[0], rows[1], rows[2]};
  j["bad_rows"] = bad_rows;
  j["shares"] = nlohmann::json::array();
  for (const std::vector<Range>& share : shares) {
    nlohmann::json s = nlohmann::json::array();
    for (const Range& r : share) s.push_back(RangeJson(r));
    j["shares"].push_back(s);
  }
  return j;
}

absl::StatusOr<DataPlan> DataPlan::FromJson(const nlohmann::json& j, size_t num_features) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("tabular data plan: ", what));
  };
  if (!j.is_object() || !j.contains("files") || !j["files"].is_array() ||
      !j.contains("shares") || !j["shares"].is_array() || !j.contains("stats") ||
      !j.contains("rows") || !j["rows"].is_array() || j["rows"].size() != 3) {
    return bad("malformed");
  }
  DataPlan p;
  for (const nlohmann::json& fj : j["files"]) {
    FileInfo f;
    RETURN_IF_ERROR(FileFromJson(fj, &f));
    p.files.push_back(std::move(f));
  }
  ASSIGN_OR_RETURN(p.stats, Stats::FromJson(j["stats"], num_features));
  for (int i = 0; i < 3; ++i) {
    if (!j["rows"][i].is_number_integer()) return bad("row counts are malformed");
    p.rows[i] = j["rows"][i].get<int64_t>();
  }
  p.bad_rows = j.value("bad_rows", int64_t{0});
  for (const nlohmann::json& sj : j["shares"]) {
    if (!sj.is_array()) return bad("a share is malformed");
    std::vector<Range> share;
    for (const nlohmann::json& rj : sj) {
      if (!rj.is_array() || rj.size() != 6) return bad("a range is malformed");
      for (const nlohmann::json& v : rj) {
        if (!v.is_number_integer()) return bad("a range is malformed");
      }
      Range r;
      RETURN_IF_ERROR(RangeFromJson(rj, &r));
      if (r.file >= static_cast<int>(p.files.size())) return bad("a range is out of bounds");
      share.push_back(r);
    }
    p.shares.push_back(std::move(share));
  }
  return p;
}

namespace {

// The files of the data, the validation data and the spec's test data, in that order, each
// pattern's sorted. Errors: ResolveFiles'.
absl::Status ListFiles(const Spec& spec, const ScanOptions& options, DataPlan* plan) {
  auto add_files = [&](const std::string& pattern, FileRole role) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<std::string> paths, ResolveFiles(pattern));
    for (size_t i = 0; i < paths.size(); ++i) {
      FileInfo f;
      f.path = paths[i];
      f.role = role;
      f.index = static_cast<int>(i);
      plan->files.push_back(std::move(f));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(add_files(options.data, FileRole::kData));
  if (!options.validation_data.empty()) {
    RETURN_IF_ERROR(add_files(options.validation_data, FileRole::kValidation));
  }
  if (!spec.split.test_data.empty()) RETURN_IF_ERROR(add_files(spec.split.test_data, FileRole::kTest));
  return absl::OkStatus();
}

// One scan's reading of the rows: each file's marks and counts, the bad rows, and the training
// split's statistics as they build up (moments, quantile reservoirs, vocabularies, classes), which
// Finish() turns into the plan's Stats. Used by one thread.
class Scanner {
 public:
  Scanner(const Spec& spec, const ScanOptions& options)
      : spec_(spec),
        options_(options),
        validation_files_(!options.validation_data.empty()),
        nf_(spec.features.size()),
        known_(KnownStats(spec)),
        t_(spec, known_, options.seed),
        moments_(nf_),
        reservoir_(nf_),
        reservoir_seen_(nf_, 0),
        rng_(options.seed ^ 0x5ca9ull),
        vocabulary_(nf_),
        collect_classes_(spec.label.task == Task::kMulticlass && spec.label.classes.empty()) {}

  // Reads `file` (one of plan->files): its header, its rows' splits and checks, its marks; the
  // training rows' statistics. Errors: as Scan's, for this file.
  absl::Status ScanFile(FileInfo* file, DataPlan* plan);

  // The statistics into plan->stats; the classes of a multiclass label without given classes
  // (held-out rows of other labels are bad rows). Errors: kInvalidArgument for too few or too
  // many classes, or a held-out label the training split lacks (unless skip_bad_rows).
  absl::Status Finish(DataPlan* plan);

 private:
  // A held-out label (multiclass without given classes): where it first appears, its rows.
  struct HeldOut {
    std::string where;  // "file:line" of its first row
    int64_t rows[3] = {0, 0, 0};
  };

  // What the scan knows before it starts: given boundaries.
  static Stats KnownStats(const Spec& spec) {
    Stats known;
    known.features.resize(spec.features.size());
    for (size_t f = 0; f < spec.features.size(); ++f) {
      known.features[f].boundaries = spec.features[f].boundaries;
    }
    return known;
  }

  // The row's split into *split, and its checks; an error names the column and value.
  absl::Status CheckRow(const FileInfo& file, const std::vector<absl::string_view>& fields,
                        const ColumnMap& columns, int64_t line, Split* split) const;
  // A training row's share of the statistics. Errors: a vocabulary over kMaxVocabulary.
  absl::Status AddTrainingRow(const std::vector<absl::string_view>& fields,
                              const ColumnMap& columns);
  void FinishFeatureStats(DataPlan* plan);
  absl::Status FinishClasses(DataPlan* plan);

  const Spec& spec_;
  const ScanOptions& options_;
  const bool validation_files_;
  const size_t nf_;
  const Stats known_;
  const Transformer t_;  // over known_
  // The training split's statistics so far, by feature.
  std::vector<Moments> moments_;
  std::vector<std::vector<double>> reservoir_;
  std::vector<int64_t> reservoir_seen_;
  std::mt19937_64 rng_;
  std::vector<absl::flat_hash_set<uint64_t>> vocabulary_;
  Moments label_moments_;
  // Multiclass without given classes: the training labels' counts, and where each held-out label
  // first appears (checked against the classes at the end).
  const bool collect_classes_;
  std::map<std::string, int64_t> class_counts_;
  std::map<std::string, HeldOut> held_out_labels_;
};

absl::Status Scanner::ScanFile(FileInfo* file_ptr, DataPlan* plan) {
  FileInfo& file = *file_ptr;
  data::CsvRecordOptions ro;
  ro.delimiter = spec_.delimiter;
  ASSIGN_OR_RETURN(std::unique_ptr<data::CsvRecordReader> reader,
                   data::CsvRecordReader::Open(file.path, ro));
  file.gzip = reader->gzipped();
  ASSIGN_OR_RETURN(bool any, reader->Next());
  if (!any) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path, ": empty file (expected a header line)"));
  }
  std::vector<std::string> header(reader->fields().begin(), reader->fields().end());
  ASSIGN_OR_RETURN(const ColumnMap columns, t_.MapColumns(header, file.path));
  struct stat st;
  const int64_t bytes = ::stat(file.path.c_str(), &st) == 0 ? st.st_size : 0;
  const int64_t gap = std::clamp<int64_t>(bytes / 1024, 1, kMarkGap);
  int64_t last_mark = -kMarkGap;
  while (true) {
    ASSIGN_OR_RETURN(any, reader->Next());
    if (!any) break;
    const int64_t offset = reader->offset(), line = reader->line();
    if (file.rows == 0 || offset - last_mark >= gap) {
      file.marks.push_back({offset, line, file.rows, file.train_rows});
      last_mark = offset;
    }
    ++file.rows;
    file.end = reader->next_offset();
    const std::vector<absl::string_view>& fields = reader->fields();
    Split split = Split::kTrain;
    absl::Status row = CheckRow(file, fields, columns, line, &split);
    if (!row.ok()) {
      const std::string what = absl::StrCat(file.path, ":", line, ": ", row.message());
      if (!options_.skip_bad_rows) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " (--bad_rows=skip skips and counts such rows)"));
      }
      ++plan->bad_rows;
      if (plan->bad_row_examples.size() < kBadRowExamples) plan->bad_row_examples.push_back(what);
      continue;
    }
    if (split != Split::kTrain) {
      if (collect_classes_) {
        HeldOut& h = held_out_labels_[std::string(fields[columns.label])];
        if (h.where.empty()) h.where = absl::StrCat(file.path, ":", line);
        ++h.rows[static_cast<int>(split)];
      }
      ++plan->rows[static_cast<int>(split)];
      continue;
    }
    ++plan->rows[0];
    ++file.train_rows;
    RETURN_IF_ERROR(AddTrainingRow(fields, columns));
  }
  if (file.rows == 0 && file.role == FileRole::kData) {
    plan->notes.push_back(absl::StrCat(file.path, " has a header and no rows"));
  }
  return absl::OkStatus();
}

absl::Status Scanner::CheckRow(const FileInfo& file, const std::vector<absl::string_view>& fields,
                               const ColumnMap& columns, int64_t line, Split* split) const {
  *split = SplitOf(spec_, t_, file, fields, columns, line, options_.validation_fraction,
                   validation_files_, options_.seed);
  if (fields.size() != columns.num_fields) {
    return absl::InvalidArgumentError(
        absl::StrCat(fields.size(), " fields, the header has ", columns.num_fields));
  }
  if (collect_classes_) {
    const absl::string_view text = fields[columns.label];
    if (t_.IsMissing(text)) {
      return absl::InvalidArgumentError(
          absl::StrCat("column '", spec_.label.column, "': a missing label"));
    }
  } else {
    RETURN_IF_ERROR(t_.Label(fields, columns).status());
  }
  for (size_t f = 0; f < nf_; ++f) {
    const FeatureSpec& fs = spec_.features[f];
    if (fs.type == FeatureType::kCross) continue;
    const absl::string_view field = fields[columns.feature_column[f]];
    if (fs.type == FeatureType::kNumeric) {
      if (t_.IsMissing(field)) continue;
      double x = 0;
      if (!ParseNumber(field, &x)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "column '", fs.column, "': '", field.substr(0, 40), "' is not a number"));
      }
    } else if (fs.type == FeatureType::kDatetime) {
      RETURN_IF_ERROR(t_.RawValue(static_cast<int>(f), field).status());
    }
  }
  return absl::OkStatus();
}

absl::Status Scanner::AddTrainingRow(const std::vector<absl::string_view>& fields,
                                     const ColumnMap& columns) {
  if (collect_classes_) {
    ++class_counts_[std::string(fields[columns.label])];
  } else {
    label_moments_.Add(*t_.Label(fields, columns));
  }
  for (size_t f = 0; f < nf_; ++f) {
    const FeatureSpec& fs = spec_.features[f];
    if (fs.type == FeatureType::kCross) continue;
    const absl::string_view field = fields[columns.feature_column[f]];
    if (fs.type == FeatureType::kNumeric) {
      double x = 0;
      if (t_.IsMissing(field) || !ParseNumber(field, &x)) continue;
      if (fs.transform == NumericTransform::kStandardize) moments_[f].Add(x);
      if (fs.quantiles > 0) {
        ++reservoir_seen_[f];
        if (reservoir_[f].size() < kReservoir) {
          reservoir_[f].push_back(x);
        } else {
          const uint64_t j = rng_() % static_cast<uint64_t>(reservoir_seen_[f]);
          if (j < kReservoir) reservoir_[f][j] = x;
        }
      }
    }
    if (fs.unknown_fraction > 0) {
      ASSIGN_OR_RETURN(uint64_t v, t_.RawValue(static_cast<int>(f), field));
      vocabulary_[f].insert(v);
      if (vocabulary_[f].size() > kMaxVocabulary) {
        return absl::InvalidArgumentError(absl::StrCat(
            spec_.path, ": feature '", fs.name, "' has over ", kMaxVocabulary,
            " distinct values in training: unknown_fraction keeps them all; drop it"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Scanner::Finish(DataPlan* plan) {
  FinishFeatureStats(plan);
  if (collect_classes_) return FinishClasses(plan);
  plan->stats.classes = spec_.label.classes;
  plan->stats.label_mean = label_moments_.mean;
  plan->stats.label_stddev = label_moments_.stddev();
  return absl::OkStatus();
}

void Scanner::FinishFeatureStats(DataPlan* plan) {
  plan->stats.features.resize(nf_);
  for (size_t f = 0; f < nf_; ++f) {
    const FeatureSpec& fs = spec_.features[f];
    FeatureStats& st = plan->stats.features[f];
    if (fs.type == FeatureType::kNumeric && fs.transform == NumericTransform::kStandardize) {
      st.mean = moments_[f].mean;
      st.stddev = moments_[f].stddev() > 0 ? moments_[f].stddev() : 1;
    }
    st.boundaries = fs.boundaries;
    if (fs.quantiles > 0) {
      std::vector<double>& s = reservoir_[f];
      std::sort(s.begin(), s.end());
      for (int k = 1; k < fs.quantiles && !s.empty(); ++k) {
        const double v = s[static_cast<size_t>(k) * s.size() / fs.quantiles];
        if (st.boundaries.empty() || v > st.boundaries.back()) st.boundaries.push_back(v);
      }
    }
    st.vocabulary = std::move(vocabulary_[f]);
  }
}

absl::Status Scanner::FinishClasses(DataPlan* plan) {
  if (class_counts_.size() < 2 || class_counts_.size() > kMaxClasses) {
    return absl::InvalidArgumentError(absl::StrCat(
        options_.data, ": the training split has ", class_counts_.size(), " classes of '",
        spec_.label.column, "'; multiclass needs 2 to ", kMaxClasses));
  }
  for (const auto& [text, count] : class_counts_) {
    plan->stats.classes.push_back(text);
    plan->stats.class_rates.push_back(static_cast<double>(count) /
                                      static_cast<double>(plan->rows[0]));
  }
  for (const auto& [text, h] : held_out_labels_) {
    if (class_counts_.count(text)) continue;
    const std::string what = absl::StrCat(h.where, ": column '", spec_.label.column, "': '", text,
                                          "' is not one of the classes the training split has");
    if (!options_.skip_bad_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " (--bad_rows=skip skips and counts such rows)"));
    }
    // Counted as bad; the readers' Label() refuses them alike.
    for (int k = 0; k < 3; ++k) {
      plan->bad_rows += h.rows[k];
      plan->rows[k] -= h.rows[k];
    }
    if (plan->bad_row_examples.size() < kBadRowExamples) plan->bad_row_examples.push_back(what);
  }
  return absl::OkStatus();
}

// Each of `files`' marks in pieces of about equal training rows: kPiecesPerWorker * `workers`
// contiguous pieces per file (cut at marks), dealt round-robin, so every worker gets the same
// number of training rows (to a mark's worth), spread over the whole file (a file sorted by time
// gives each worker every period).
void DealPieces(const std::vector<int>& files, int workers, int64_t chunk_bytes, DataPlan* plan) {
  for (int fi : files) {
    const FileInfo& f = plan->files[fi];
    const int pieces = kPiecesPerWorker * workers;
    std::vector<size_t> starts = {0};
    for (int k = 1; k < pieces; ++k) {
      const int64_t target = f.train_rows * k / pieces;
      // The first mark with at least `target` training rows before it.
      const size_t m = std::lower_bound(f.marks.begin(), f.marks.end(), target,
                                        [](const RowMark& mk, int64_t t) {
                                          return mk.train_before < t;
                                        }) -
                       f.marks.begin();
      starts.push_back(std::max(m, starts.back()));
    }
    starts.push_back(f.marks.size());
    for (int k = 0; k < pieces; ++k) {
      Chunks(f, fi, starts[k], starts[k + 1], chunk_bytes, &plan->shares[k % workers]);
    }
  }
}

// The workers' shares of the training rows: whole files dealt round-robin when there are at least
// as many as workers, else pieces of each (DealPieces); a worker whose share has no training rows
// reads every data file.
void PlanShares(int workers, int64_t min_ranges, DataPlan* plan) {
  std::vector<int> data_files;
  for (size_t i = 0; i < plan->files.size(); ++i) {
    if (plan->files[i].role == FileRole::kData && !plan->files[i].marks.empty()) {
      data_files.push_back(static_cast<int>(i));
    }
  }
  const int w = workers;
  plan->shares.assign(w, {});
  // Ranges of 64 KiB, or smaller (down to the marks' spacing) to make at least min_ranges of them.
  int64_t data_bytes = 0;
  for (int fi : data_files) data_bytes += plan->files[fi].end - plan->files[fi].marks[0].offset;
  const int64_t chunk_bytes =
      std::clamp<int64_t>(data_bytes / std::max<int64_t>(1, min_ranges), 1, kTrainChunkBytes);
  if (static_cast<int>(data_files.size()) >= w) {
    for (size_t k = 0; k < data_files.size(); ++k) {
      const FileInfo& f = plan->files[data_files[k]];
      Chunks(f, data_files[k], 0, f.marks.size(), chunk_bytes, &plan->shares[k % w]);
    }
  } else {
    DealPieces(data_files, w, chunk_bytes, plan);
  }
  for (int k = 0; k < w; ++k) {
    int64_t train = 0;
    for (const Range& r : plan->shares[k]) train += r.train_rows;
    if (train > 0) continue;
    // Too little data to share: this worker reads all of it (its steps still train).
    plan->notes.push_back(absl::StrCat("worker ", k, "'s share of the data had no training rows; "
                                       "it reads all the data files"));
    plan->shares[k].clear();
    for (int fi : data_files) {
      Chunks(plan->files[fi], fi, 0, plan->files[fi].marks.size(), chunk_bytes,
             &plan->shares[k]);
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<Range>> ScanArrival(const Spec& spec, const ScanOptions& options,
                                               int number, FileInfo* file, int64_t* bad_rows) {
  file->role = FileRole::kStream;
  file->index = number;
  file->rows = file->train_rows = file->end = 0;
  file->marks.clear();
  DataPlan scratch;  // the counts; the statistics are the first scan's
  Scanner scanner(spec, options);
  RETURN_IF_ERROR(scanner.ScanFile(file, &scratch));
  *bad_rows += scratch.bad_rows;
  std::vector<Range> ranges;
  Chunks(*file, number, 0, file->marks.size(), kTrainChunkBytes, &ranges);
  return ranges;
}

std::string FollowedSplitDescriptor(const FileInfo& file, const Range& range) {
  return nlohmann::json{{"file", FileJson(file)}, {"range", RangeJson(range)}}.dump();
}

absl::Status ParseFollowedSplit(const std::string& descriptor, FileInfo* file, Range* range) {
  absl::StatusOr<nlohmann::json> parsed = ParseJson(descriptor);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tabular data plan: a followed split is malformed: ", parsed.status().message()));
  }
  const nlohmann::json& j = *parsed;
  if (!j.is_object() || !j.contains("file") || !j.contains("range")) {
    return absl::InvalidArgumentError("tabular data plan: a followed split is malformed");
  }
  RETURN_IF_ERROR(FileFromJson(j["file"], file));
  return RangeFromJson(j["range"], range);
}

absl::StatusOr<DataPlan> Scan(const Spec& spec, const ScanOptions& options) {
  if (options.workers < 1) return absl::InvalidArgumentError("tabular scan: workers < 1");
  if (!(options.validation_fraction >= 0 && options.validation_fraction < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "validation_fraction ", options.validation_fraction, " is outside [0, 1)"));
  }
  DataPlan plan;
  RETURN_IF_ERROR(ListFiles(spec, options, &plan));
  Scanner scanner(spec, options);
  for (FileInfo& file : plan.files) RETURN_IF_ERROR(scanner.ScanFile(&file, &plan));
  RETURN_IF_ERROR(scanner.Finish(&plan));
  if (plan.rows[0] == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.data, ": no training rows (", plan.rows[1], " validation, ", plan.rows[2],
        " test, ", plan.bad_rows, " bad)"));
  }
  if (plan.rows[2] == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.data, ": no test rows; check the spec's split (", spec.path, ")"));
  }
  PlanShares(options.workers, options.min_ranges, &plan);
  return plan;
}

}  // namespace tabular
}  // namespace pstrain
