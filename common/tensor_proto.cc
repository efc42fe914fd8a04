#include "common/tensor_proto.h"

#include "absl/strings/str_cat.h"

namespace pstrain {

void ToProto(const Tensor& tensor, TensorProto* proto) {
  proto->set_dtype(static_cast<DataType>(static_cast<int>(tensor.dtype)));
  proto->clear_shape();
  for (int64_t d : tensor.shape) proto->add_shape(d);
  proto->set_data(tensor.data);
}

absl::StatusOr<Tensor> FromProto(const TensorProto& proto) {
  Tensor t;
  if (proto.dtype() == DT_STRING) {
    if (proto.shape_size() != 0) {
      return absl::InvalidArgumentError("string tensors must be scalars");
    }
    return Tensor::String(proto.data());
  }
  if (proto.dtype() != DT_FLOAT32 && proto.dtype() != DT_INT64) {
    return absl::InvalidArgumentError(absl::StrCat("tensor dtype ", DataType_Name(proto.dtype()),
                                                   " is not float32, int64 or string"));
  }
  t.dtype = static_cast<DType>(static_cast<int>(proto.dtype()));
  t.shape.assign(proto.shape().begin(), proto.shape().end());
  absl::Status shape_ok = ValidateShape(t.shape, "tensor");
  if (!shape_ok.ok()) return shape_ok;
  const int64_t want = t.num_elements() * DTypeSize(t.dtype);
  if (static_cast<int64_t>(proto.data().size()) != want) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of shape ", ShapeToString(t.shape),
                                                   " and dtype ", DTypeName(t.dtype), " needs ",
                                                   want, " bytes, got ", proto.data().size()));
  }
  t.data = proto.data();
  return t;
}

}  // namespace pstrain
