// The coordinator side that fashion_mnist_mlp and fashion_mnist_cnn share: the options both read,
// and the Model that drives either (fashion_mnist_worker.h is the worker side). Setup reads only
// the labels and the test images (the counts, the image size, the classes), builds the model's
// network from them, creates the weights (and, for weight averaging, their sums and the count of
// steps they hold) on the ps tasks, and the per-worker dataset; a step is one "<model>/train"
// closure; validation and evaluation schedule "<model>/eval" over chunks of a split.
//
// Weight averaging: the steps of the last `average_epochs` epochs also add the weights they
// pulled into sums on the ps, and evaluation uses their mean: the tail average of the iterates
// (Polyak averaging, as SWA or Keras' use_ema), which smooths out the noise of the optimizer and
// of asynchronous (stale) gradients.
//
// A model brings its defaults and names (FashionMnistModelDef) and its network
// (FashionNetLayout); fashion_mnist_mlp.h and fashion_mnist_cnn.h list each one's options.
//
// The functions are stateless; the Model is driven by one thread (as the trainer does).
#ifndef PSTRAIN_MODELS_FASHION_MNIST_H_
#define PSTRAIN_MODELS_FASHION_MNIST_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "coordinator/variable_creator.h"
#include "models/batches.h"
#include "models/devices.h"
#include "models/fashion_mnist_worker.h"
#include "models/lr_schedule.h"
#include "models/model.h"

namespace pstrain {

// An optimizer a model offers, and its default learning rate.
struct FashionMnistOptimizer {
  const char* name = "";  // as the "optimizer" option names it
  OptimizerDef::Kind kind = OptimizerDef::SGD;
  double default_learning_rate = 0;
};

// What tells the two models apart, their networks aside.
struct FashionMnistModelDef {
  // The model's name ("fashion_mnist_mlp"), which its errors start with.
  const char* name = "";
  // Its closures, dataset and variables (fashion_mnist_worker.h).
  FashionMnistNames names;
  // The note that shows the network in the metrics ("layers", "network").
  const char* network_note = "";
  // Its defaults.
  int epochs = 0;
  int64_t batch_size = 0;
  // The optimizers it offers: the first is the default, and errors list them in this order.
  std::vector<FashionMnistOptimizer> optimizers;
};

// The options both models read: ModelOptions and the shared extra options (defaults in brackets,
// where the model doesn't set its own).
struct FashionMnistConfig {
  // The directory of the four IDX files [data/fashion_mnist].
  std::string data_dir = "data/fashion_mnist";
  // Passes over the training examples [the model's], and a cap on the steps [0: none].
  int epochs = 0;
  int64_t max_steps = 0;
  // Examples per step [the model's].
  int64_t batch_size = 0;
  // The optimizer [the model's first] and its learning rate [its default], relative to which
  // lr_schedule runs [constant].
  OptimizerDef::Kind optimizer = OptimizerDef::SGD;
  double learning_rate = 0;
  RelativeSchedule lr_schedule;
  // Shards of the large weight matrix [0: one per ps task].
  int64_t shards = 0;
  // Training examples (the first) that train_accuracy is measured on [10000; 0: none].
  int64_t train_eval_examples = 10000;
  // Training steps of one worker between their pull and push at once (ModelOptions::dense_turns)
  // [1; 0: no limit].
  int64_t dense_turns = 1;
  // Epochs at the end whose weights are averaged for evaluation [3; 0: none].
  double average_epochs = 3;
  // The fraction of the training examples held out for validation [0.1, rounded to float as the
  // workers get it], or the directory whose training files are the validation examples [""].
  double validation_fraction = 0.1;
  std::string validation_dir;
  // Seeds the split, the shuffles and the initializers [1].
  uint64_t seed = 1;
  // Where the workers compute [auto].
  WorkerDevices devices;
};

// Reads the shared options from `options` and the extra options "optimizer", "shards",
// "train_eval_examples" and "average_epochs" from `extra`, then checks that
// `extra` holds no other (read the model's own first). Errors: kInvalidArgument naming the
// option (an unknown one, a number that doesn't parse, an unknown optimizer, a validation
// fraction outside [0, 1)), starting with the model's name.
absl::StatusOr<FashionMnistConfig> ReadFashionMnistConfig(const FashionMnistModelDef& def,
                                                          const ModelOptions& options,
                                                          ExtraOptions* extra);

// Checks the shared numbers read: shards, train_eval_examples, dense_turns and
// average_epochs must be >= 0. Errors: kInvalidArgument naming the option.
absl::Status CheckFashionMnistConfig(const FashionMnistModelDef& def,
                                     const FashionMnistConfig& config);

// The network as the coordinator sees it: its parameter count and its variables. Immutable.
class FashionNetLayout {
 public:
  virtual ~FashionNetLayout() = default;

  // Floats in the parameter buffer.
  virtual int64_t num_params() const = 0;
  // For the metrics' notes: "784-256-128-10", "conv32x3x3-pool2-64-10 on 28x28x1".
  virtual std::string ToString() const = 0;
  // The variables named with `prefix` (FashionMnistNames::weights or averages), in the order to
  // create them. `trained`: the weights, initialized from `seed` and trained by `optimizer`; else
  // their sums (zeros, no optimizer). The large matrix is split into `shards`.
  virtual std::vector<VariableSpec> Variables(const std::string& prefix, bool trained,
                                              const OptimizerDef& optimizer, int shards,
                                              uint64_t seed) const = 0;
  // The dataset's network arguments (after the shared ones: the model's FashionNetFactory reads
  // them back on each worker).
  virtual std::vector<Tensor> DatasetArgs() const = 0;
};

// The network for images of `height` x `width` (one channel) and `classes` classes, from the
// model's own options. Errors: kInvalidArgument (a network that can't take such images).
using BuildFashionNetLayout = std::function<absl::StatusOr<std::unique_ptr<FashionNetLayout>>(
    int64_t height, int64_t width, int64_t classes)>;

// The model (see the file comment). Metrics: test_accuracy, test_loss, and train_accuracy,
// train_loss on the first train_eval_examples (with the averaged weights when averaging); with
// averaging also last_test_accuracy, last_test_loss (the trained weights as training ended).
// Validation: val_accuracy (the default to watch), val_loss.
std::unique_ptr<Model> NewFashionMnistModel(FashionMnistModelDef def, FashionMnistConfig config,
                                            BuildFashionNetLayout build_net);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FASHION_MNIST_H_
