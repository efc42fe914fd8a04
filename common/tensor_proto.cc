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
  // Compared in elements: the element count times the dtype's size may not fit in 64 bits.
  const int64_t elements = t.num_elements();
  const int64_t size = DTypeSize(t.dtype);
  const int64_t got = static_cast<int64_t>(proto.data().size());
  if (got % size != 0 || got / size != elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor of shape ", ShapeToString(t.shape), " and dtype ", DTypeName(t.dtype), " needs ",
        elements, " elements of ", size, " bytes, got ", got, " bytes"));
  }
  t.data = proto.data();
  return t;
}

}  // namespace pstrain
