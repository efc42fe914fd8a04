#include "models/fashion_mnist_cnn_worker.h"

#include <array>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/batches.h"
#include "ps/sharded_variable.h"

namespace pstrain {
namespace {

constexpr std::array<const char*, ConvNet::kNumParams> kParamNames = {
    "conv/kernel", "conv/bias", "dense1/kernel", "dense1/bias", "dense2/kernel", "dense2/bias"};

// The CNN under the shared closures: images as [n, height, width, channels].
class CnnNet final : public FashionNetOver<ConvNet> {
 public:
  explicit CnnNet(ConvNet net) : FashionNetOver(std::move(net)) {}

  Shape InputShape(int64_t n) const override {
    const ConvNetShape& s = net().shape();
    return Shape{n, s.height, s.width, s.channels};
  }

  absl::Status CheckImages(const data::ImageSplit& split, const char* dataset) const override {
    const ConvNetShape& shape = net().shape();
    if (split.size() > 0 &&
        (split.images.rows != shape.height || split.images.cols != shape.width)) {
      return absl::InvalidArgumentError(
          absl::StrCat(dataset, ": images of ", split.images.rows, "x", split.images.cols,
                       " pixels, but the network takes ", shape.height, "x", shape.width));
    }
    return absl::OkStatus();
  }

  // In ConvNet::Param order.
  absl::StatusOr<std::vector<FlatVariable>> FindVariables(
      PsConnection* ps, const std::string& prefix) const override {
    std::vector<FlatVariable> vars;
    for (int p = 0; p < ConvNet::kNumParams; ++p) {
      const auto param = static_cast<ConvNet::Param>(p);
      const std::string name = CnnVariableName(prefix, param);
      ASSIGN_OR_RETURN(ShardedVariable v, ps->Variable(name));
      if (v.shape() != net().param_shape(param) || v.dtype() != DT_FLOAT32) {
        return absl::FailedPreconditionError(absl::StrCat(
            name, " on the ps has shape [", absl::StrJoin(v.shape(), ","), "], expected float32 [",
            absl::StrJoin(net().param_shape(param), ","), "] for the network ", net().ToString()));
      }
      vars.push_back({std::move(v), net().param_offset(param)});
    }
    return vars;
  }
};

// The network from its shape, the dataset's arguments from kFashionMnistNetArgs on (exactly 8).
absl::StatusOr<std::unique_ptr<FashionNet>> MakeNet(absl::Span<const Tensor> args) {
  const char* const dataset = kFashionMnistCnnNames.data;
  constexpr size_t kShapeArgs = 8;
  if (args.size() != kFashionMnistNetArgs + kShapeArgs) {
    return absl::InvalidArgumentError(absl::StrCat(
        dataset, ": ", args.size(), " arguments, expected ", kFashionMnistNetArgs + kShapeArgs));
  }
  std::array<int64_t, kShapeArgs> dims;
  for (size_t i = 0; i < kShapeArgs; ++i) {
    ASSIGN_OR_RETURN(dims[i], IntArg(args, kFashionMnistNetArgs + i, dataset));
  }
  ConvNetShape shape;
  shape.height = dims[0];
  shape.width = dims[1];
  shape.channels = dims[2];
  shape.filters = dims[3];
  shape.kernel = dims[4];
  shape.pool = dims[5];
  shape.hidden = dims[6];
  shape.classes = dims[7];
  ASSIGN_OR_RETURN(ConvNet net, ConvNet::Create(shape));
  return std::unique_ptr<FashionNet>(new CnnNet(std::move(net)));
}

}  // namespace

std::string CnnVariableName(const std::string& prefix, ConvNet::Param p) {
  return absl::StrCat(prefix, kParamNames[p]);
}

absl::Status RegisterFashionMnistCnn(ClosureRegistry* registry,
                                     std::shared_ptr<ReplicaGroups> replica_groups) {
  return RegisterFashionMnistModel(kFashionMnistCnnNames, MakeNet, registry,
                                   std::move(replica_groups));
}

}  // namespace pstrain
