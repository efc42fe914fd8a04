// The worker side that fashion_mnist_mlp and fashion_mnist_cnn share: everything but the network.
// Each worker reads the four IDX files itself (models/data/image_splits.h), holds out the seeded
// validation split, and serves three names per model:
//
//   <model>/data    the dataset: the splits, the network, the batches and the slots that bound the
//                   worker's concurrent training steps (one shared, thread-safe resource)
//   <model>/train   one training step: pull every parameter (one Read request per ps task), forward
//                   and backward on the worker's replicas, push the gradients (and, in the
//                   averaging window, the pulled weights into their sums) in one Update request
//                   per ps task
//   <model>/eval    the loss sum and correct predictions of a range of a split, with the trained
//                   weights or their average
//
// A model brings its network (FashionNet, built on each worker from the dataset's network
// arguments) and its names (FashionMnistNames); fashion_mnist.h is the coordinator side.
//
// The functions here are stateless; a FashionNet is immutable and thread-safe.
#ifndef PSTRAIN_MODELS_FASHION_MNIST_WORKER_H_
#define PSTRAIN_MODELS_FASHION_MNIST_WORKER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "models/data/image_splits.h"
#include "models/devices.h"
#include "models/flat_params.h"
#include "worker/closure_registry.h"
#include "worker/device/replicas.h"
#include "worker/ps_connection.h"

namespace pstrain {

// One model's names: of its closures and dataset, and of its ps variables.
struct FashionMnistNames {
  const char* train = nullptr;  // the training closure, "<model>/train"
  const char* eval = nullptr;   // the evaluation closure, "<model>/eval"
  const char* data = nullptr;   // the dataset, "<model>/data"
  // The prefixes of the trained weights ("mlp/") and of their sums over the averaging window
  // ("mlp/avg/"), and the variable counting the steps the sums hold (float32 [1], "mlp/avg/count").
  const char* weights = nullptr;
  const char* averages = nullptr;
  const char* average_count = nullptr;
};

// What an evaluation of the network sums over a batch.
struct FashionEvalSums {
  double loss_sum = 0;  // the cross-entropy's sum over the examples
  int64_t correct = 0;  // examples whose largest logit is their label's
};

// A network as the shared closures run it: its parameters (and gradients) are one flat float
// buffer, whose ranges are ps variables. fashion_mnist_mlp_worker.cc (DenseMlp) and
// fashion_mnist_cnn_worker.cc (ConvNet) implement it. Immutable; thread-safe.
class FashionNet {
 public:
  virtual ~FashionNet() = default;

  // Floats in the parameter (and gradient) buffer.
  virtual int64_t num_params() const = 0;
  virtual int64_t classes() const = 0;
  // The shape of `n` images as the dataset's elements hold them: [n, pixels], or [n, height,
  // width, channels].
  virtual Shape InputShape(int64_t n) const = 0;
  // OK when `split`'s images have the size the network takes, else kInvalidArgument starting with
  // `dataset` (the dataset's name). An empty split fits.
  virtual absl::Status CheckImages(const data::ImageSplit& split, const char* dataset) const = 0;
  // The network's variables named with `prefix` (FashionMnistNames::weights or averages), each
  // with its place in the buffer, checked against the network's shapes. Errors: kNotFound (not
  // created), kFailedPrecondition (created with other shapes).
  virtual absl::StatusOr<std::vector<FlatVariable>> FindVariables(
      PsConnection* ps, const std::string& prefix) const = 0;

  // The batch's mean loss, and its gradient into `grads` (num_params() floats), on `replicas`;
  // every pointer is host memory. Errors: the network's.
  virtual absl::StatusOr<float> ForwardBackward(ReplicaGroup* replicas, const float* params,
                                                int64_t batch, const float* x,
                                                const int32_t* labels, float* grads) const = 0;
  // The batch's loss sum and correct count (forward only). Errors: the network's.
  virtual absl::StatusOr<FashionEvalSums> Evaluate(ReplicaGroup* replicas, const float* params,
                                                   int64_t batch, const float* x,
                                                   const int32_t* labels) const = 0;
};

// The part of a FashionNet that a network with DenseMlp's and ConvNet's interface gives as it is:
// its sizes and its compute on a replica group (`Net::Evaluate` returning loss_sum and correct).
template <typename Net>
class FashionNetOver : public FashionNet {
 public:
  explicit FashionNetOver(Net net) : net_(std::move(net)) {}

  int64_t num_params() const override { return net_.num_params(); }
  int64_t classes() const override { return net_.classes(); }
  absl::StatusOr<float> ForwardBackward(ReplicaGroup* replicas, const float* params, int64_t batch,
                                        const float* x, const int32_t* labels,
                                        float* grads) const override {
    return net_.ForwardBackward(replicas, params, batch, x, labels, grads);
  }
  absl::StatusOr<FashionEvalSums> Evaluate(ReplicaGroup* replicas, const float* params,
                                           int64_t batch, const float* x,
                                           const int32_t* labels) const override {
    auto sums = net_.Evaluate(replicas, params, batch, x, labels);
    if (!sums.ok()) return sums.status();
    return FashionEvalSums{sums->loss_sum, sums->correct};
  }

 protected:
  const Net& net() const { return net_; }

 private:
  const Net net_;
};

// The dataset's arguments, in order: the data directory (string), the seed, the batch size, the
// dense turns: training steps of one worker between their pull and push at once
// (worker/dense_turns.h; 0: no limit) (int64), the validation fraction (float),
// the validation directory (string; "": hold out the fraction of the training examples), the
// devices (DeviceArgs, two int64); then the network's own, from kFashionMnistNetArgs on.
inline constexpr size_t kFashionMnistNetArgs = 8;

// The shared arguments (all but the network's), as the coordinator sends them.
std::vector<Tensor> FashionMnistDataArgs(const std::string& data_dir, uint64_t seed,
                                         int64_t batch_size, int64_t dense_turns,
                                         float validation_fraction,
                                         const std::string& validation_dir,
                                         const WorkerDevices& devices);

// A model's network from all its dataset's arguments (the network's start at
// kFashionMnistNetArgs). Errors: kInvalidArgument naming the dataset.
using FashionNetFactory =
    std::function<absl::StatusOr<std::unique_ptr<FashionNet>>(absl::Span<const Tensor> args)>;

// Registers the model's two closures and its dataset: the dataset reads the data, builds the
// network with `make_net` and takes its replica group from `replica_groups` (not null; kept).
// Errors: the registry's (kAlreadyExists for a name taken).
absl::Status RegisterFashionMnistModel(const FashionMnistNames& names, FashionNetFactory make_net,
                                       ClosureRegistry* registry,
                                       std::shared_ptr<ReplicaGroups> replica_groups);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FASHION_MNIST_WORKER_H_
