#include "bench/click_log.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/splitmix64.h"
#include "common/status_macros.h"
#include "models/binary_metrics.h"

namespace pstrain {
namespace {

constexpr int kCounts = 13;
constexpr int kIds = 26;

// Criteo-like vocabulary sizes of C1..C26.
constexpr std::array<int64_t, kIds> kVocab = {
    1400, 550,   1000000, 200000, 300,    24, 12000, 600, 3,  90000, 5500,   800000, 3200,
    27,   14000, 500000,  10,     5600,   2100, 4,   700000, 18, 15, 250000, 100,    70000};
// Each id column's main-effect strength (standard deviation of its ids' effects): 4 strong, 8
// medium, 8 weak, 6 noise.
constexpr std::array<double, kIds> kIdEffect = {
    0.5, 0.5, 0.3, 0.3, 0.5, 0.3, 0.15, 0.3, 0.5, 0.15, 0.3, 0.15, 0.0,
    0.3, 0.15, 0.0, 0.3, 0.15, 0.0, 0.15, 0.0, 0.3, 0.15, 0.0, 0.15, 0.0};
// Fraction of rows missing each id column.
constexpr std::array<double, kIds> kIdMissing = {
    0, 0, 0.03, 0.03, 0, 0.1, 0, 0, 0, 0.03, 0, 0.03, 0, 0, 0, 0.03, 0, 0, 0.4, 0.4, 0.03, 0, 0.4,
    0.03, 0.4, 0.03};
// Counts: log(1 + count) ~ N(mean, sd); fraction missing; linear effect per sd of log(1 + count).
constexpr std::array<double, kCounts> kCountMean = {1.0, 2.5, 1.5, 1.2, 4.0, 2.0, 1.5,
                                                    2.2, 3.0, 0.5, 1.2, 0.3, 1.5};
constexpr std::array<double, kCounts> kCountSd = {0.9, 1.5, 1.0, 0.8, 2.0, 1.3, 1.1,
                                                  0.9, 1.4, 0.5, 0.8, 0.5, 1.0};
constexpr std::array<double, kCounts> kCountMissing = {0.45, 0, 0.2, 0.2, 0.03, 0.22, 0.04,
                                                       0,    0.04, 0.45, 0.04, 0.75, 0.2};
constexpr std::array<double, kCounts> kCountEffect = {0.25, -0.2, 0.15, 0, 0.1, 0, -0.1,
                                                      0.2,  0,    0.1, 0,  0.15, 0};
constexpr double kBias = -1.75;

// A standard normal from a hash (Box-Muller on two uniforms).
double NormalOf(uint64_t h) {
  const uint64_t a = SplitMix64(h), b = SplitMix64(h ^ 0x5bd1e9955bd1e995ULL);
  const double u1 = (static_cast<double>(a >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

double Uniform(uint64_t* state) {
  return static_cast<double>(SplitMix64Next(state) >> 11) * 0x1.0p-53;
}

uint64_t Mix(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return SplitMix64(SplitMix64(SplitMix64(seed ^ a) ^ b) ^ c);
}

class World {
 public:
  explicit World(uint64_t seed) : seed_(seed) {}

  // Writes one row into `line` (without the newline); returns its true click probability.
  double Row(uint64_t* rng, std::string* line) const {
    std::array<int64_t, kIds> id;  // -1: missing
    std::array<double, kCounts> z;  // standardized log(1 + count); 0 when missing
    std::array<bool, kCounts> has;
    double logit = kBias;
    for (int k = 0; k < kCounts; ++k) {
      has[k] = Uniform(rng) >= kCountMissing[k];
      const double g = NormalOf(SplitMix64Next(rng));
      z[k] = has[k] ? g : 0;
      logit += kCountEffect[k] * z[k];
    }
    // A bent effect: a middle range of I2 clicks more than either end.
    logit += has[1] ? 0.3 * (1.0 - z[1] * z[1]) * 0.5 : 0;
    // Two counts acting together.
    logit += 0.2 * z[0] * z[2];
    for (int j = 0; j < kIds; ++j) {
      if (Uniform(rng) < kIdMissing[j]) {
        id[j] = -1;
        continue;
      }
      // Log-uniform rank in [0, V): rank r has probability about 1 / ((r + 1) ln V).
      const double v = static_cast<double>(kVocab[j]);
      id[j] = std::min<int64_t>(kVocab[j] - 1,
                                static_cast<int64_t>(std::floor(std::pow(v + 1, Uniform(rng)))) - 1);
      if (id[j] < 0) id[j] = 0;
      logit += kIdEffect[j] * NormalOf(Mix(seed_, 1, j, id[j]));
    }
    // Crosses of small vocabularies: C6 (24) x C9 (3), C14 (27) x C17 (10).
    if (id[5] >= 0 && id[8] >= 0) logit += 0.4 * NormalOf(Mix(seed_, 2, id[5], id[8]));
    if (id[13] >= 0 && id[16] >= 0) logit += 0.4 * NormalOf(Mix(seed_, 3, id[13], id[16]));
    // A rank-4 dot product of C1's and C2's latent vectors (a user's taste for an ad's kind).
    if (id[0] >= 0 && id[1] >= 0) {
      double dot = 0;
      for (int f = 0; f < 4; ++f) {
        dot += NormalOf(Mix(seed_, 4, id[0], f)) * NormalOf(Mix(seed_, 5, id[1], f));
      }
      logit += 0.35 * dot;
    }
    const double p = 1.0 / (1.0 + std::exp(-logit));
    const bool label = Uniform(rng) < p;
    line->clear();
    line->push_back(label ? '1' : '0');
    char buf[32];
    for (int k = 0; k < kCounts; ++k) {
      line->push_back(',');
      if (!has[k]) continue;
      const double count = std::floor(std::exp(kCountMean[k] + kCountSd[k] * z[k])) - 1;
      std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(std::max(0.0, count)));
      line->append(buf);
    }
    for (int j = 0; j < kIds; ++j) {
      line->push_back(',');
      if (id[j] < 0) continue;
      std::snprintf(buf, sizeof(buf), "%08x",
                    static_cast<unsigned>(Mix(seed_, 6, j, id[j]) & 0xffffffffu));
      line->append(buf);
    }
    return p;
  }

 private:
  const uint64_t seed_;
};

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

// Writes `rows` rows into `path`; the true probabilities and labels into `p` and `labels`.
absl::Status WriteFile(const World& world, const std::string& path, int64_t rows, uint64_t rng,
                       std::vector<float>* p, std::vector<float>* labels) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "w"));
  if (f == nullptr) return absl::InternalError(absl::StrCat("can't write ", path));
  std::string header = "label";
  for (int k = 1; k <= kCounts; ++k) absl::StrAppend(&header, ",I", k);
  for (int j = 1; j <= kIds; ++j) absl::StrAppend(&header, ",C", j);
  header.push_back('\n');
  std::fputs(header.c_str(), f.get());
  std::string line;
  for (int64_t r = 0; r < rows; ++r) {
    const double prob = world.Row(&rng, &line);
    line.push_back('\n');
    if (std::fwrite(line.data(), 1, line.size(), f.get()) != line.size()) {
      return absl::InternalError(absl::StrCat("can't write ", path));
    }
    p->push_back(static_cast<float>(prob));
    labels->push_back(line[0] == '1' ? 1.0f : 0.0f);
  }
  if (std::fflush(f.get()) != 0) return absl::InternalError(absl::StrCat("can't write ", path));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClickLog> WriteClickLog(const std::string& dir, const ClickLogOptions& options) {
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  if (made) return absl::InternalError(absl::StrCat("can't make ", dir, ": ", made.message()));
  const World world(options.seed);
  ClickLog log;
  log.train_path = absl::StrCat(dir, "/click_train.csv");
  log.test_path = absl::StrCat(dir, "/click_test.csv");
  log.train_rows = options.train_rows;
  log.test_rows = options.test_rows;
  std::vector<float> p, labels;
  RETURN_IF_ERROR(WriteFile(world, log.train_path, options.train_rows,
                            Mix(options.seed, 7), &p, &labels));
  double positives = 0;
  for (float l : labels) positives += l;
  log.train_ctr = positives / static_cast<double>(std::max<int64_t>(1, options.train_rows));
  p.clear();
  labels.clear();
  RETURN_IF_ERROR(WriteFile(world, log.test_path, options.test_rows, Mix(options.seed, 8), &p,
                            &labels));
  log.best_test_auc = BinaryAuc(p, labels);
  double loss = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double q = std::min(1.0 - 1e-7, std::max(1e-7, static_cast<double>(p[i])));
    loss -= labels[i] > 0.5 ? std::log(q) : std::log(1 - q);
  }
  log.best_test_logloss = loss / static_cast<double>(std::max<size_t>(1, p.size()));
  log.spec_path = absl::StrCat(dir, "/click_spec.json");
  std::unique_ptr<FILE, int (*)(FILE*)> spec(std::fopen(log.spec_path.c_str(), "w"), &std::fclose);
  if (spec == nullptr || std::fputs(ClickLogSpec(log).c_str(), spec.get()) < 0 ||
      std::fflush(spec.get()) != 0) {
    return absl::InternalError(absl::StrCat("can't write ", log.spec_path));
  }
  return log;
}

std::string ClickLogSpec(const ClickLog& log) {
  std::string features;
  for (int k = 1; k <= kCounts; ++k) {
    absl::StrAppend(&features, features.empty() ? "" : ",\n    ", "{\"name\": \"I", k,
                    "\", \"type\": \"numeric\", \"column\": \"I", k,
                    "\", \"transform\": \"bucketize\", \"quantiles\": 10}");
  }
  for (int j = 1; j <= kIds; ++j) {
    absl::StrAppend(&features, ",\n    {\"name\": \"C", j, "\", \"type\": \"categorical\", ",
                    "\"column\": \"C", j, "\"}");
  }
  return absl::StrCat("{\n  \"label\": {\"column\": \"label\", \"task\": \"binary\"},\n",
                      "  \"split\": {\"test_data\": \"", log.test_path, "\"},\n",
                      "  \"features\": [\n    ", features, "\n  ],\n",
                      "  \"model\": {\"type\": \"wide_and_deep\", \"embedding_dim\": 16, ",
                      "\"hidden\": [64, 32]}\n}\n");
}

}  // namespace pstrain
