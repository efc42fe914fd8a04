#include "models/fashion_mnist_mlp_worker.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "models/dense_mlp.h"
#include "ps/sharded_variable.h"

namespace pstrain {
namespace {

// The MLP under the shared closures: images flattened to [n, pixels].
class MlpNet final : public FashionNetOver<DenseMlp> {
 public:
  explicit MlpNet(DenseMlp mlp) : FashionNetOver(std::move(mlp)) {}

  Shape InputShape(int64_t n) const override { return Shape{n, net().inputs()}; }

  absl::Status CheckImages(const data::ImageSplit& split, const char* dataset) const override {
    if (split.size() > 0 && split.pixels() != net().inputs()) {
      return absl::InvalidArgumentError(absl::StrCat(dataset, ": images of ", split.pixels(),
                                                     " pixels, but the network takes ",
                                                     net().inputs(), " inputs"));
    }
    return absl::OkStatus();
  }

  // In buffer order (w1, b1, w2, b2, ...).
  absl::StatusOr<std::vector<FlatVariable>> FindVariables(
      PsConnection* ps, const std::string& prefix) const override {
    std::vector<FlatVariable> vars;
    for (int l = 0; l < net().num_layers(); ++l) {
      const int64_t fan_in = net().widths()[l], fan_out = net().widths()[l + 1];
      ASSIGN_OR_RETURN(ShardedVariable w, ps->Variable(MlpWeightName(prefix, l)));
      ASSIGN_OR_RETURN(ShardedVariable b, ps->Variable(MlpBiasName(prefix, l)));
      if (w.shape() != std::vector<int64_t>{fan_in, fan_out} ||
          b.shape() != std::vector<int64_t>{fan_out} || w.dtype() != DT_FLOAT32 ||
          b.dtype() != DT_FLOAT32) {
        return absl::FailedPreconditionError(
            absl::StrCat(MlpWeightName(prefix, l), " / ", MlpBiasName(prefix, l),
                         " on the ps have shapes [", absl::StrJoin(w.shape(), ","), "] / [",
                         absl::StrJoin(b.shape(), ","), "], expected float32 [", fan_in, ",",
                         fan_out, "] / [", fan_out, "] for the network ", net().ToString()));
      }
      vars.push_back({std::move(w), net().weight_offset(l)});
      vars.push_back({std::move(b), net().bias_offset(l)});
    }
    return vars;
  }
};

// The network from its widths, the dataset's arguments from kFashionMnistNetArgs on.
absl::StatusOr<std::unique_ptr<FashionNet>> MakeNet(absl::Span<const Tensor> args) {
  std::vector<int64_t> widths;
  for (size_t i = kFashionMnistNetArgs; i < args.size(); ++i) {
    ASSIGN_OR_RETURN(int64_t w, IntArg(args, i, kFashionMnistMlpNames.data));
    widths.push_back(w);
  }
  ASSIGN_OR_RETURN(DenseMlp mlp, DenseMlp::Create(widths));
  return std::unique_ptr<FashionNet>(new MlpNet(std::move(mlp)));
}

}  // namespace

std::string MlpWeightName(const std::string& prefix, int l) {
  return absl::StrCat(prefix, "w", l + 1);
}
std::string MlpBiasName(const std::string& prefix, int l) {
  return absl::StrCat(prefix, "b", l + 1);
}

absl::Status RegisterFashionMnistMlp(ClosureRegistry* registry,
                                     std::shared_ptr<ReplicaGroups> replica_groups) {
  return RegisterFashionMnistModel(kFashionMnistMlpNames, MakeNet, registry,
                                   std::move(replica_groups));
}

}  // namespace pstrain
