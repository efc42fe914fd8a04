#include "models/fashion_mnist_mlp.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "models/dense_mlp.h"
#include "models/fashion_mnist.h"
#include "models/fashion_mnist_mlp_worker.h"

namespace pstrain {
namespace {

// The MLP's variables and dataset arguments.
class MlpLayout final : public FashionNetLayout {
 public:
  explicit MlpLayout(DenseMlp mlp) : mlp_(std::move(mlp)) {}

  int64_t num_params() const override { return mlp_.num_params(); }
  std::string ToString() const override { return mlp_.ToString(); }

  // Per layer, its weights (split into `shards`; Glorot uniform, Keras' default for dense
  // kernels) and its bias (zeros, one shard).
  std::vector<VariableSpec> Variables(const std::string& prefix, bool trained,
                                      const OptimizerDef& optimizer, int shards,
                                      uint64_t seed) const override {
    std::vector<VariableSpec> specs;
    for (int l = 0; l < mlp_.num_layers(); ++l) {
      const int64_t fan_in = mlp_.widths()[l], fan_out = mlp_.widths()[l + 1];
      VariableSpec w;
      w.name = MlpWeightName(prefix, l);
      w.shape = {fan_in, fan_out};
      w.partitioner.kind = PartitionerKind::kFixed;
      w.partitioner.num_shards = shards;
      if (trained) {
        const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
        w.initializer.set_kind(InitializerDef::UNIFORM);
        w.initializer.set_minval(-limit);
        w.initializer.set_maxval(limit);
        w.initializer.set_seed(seed * 1000 + l);
        w.optimizer = optimizer;
      }
      specs.push_back(std::move(w));
      VariableSpec b;
      b.name = MlpBiasName(prefix, l);
      b.shape = {fan_out};
      if (trained) b.optimizer = optimizer;
      specs.push_back(std::move(b));
    }
    return specs;
  }

  // The widths.
  std::vector<Tensor> DatasetArgs() const override {
    std::vector<Tensor> args;
    for (int64_t w : mlp_.widths()) args.push_back(Tensor::Scalar<int64_t>(w));
    return args;
  }

 private:
  const DenseMlp mlp_;
};

absl::StatusOr<std::vector<int64_t>> ParseHidden(const std::string& text) {
  std::vector<int64_t> widths;
  if (text.empty()) return widths;  // no hidden layer: softmax regression
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t w = 0;
    if (!absl::SimpleAtoi(part, &w) || w < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(kFashionMnistMlpModel, ": hidden=", text, ": \"", part,
                       "\" is not a positive width (want comma-separated widths, e.g. 256,128)"));
    }
    widths.push_back(w);
  }
  return widths;
}

FashionMnistModelDef MlpDef() {
  FashionMnistModelDef def;
  def.name = kFashionMnistMlpModel;
  def.names = kFashionMnistMlpNames;
  def.network_note = "layers";
  def.epochs = 10;
  def.batch_size = 128;
  def.optimizers = {{"adam", OptimizerDef::ADAM, 0.001},
                    {"adagrad", OptimizerDef::ADAGRAD, 0.05},
                    {"momentum", OptimizerDef::MOMENTUM, 0.01},
                    {"sgd", OptimizerDef::SGD, 0.1}};
  return def;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateFashionMnistMlp(const ModelOptions& options) {
  const FashionMnistModelDef def = MlpDef();
  ExtraOptions extra(def.name, options.extra);
  ASSIGN_OR_RETURN(std::vector<int64_t> hidden, ParseHidden(extra.GetString("hidden", "256,128")));
  ASSIGN_OR_RETURN(FashionMnistConfig config, ReadFashionMnistConfig(def, options, &extra));
  RETURN_IF_ERROR(CheckFashionMnistConfig(def, config));
  // Inputs: the images' pixels; then the hidden layers; outputs: the classes.
  auto build = [hidden](int64_t height, int64_t width,
                        int64_t classes) -> absl::StatusOr<std::unique_ptr<FashionNetLayout>> {
    std::vector<int64_t> widths = {height * width};
    widths.insert(widths.end(), hidden.begin(), hidden.end());
    widths.push_back(classes);
    ASSIGN_OR_RETURN(DenseMlp mlp, DenseMlp::Create(widths));
    return std::unique_ptr<FashionNetLayout>(new MlpLayout(std::move(mlp)));
  };
  return NewFashionMnistModel(def, std::move(config), std::move(build));
}

}  // namespace pstrain
