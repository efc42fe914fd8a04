// Fashion-MNIST image classification with a dense MLP (784-256-128-10 by default; see
// models/dense_mlp.h): every weight matrix and bias is a ps variable ("mlp/w1" [784, 256] split
// over the ps tasks, "mlp/b1" [256], "mlp/w2", ...) trained by a server-side optimizer. A step
// pulls all the parameters (one Read request per ps task), runs forward and backward on its batch
// on the worker's replicas (ModelOptions::devices: one per GPU, or the CPU; the batch split across
// them and their gradients all-reduced), and pushes the dense gradients (one Update request per ps
// task).
// Pixels are scaled to [0, 1].
//
// Weight averaging: the steps of the last `average_epochs` epochs also add the weights they
// pulled into sums on the ps ("mlp/avg/w1", ... in the same Update request), and evaluation uses
// their mean: the tail average of the iterates (Polyak averaging, as SWA or Keras' use_ema). It
// smooths out the noise of a constant-rate Adam and of asynchronous (stale) gradients, so that
// several workers reach what one does.
//
// ModelOptions: data (the directory of the four IDX files, train-images-idx3-ubyte.gz,
// train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz; default
// data/fashion_mnist), epochs (default 10), batch_size (default 128), learning_rate (default by
// optimizer: adam 0.001, adagrad 0.05, momentum 0.01, sgd 0.1; lr_schedule relative to it),
// max_steps, seed (the shuffles and the initializers). embedding_dim is ignored. Extra:
//   optimizer            adam (default), adagrad, momentum (0.9), sgd
//   hidden               the hidden layers' widths, comma-separated (default "256,128"; empty:
//                        none, i.e. softmax regression)
//   shards               shards per weight matrix (default 0: one per ps task); biases are one
//                        shard each
//   average_epochs       epochs at the end whose weights are averaged for evaluation (default 3;
//                        fractions allowed; 0: evaluate the trained weights)
//   train_eval_examples  training examples (the first ones) that train_accuracy is measured on
//                        (default 10000; 0: none)
//
// Every weight is dense: a worker's steps take turns from the pull to the push
// (ModelOptions::dense_turns, default 1, as a TF worker runs one step at a time). More turns hide
// the ps round trips but train on staler weights, which costs accuracy with Adam.
//
// Metrics: test_accuracy, test_loss, and train_accuracy, train_loss on the training subset (with
// the averaged weights when averaging); with averaging also last_test_accuracy, last_test_loss
// (the trained weights as training ended). Notes give the layer widths, the parameter count, the
// example counts and the averaged steps.
//
// The coordinator side (this file's unit); the worker side is fashion_mnist_mlp_worker.h. What
// the two share with fashion_mnist_cnn: fashion_mnist.h (coordinator) and fashion_mnist_worker.h
// (worker).
#ifndef PSTRAIN_MODELS_FASHION_MNIST_MLP_H_
#define PSTRAIN_MODELS_FASHION_MNIST_MLP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/model.h"

namespace pstrain {

inline constexpr char kFashionMnistMlpModel[] = "fashion_mnist_mlp";

// The coordinator side. Errors: kInvalidArgument for bad options (naming them).
absl::StatusOr<std::unique_ptr<Model>> CreateFashionMnistMlp(const ModelOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_MODELS_FASHION_MNIST_MLP_H_
