#include "models/fashion_mnist_cnn.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/conv_net.h"
#include "models/fashion_mnist.h"
#include "models/fashion_mnist_cnn_worker.h"

namespace pstrain {
namespace {

// The CNN's variables and dataset arguments.
class CnnLayout final : public FashionNetLayout {
 public:
  explicit CnnLayout(ConvNet net) : net_(std::move(net)) {}

  int64_t num_params() const override { return net_.num_params(); }
  std::string ToString() const override { return net_.ToString(); }

  // In ConvNet::Param order: the kernels Glorot uniform, the biases zeros, as Keras initializes
  // them; the dense kernel, the one large matrix, split into `shards`.
  std::vector<VariableSpec> Variables(const std::string& prefix, bool trained,
                                      const OptimizerDef& optimizer, int shards,
                                      uint64_t seed) const override {
    std::vector<VariableSpec> specs;
    for (int p = 0; p < ConvNet::kNumParams; ++p) {
      const auto param = static_cast<ConvNet::Param>(p);
      const std::vector<int64_t>& dims = net_.param_shape(param);
      VariableSpec v;
      v.name = CnnVariableName(prefix, param);
      v.shape = dims;
      if (param == ConvNet::kW1) {
        v.partitioner.kind = PartitionerKind::kFixed;
        v.partitioner.num_shards = shards;
      }
      if (trained) {
        if (dims.size() > 1) {
          // Glorot uniform (Keras' default for dense and convolution kernels): fan in and out
          // are the input and output units times the window (the leading dimensions).
          int64_t window = 1;
          for (size_t d = 0; d + 2 < dims.size(); ++d) window *= dims[d];
          const double fan_in = static_cast<double>(window * dims[dims.size() - 2]);
          const double fan_out = static_cast<double>(window * dims.back());
          const double limit = std::sqrt(6.0 / (fan_in + fan_out));
          v.initializer.set_kind(InitializerDef::UNIFORM);
          v.initializer.set_minval(-limit);
          v.initializer.set_maxval(limit);
          v.initializer.set_seed(seed * 1000 + p);
        }
        v.optimizer = optimizer;
      }
      specs.push_back(std::move(v));
    }
    return specs;
  }

  // Height, width, channels, filters, kernel, pool, hidden units, classes.
  std::vector<Tensor> DatasetArgs() const override {
    const ConvNetShape& s = net_.shape();
    std::vector<Tensor> args;
    for (int64_t v :
         {s.height, s.width, s.channels, s.filters, s.kernel, s.pool, s.hidden, s.classes}) {
      args.push_back(Tensor::Scalar<int64_t>(v));
    }
    return args;
  }

 private:
  const ConvNet net_;
};

FashionMnistModelDef CnnDef() {
  FashionMnistModelDef def;
  def.name = kFashionMnistCnnModel;
  def.names = kFashionMnistCnnNames;
  def.network_note = "network";
  def.epochs = 12;
  def.batch_size = 32;
  def.optimizers = {{"sgd", OptimizerDef::SGD, 0.05},
                    {"momentum", OptimizerDef::MOMENTUM, 0.01},
                    {"adam", OptimizerDef::ADAM, 0.001},
                    {"adagrad", OptimizerDef::ADAGRAD, 0.05}};
  return def;
}

// The network's own options: each in [1, 2^20]. Errors: kInvalidArgument naming the option.
absl::Status CheckShape(const ConvNetShape& shape) {
  struct Positive {
    const char* name;
    int64_t value;
  };
  for (const Positive& p : {Positive{"filters", shape.filters}, Positive{"kernel", shape.kernel},
                            Positive{"pool", shape.pool}, Positive{"hidden", shape.hidden}}) {
    if (p.value < 1 || p.value > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kFashionMnistCnnModel, ": ", p.name, "=", p.value, " must be in [1, 2^20]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateFashionMnistCnn(const ModelOptions& options) {
  const FashionMnistModelDef def = CnnDef();
  ExtraOptions extra(def.name, options.extra);
  ConvNetShape shape;  // height, width, channels and classes come from the data
  ASSIGN_OR_RETURN(shape.filters, extra.GetInt("filters", shape.filters));
  ASSIGN_OR_RETURN(shape.kernel, extra.GetInt("kernel", shape.kernel));
  ASSIGN_OR_RETURN(shape.pool, extra.GetInt("pool", shape.pool));
  ASSIGN_OR_RETURN(shape.hidden, extra.GetInt("hidden", shape.hidden));
  ASSIGN_OR_RETURN(FashionMnistConfig config, ReadFashionMnistConfig(def, options, &extra));
  RETURN_IF_ERROR(CheckShape(shape));
  RETURN_IF_ERROR(CheckFashionMnistConfig(def, config));
  auto build = [shape](int64_t height, int64_t width,
                       int64_t classes) -> absl::StatusOr<std::unique_ptr<FashionNetLayout>> {
    ConvNetShape s = shape;
    s.height = height;
    s.width = width;
    s.channels = 1;
    s.classes = classes;
    ASSIGN_OR_RETURN(ConvNet net, ConvNet::Create(s));
    return std::unique_ptr<FashionNetLayout>(new CnnLayout(std::move(net)));
  };
  return NewFashionMnistModel(def, std::move(config), std::move(build));
}

}  // namespace pstrain
