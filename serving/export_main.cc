// Exports a checkpoint as a self-contained serving model (serving/export.h), with no cluster:
//
//   bazel run //coordinator:export -- --checkpoint=runs/flights_ctr/checkpoints \
//       --out=models/flights_ctr/1 [--min_count=N] [--top_k=K] [--table_format=F] [--overwrite]
//
// --checkpoint names one checkpoint (DIR/ckpt-NNNNNNNNNNNN) or a checkpoint directory (its BEST
// checkpoint if marked, else its latest). Prints one JSON line (the model, checkpoint, variables,
// bytes, seconds); exit code 2 with a one-line error for bad input.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/logging.h"
#include "nlohmann/json.hpp"
#include "serving/export.h"

ABSL_FLAG(std::string, checkpoint, "", "A checkpoint, or a checkpoint directory (best, else latest).");
ABSL_FLAG(std::string, out, "", "The model directory to write, e.g. models/flights_ctr/1.");
ABSL_FLAG(bool, overwrite, false, "Replace --out if it exists.");
ABSL_FLAG(int64_t, min_count, 0,
          "Dynamic tables: only keys seen in at least this many training lookups (0: all).");
ABSL_FLAG(int64_t, top_k, 0, "Dynamic tables: only each table's K most frequent keys (0: all).");
ABSL_FLAG(std::string, table_format, "",
          "Dynamic tables' rows stored as float32, float16, bfloat16 or int8 (default: as trained).");

int main(int argc, char** argv) {
  pstrain::InstallFailureSignalHandler(argv[0]);
  absl::SetProgramUsageMessage(
      "Exports a checkpoint as a serving model.\n"
      "Usage: export --checkpoint=DIR[/ckpt-N] --out=MODEL_DIR [--min_count=N] [--top_k=K]\n"
      "              [--table_format=float32|float16|bfloat16|int8]");
  absl::ParseCommandLine(argc, argv);
  pstrain::SetMinLogLevelFromEnv();
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr && *dir != '\0') {
    if (::chdir(dir) != 0) std::fprintf(stderr, "warning: can't chdir to %s\n", dir);
  }
  pstrain::ExportOptions options;
  options.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  options.out = absl::GetFlag(FLAGS_out);
  options.overwrite = absl::GetFlag(FLAGS_overwrite);
  options.min_count = absl::GetFlag(FLAGS_min_count);
  options.top_k = absl::GetFlag(FLAGS_top_k);
  options.table_format = absl::GetFlag(FLAGS_table_format);
  absl::StatusOr<pstrain::ExportResult> result = pstrain::ExportModel(options);
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(result.status().message()).c_str());
    return 2;
  }
  nlohmann::json j;
  j["model"] = result->manifest.model;
  j["checkpoint"] = result->checkpoint;
  j["step"] = result->manifest.step;
  j["out"] = options.out;
  for (const pstrain::ExportedVariable& v : result->manifest.variables) {
    j["variables"][v.name] = v.count;
  }
  j["bytes"] = result->bytes;
  j["seconds"] = result->seconds;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
