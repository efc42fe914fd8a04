// A trained model outside the cluster: what turns raw examples (text fields by column name, as in
// the training CSV) into predictions, with the same parsing and feature transforms as training,
// reading the model's variables through a PsConnection (an exported model's store in serving/,
// or a cluster's ps tasks).
//
// Each model that can be served describes itself after Setup in a serving config
// (Model::ServingConfig(): JSON text, written into every checkpoint by the trainer); a head is
// made from the model's name and that config alone, with no training data.
#ifndef PSTRAIN_MODELS_SERVING_HEAD_H_
#define PSTRAIN_MODELS_SERVING_HEAD_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/ps_connection.h"

namespace pstrain {

// The checkpoint state keys under which the trainer records the model's name and its serving
// config (Model::ServingConfig) in every checkpoint.
inline constexpr char kCheckpointModelKey[] = "trainer/model";
inline constexpr char kCheckpointServingKey[] = "trainer/serving";

// Examples as text: a header of column names, then rows of fields in the header's order.
struct RawExamples {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

// Immutable after creation; Predict is thread-safe.
class ServingHead {
 public:
  virtual ~ServingHead() = default;

  // The columns Predict reads (others are ignored).
  virtual std::vector<std::string> columns() const = 0;
  // What each example's predictions are, in order: "probability" (binary), "prediction"
  // (regression), or "probability:<class>" per class (multiclass).
  virtual std::vector<std::string> outputs() const = 0;

  // Fills `out` with outputs().size() floats per row, row after row. Errors: kInvalidArgument
  // naming a column the header lacks, or a row's column and value that can't be parsed (a row
  // shorter than the header counts as missing fields); the ps's errors.
  virtual absl::Status Predict(const RawExamples& examples, PsConnection* ps,
                               std::vector<float>* out) const = 0;
};

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_SERVING_HEAD_H_
