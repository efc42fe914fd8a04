// An exported model on disk (serving/export.h writes it) and its reader:
//
//   MODEL_DIR/MANIFEST.json   {"manifest": {...}, "crc32c": "<hex>"}: the model's name and serving
//                             config, the checkpoint it came from, and every variable (name, kind,
//                             shape, rows or keys, default row value, CRC-32C of its content); the
//                             crc32c covers the manifest's canonical JSON text
//   MODEL_DIR/db/             one RocksDB database:
//       "d" \0 <name>                 a dense variable (16 MiB or less), every row, little-endian
//       "r" \0 <name> \0 <row, 8 BE>  a larger fixed variable (a hashed embedding table), by row
//       "k" \0 <name> \0 <key, 8 BE>  a dynamic table's row, by key (as unsigned, big-endian), as
//                                     the table stored it (its dtype: float32, float16, bfloat16,
//                                     int8 with the row's range; ps/row_format.h)
//
// Each variable's crc32c is the CRC-32C of its keys and values in key order. The optimizer slots
// are not exported.
//
// The reader loads the dense variables into memory (checking their CRCs) and reads table rows
// from the database through a cache bounded by `cache_bytes` (least recently used rows go first),
// so a model larger than memory still serves. A dynamic table's key that isn't there reads the
// table's default row, as an evaluation lookup on the ps does.
#ifndef PSTRAIN_SERVING_MODEL_STORE_H_
#define PSTRAIN_SERVING_MODEL_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"
#include "ps/row_format.h"

namespace pstrain {

inline constexpr char kModelManifestFile[] = "MANIFEST.json";
inline constexpr char kModelDbDir[] = "db";
inline constexpr char kModelFormat[] = "pstrain-model-1";
// Fixed variables up to this size are "dense": one value, loaded into memory.
inline constexpr int64_t kDenseVariableBytes = int64_t{16} << 20;

// One exported variable, as the manifest describes it.
struct ExportedVariable {
  std::string name;
  enum class Kind { kDense, kRows, kTable } kind = Kind::kDense;
  std::vector<int64_t> shape;  // fixed: the full shape; table: [dim]
  // Fixed variables may be "int64"; a table's rows may be stored as "float16", "bfloat16" or
  // "int8" (ps/row_format.h), and are served as float32.
  std::string dtype = "float32";
  int64_t count = 0;       // rows (fixed) or keys (table) exported
  float default_value = 0;  // table: each float of an absent key's row
  uint32_t crc32c = 0;
  int64_t row_bytes() const;  // bytes of one row as served
  // A table's rows as stored (dtype), and their bytes in the database.
  RowFormat row_format() const;
  int64_t stored_row_bytes() const;
};

// The manifest's variables and facts, parsed. Errors: kDataLoss naming the file for a missing,
// truncated or corrupt manifest (a CRC mismatch, bad JSON, a missing field).
struct ModelManifest {
  std::string model;
  std::string serving_config;
  std::string checkpoint;
  int64_t step = 0;
  std::vector<ExportedVariable> variables;
  nlohmann::json extra;  // the export's other facts (filters, key counts before filtering)

  nlohmann::json ToJson() const;
  static absl::StatusOr<ModelManifest> FromJson(const nlohmann::json& j, const std::string& file);
};

// An absent key's row of table `var` (row_bytes(), each float its default_value) into `row`, which
// may sit at any address.
void FillDefaultRow(const ExportedVariable& var, char* row);

// MANIFEST.json's text for `manifest` (with its crc32c), and the reverse. Errors: kDataLoss naming
// `file`.
std::string ManifestFileText(const ModelManifest& manifest);
absl::StatusOr<ModelManifest> ParseManifestFile(const std::string& text, const std::string& file);

// The database keys of the layout above.
std::string DenseKey(const std::string& name);
std::string RowKey(const std::string& name, int64_t row);
std::string TableKey(const std::string& name, int64_t key);
// Each variable's prefix in the database ("r\0name\0" or "k\0name\0").
std::string RowsPrefix(const std::string& name);
std::string TablePrefix(const std::string& name);

struct ModelStoreOptions {
  // Bytes of table rows kept in memory (rows, plus about 64 bytes of bookkeeping each). -1: every
  // row of every table is read into memory at load (no database reads after). Default 256 MiB.
  int64_t cache_bytes = int64_t{256} << 20;
  // Read every table at load and check its CRC against the manifest (a full scan). Default false:
  // the database's own block checksums are checked as rows are read.
  bool verify_tables = false;
};

// The cache's counters since the store was opened.
struct CacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t rows = 0;   // rows held now
  int64_t bytes = 0;  // bytes held now
  double hit_rate() const { return hits + misses == 0 ? 0 : double(hits) / double(hits + misses); }
};

// Thread-safe.
class ModelStore {
 public:
  // Opens MODEL_DIR. Errors: kNotFound (no such directory), kDataLoss naming the file for a missing,
  // truncated or corrupt manifest or database, or a dense variable whose CRC doesn't match.
  static absl::StatusOr<std::unique_ptr<ModelStore>> Open(const std::string& dir,
                                                          const ModelStoreOptions& options = {});
  virtual ~ModelStore() = default;

  virtual const ModelManifest& manifest() const = 0;
  virtual const std::string& dir() const = 0;

  // The index of variable `name` in manifest().variables, or -1.
  virtual int Find(const std::string& name) const = 0;
  // A dense variable's bytes (kind kDense). Errors: kInvalidArgument for another kind.
  virtual absl::StatusOr<absl::string_view> Dense(int variable) const = 0;
  // Rows `ids` of variable `variable` (kRows: row numbers; kTable: keys) into `out`
  // (ids.size() rows of row_bytes()). Errors: kInvalidArgument for a row outside the variable or a
  // dense variable; kDataLoss naming the database for a read that fails its checksum.
  virtual absl::Status Rows(int variable, absl::Span<const int64_t> ids, char* out) const = 0;

  virtual CacheStats cache_stats() const = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVING_MODEL_STORE_H_
