// fashion_mnist_mlp's worker side (the model: fashion_mnist_mlp.h): its names, and its network
// (DenseMlp, models/dense_mlp.h) under the closures and dataset it shares with fashion_mnist_cnn
// (fashion_mnist_worker.h).
//
// Stateless functions.
#ifndef PSTRAIN_MODELS_FASHION_MNIST_MLP_WORKER_H_
#define PSTRAIN_MODELS_FASHION_MNIST_MLP_WORKER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "models/devices.h"
#include "models/fashion_mnist_worker.h"
#include "worker/closure_registry.h"

namespace pstrain {

// Closures "fashion_mnist_mlp/train" and "fashion_mnist_mlp/eval", dataset
// "fashion_mnist_mlp/data"; the trained weights are "mlp/w{l+1}", "mlp/b{l+1}" for layer l
// (0-based), their sums over the averaging window "mlp/avg/w{l+1}", "mlp/avg/b{l+1}", and
// "mlp/avg/count" counts the steps the sums hold.
inline constexpr FashionMnistNames kFashionMnistMlpNames = {"fashion_mnist_mlp/train",
                                                            "fashion_mnist_mlp/eval",
                                                            "fashion_mnist_mlp/data",
                                                            "mlp/",
                                                            "mlp/avg/",
                                                            "mlp/avg/count"};

// Layer l's weights "<prefix>w{l+1}" [fan_in, fan_out] and bias "<prefix>b{l+1}" [fan_out].
std::string MlpWeightName(const std::string& prefix, int l);
std::string MlpBiasName(const std::string& prefix, int l);

// The worker side: the shared closures and dataset, whose network arguments are the network's
// widths (int64 each: inputs, the hidden layers', classes). Each worker reads the IDX files
// itself. `replica_groups`: not null; kept.
absl::Status RegisterFashionMnistMlp(ClosureRegistry* registry,
                                     std::shared_ptr<ReplicaGroups> replica_groups);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FASHION_MNIST_MLP_WORKER_H_
