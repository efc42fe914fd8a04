// fashion_mnist_cnn's worker side (the model: fashion_mnist_cnn.h): its names, and its network
// (ConvNet, models/conv_net.h) under the closures and dataset it shares with fashion_mnist_mlp
// (fashion_mnist_worker.h).
//
// Stateless functions.
#ifndef PSTRAIN_MODELS_FASHION_MNIST_CNN_WORKER_H_
#define PSTRAIN_MODELS_FASHION_MNIST_CNN_WORKER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "models/conv_net.h"
#include "models/devices.h"
#include "models/fashion_mnist_worker.h"
#include "worker/closure_registry.h"

namespace pstrain {

// Closures "fashion_mnist_cnn/train" and "fashion_mnist_cnn/eval", dataset
// "fashion_mnist_cnn/data"; the trained weights are "cnn/<param>" (CnnVariableName), their sums
// over the averaging window "cnn/avg/<param>", and "cnn/avg/count" counts the steps the sums hold.
inline constexpr FashionMnistNames kFashionMnistCnnNames = {"fashion_mnist_cnn/train",
                                                            "fashion_mnist_cnn/eval",
                                                            "fashion_mnist_cnn/data",
                                                            "cnn/",
                                                            "cnn/avg/",
                                                            "cnn/avg/count"};

// The variable of parameter `p` named with `prefix`: "<prefix>conv/kernel", "<prefix>conv/bias",
// "<prefix>dense1/kernel", "<prefix>dense1/bias", "<prefix>dense2/kernel", "<prefix>dense2/bias".
std::string CnnVariableName(const std::string& prefix, ConvNet::Param p);

// The worker side: the shared closures and dataset, whose network arguments are the network's
// height, width, channels, filters, kernel, pool, hidden units and classes (int64 each). Each
// worker reads the IDX files itself. `replica_groups`: not null; kept.
absl::Status RegisterFashionMnistCnn(ClosureRegistry* registry,
                                     std::shared_ptr<ReplicaGroups> replica_groups);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FASHION_MNIST_CNN_WORKER_H_
