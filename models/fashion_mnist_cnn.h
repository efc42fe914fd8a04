// Fashion-MNIST image classification with the seeds' CNN (models/conv_net.h):
//
//   Conv2D(32, 3x3, relu) -> MaxPooling2D(2x2) -> Flatten -> Dense(64, relu) -> Dense(10),
//   softmax cross-entropy
//
// under the asynchronous parameter-server strategy, as fashion_mnist_mlp runs: every kernel and
// bias is a ps variable ("cnn/conv/kernel" [3, 3, 1, 32], "cnn/conv/bias" [32],
// "cnn/dense1/kernel" [5408, 64] split over the ps tasks, "cnn/dense1/bias" [64],
// "cnn/dense2/kernel" [64, 10], "cnn/dense2/bias" [10]; Glorot-uniform kernels, zero biases, as
// Keras initializes them) trained by a server-side optimizer. A step pulls all the parameters (one
// Read request per ps task), runs forward and backward on its batch on the worker's replicas
// (ModelOptions::devices: one per GPU, or the CPU; the batch split across them and their gradients
// all-reduced), and pushes the gradients (one Update request per ps task). Pixels are scaled to
// [0, 1]; the data, the validation split and the batches are fashion_mnist_mlp's (the same seed
// holds out the same examples).
//
// Weight averaging, as fashion_mnist_mlp: the steps of the last `average_epochs` epochs also add
// the weights they pulled into sums on the ps ("cnn/avg/..." and "cnn/avg/count"), and validation
// and evaluation use their mean (the tail average of the iterates), which smooths out the noise of
// SGD and of stale asynchronous gradients.
//
// ModelOptions: data (the directory of the four IDX files, train-images-idx3-ubyte.gz,
// train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz; default
// data/fashion_mnist), epochs (default 12), batch_size (default 32), learning_rate (default by
// optimizer: sgd 0.05, momentum 0.01, adam 0.001, adagrad 0.05; lr_schedule relative to it),
// max_steps, seed (the split, the shuffles and the initializers), devices. embedding_dim is
// ignored. Extra:
//   optimizer            sgd (default), momentum (0.9), adam, adagrad
//   filters              the convolution's output channels (default 32)
//   kernel               its window, kernel x kernel (default 3)
//   pool                 the max pooling's window and stride (default 2)
//   hidden               units of the hidden dense layer (default 64)
//   shards               shards of the dense kernel (default 0: one per ps task); the others are
//                        one shard each
//   average_epochs       epochs at the end whose weights are averaged for evaluation (default 3;
//                        fractions allowed; 0: evaluate the trained weights)
//   train_eval_examples  training examples (the first ones) that train_accuracy is measured on
//                        (default 10000; 0: none)
//
// Every weight is dense: a worker's steps take turns from the pull to the push
// (ModelOptions::dense_turns, default 1).
//
// Metrics: test_accuracy, test_loss, and train_accuracy, train_loss on the training subset (with
// the averaged weights when averaging); with averaging also last_test_accuracy, last_test_loss
// (the trained weights as training ended). Validation: val_accuracy (watched by default), val_loss.
// Notes give the network, the parameter count, the example counts and the averaged steps.
//
// The coordinator side (this file's unit); the worker side is fashion_mnist_cnn_worker.h. What
// the two share with fashion_mnist_mlp: fashion_mnist.h (coordinator) and fashion_mnist_worker.h
// (worker).
#ifndef PSTRAIN_MODELS_FASHION_MNIST_CNN_H_
#define PSTRAIN_MODELS_FASHION_MNIST_CNN_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/model.h"

namespace pstrain {

inline constexpr char kFashionMnistCnnModel[] = "fashion_mnist_cnn";

// The coordinator side. Errors: kInvalidArgument for bad options (naming them).
absl::StatusOr<std::unique_ptr<Model>> CreateFashionMnistCnn(const ModelOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FASHION_MNIST_CNN_H_
