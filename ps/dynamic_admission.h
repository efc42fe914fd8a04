// Admission of new keys to a dynamic table shard (ps/dynamic_shard.h), as DeepRec's counter
// filter and TF Recommenders-Addons' admission strategies do: a key is stored only once a training
// lookup sees it and either its sightings so far (this one included) reach min_count, or a draw
// made at this sighting from (seed, key, sighting) falls under `probability`. Sightings of keys not
// yet stored are counted by a count-min sketch (4 rows of 8-bit saturating counters, conservative
// update), which may overcount a key (collisions), never undercount.
//
// Not thread-safe: the shard changes it with every stripe locked.
#ifndef PSTRAIN_PS_DYNAMIC_ADMISSION_H_
#define PSTRAIN_PS_DYNAMIC_ADMISSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ps/memory_budget.h"

namespace pstrain {

struct AdmissionOptions {
  // Sightings a key needs (0 or 1: no count needed). Default 0.
  int64_t min_count = 0;
  // The chance each sighting admits the key. Default 0 (none).
  double probability = 0;
  // The sketch's bytes (0: 1 MiB), rounded down to a multiple of its rows.
  int64_t sketch_bytes = 0;
  // Seeds the draws.
  uint64_t seed = 0;
};

class AdmissionSketch {
 public:
  // Admission off: every key is admitted.
  AdmissionSketch() = default;
  AdmissionSketch(const AdmissionSketch&) = delete;
  AdmissionSketch& operator=(const AdmissionSketch&) = delete;
  AdmissionSketch(AdmissionSketch&&) = default;
  AdmissionSketch& operator=(AdmissionSketch&&) = default;

  // On when min_count > 1 or probability > 0 (else off, reserving nothing); reserves the sketch's
  // bytes in `budget` (may be null) for `who`. Errors: kResourceExhausted (the budget).
  absl::Status Start(const AdmissionOptions& options, MemoryBudget* budget,
                     const std::string& who);

  bool on() const { return !counters_.empty(); }
  // A key's sightings as counted (0 when off).
  uint32_t Count(int64_t key) const;
  // Counts `n` more sightings of `key` (no effect when off).
  void Add(int64_t key, uint32_t n);
  // Whether a key seen `occurrences` more times now is admitted (the sketch is not changed).
  bool Admits(int64_t key, uint32_t occurrences) const;
  int64_t bytes() const { return reservation_.bytes(); }

 private:
  static constexpr int kRows = 4;
  static constexpr int64_t kDefaultBytes = int64_t{1} << 20;
  // The counter of `key` in row `row`.
  uint64_t At(int64_t key, int row) const;

  AdmissionOptions options_;
  std::vector<uint8_t> counters_;  // kRows rows of width counters each; empty when off
  uint64_t width_ = 0;
  BudgetReservation reservation_;
};

}  // namespace pstrain

#endif  // PSTRAIN_PS_DYNAMIC_ADMISSION_H_
