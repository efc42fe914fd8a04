// Export: a checkpoint into a self-contained serving model (serving/model_store.h's layout): the
// model's name and serving config, every variable's values (fixed ones whole; dynamic tables
// every key, or only those seen at least min_count times, or the top_k most frequent), in one
// RocksDB database plus a checksummed manifest. The optimizer slots are left out. No cluster runs:
// the checkpoint is restored into a ps task inside this process, then read out of it.
//
// A re-export of the same checkpoint with the same options writes the same manifest, byte for
// byte, and the same keys and values into the database (each variable's CRC-32C over them is in
// the manifest). RocksDB's own files carry a random session id and timestamps, so their bytes
// differ between exports.
#ifndef PSTRAIN_SERVING_EXPORT_H_
#define PSTRAIN_SERVING_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "serving/model_store.h"

namespace pstrain {

struct ExportOptions {
  // A checkpoint ("<dir>/ckpt-000000001200"), or a checkpoint directory: its best validation's
  // checkpoint (BEST) if one is marked, else its latest. Required.
  std::string checkpoint;
  // The model directory to write (TF Serving's habit: <models>/<name>/<version>). Written as
  // "<out>.tmp-<pid>" and renamed into place when complete. Required.
  std::string out;
  // Replace `out` if it exists. Default false: an existing `out` is kAlreadyExists.
  bool overwrite = false;
  // Dynamic tables: export only keys seen in at least this many training lookups (0: every key).
  int64_t min_count = 0;
  // Dynamic tables: export only the top_k most frequently seen keys of each table (ties: the
  // smaller key first). 0: no limit.
  int64_t top_k = 0;
  // Fixed variables up to this many bytes are stored whole and loaded into memory by the
  // predictor; larger ones (hashed embedding tables) row by row, read through its cache. Default
  // kDenseVariableBytes (16 MiB).
  int64_t dense_bytes = kDenseVariableBytes;
  // Dynamic tables' rows stored as this format ("float32", "float16", "bfloat16", "int8";
  // ps/row_format.h), rounded to nearest from the checkpoint's float32. Empty (default): as each
  // table was trained.
  std::string table_format;
};

struct ExportResult {
  std::string checkpoint;  // the checkpoint exported
  ModelManifest manifest;
  int64_t bytes = 0;       // values written
  double seconds = 0;
};

// Errors: kInvalidArgument (empty paths, negative filters); kNotFound (no checkpoint there);
// kAlreadyExists (`out` exists, without overwrite); kFailedPrecondition (a checkpoint without a
// serving config: its model can't be served, or it was saved before serving existed);
// kDataLoss (a corrupt checkpoint, naming it); kInternal (I/O, naming the path).
absl::StatusOr<ExportResult> ExportModel(const ExportOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_SERVING_EXPORT_H_
