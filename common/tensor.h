// Element types and shapes of variables, and the little-endian byte layout tensors travel in.
#ifndef PSTRAIN_COMMON_TENSOR_H_
#define PSTRAIN_COMMON_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// Element types. Values match proto/tensor.proto's DataType.
enum class DType : int {
  kInvalid = 0,
  kFloat32 = 1,
  kInt64 = 2,
  kString = 3,  // partitioning arithmetic (bytes_per_string), and scalar string closure arguments
                // (a path, a column name); variables can't hold strings
};

// Bytes per element (0 for kString and kInvalid: strings have no fixed size).
int DTypeSize(DType dtype);
// "float32", "int64", "string".
std::string DTypeName(DType dtype);
// Parses "float32" (also "float"), "int64", "string". Errors: kInvalidArgument naming the text.
absl::StatusOr<DType> ParseDType(absl::string_view text);

// A tensor shape: dims[0] is the row axis (the one partitioners split).
using Shape = std::vector<int64_t>;

// Product of all dims (1 for a scalar).
int64_t NumElements(const Shape& shape);
// Elements per row: product of dims[1:] (1 for rank 0 or 1).
int64_t RowWidth(const Shape& shape);
// "[4,16]".
std::string ShapeToString(const Shape& shape);
// Parses "6,1" or "[6,1]". Errors: kInvalidArgument (empty part, negative or non-numeric dim).
absl::StatusOr<Shape> ParseShape(absl::string_view text);
// Every dim >= 0 and the element count fits in int64. Errors: kInvalidArgument naming `what`.
absl::Status ValidateShape(const Shape& shape, absl::string_view what);

template <typename T>
constexpr DType DTypeOf() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, int64_t>,
                "tensors hold float or int64_t");
  return std::is_same_v<T, float> ? DType::kFloat32 : DType::kInt64;
}

// A small dense tensor passed to and returned from closures: dtype, shape, and the elements as
// raw little-endian bytes, row-major. A value type; copying copies the bytes.
struct Tensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::string data;

  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, Shape shape) {
    Tensor t;
    t.dtype = DTypeOf<T>();
    t.shape = std::move(shape);
    if (!values.empty()) {
      t.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
    }
    return t;
  }
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values) {
    return FromVector(values, Shape{static_cast<int64_t>(values.size())});
  }
  template <typename T>
  static Tensor Scalar(T value) {
    return FromVector(std::vector<T>{value}, Shape{});
  }

  // A scalar string (shape [], the bytes as they are): for closure and dataset arguments.
  static Tensor String(std::string value) {
    Tensor t;
    t.dtype = DType::kString;
    t.data = std::move(value);
    return t;
  }
  bool IsString() const { return dtype == DType::kString && shape.empty(); }

  int64_t num_elements() const { return NumElements(shape); }
  // The elements as T (which must match dtype; see CheckType).
  template <typename T>
  std::vector<T> ToVector() const {
    std::vector<T> v(data.size() / sizeof(T));
    // (An empty vector's data() may be null, which memcpy must not be given even for 0 bytes.)
    if (!v.empty()) std::memcpy(v.data(), data.data(), v.size() * sizeof(T));
    return v;
  }
  template <typename T>
  T scalar() const {
    T v{};
    if (data.size() >= sizeof(T)) std::memcpy(&v, data.data(), sizeof(T));
    return v;
  }
  // Whether dtype is DTypeOf<T>() and data holds exactly num_elements() of them.
  template <typename T>
  bool Is() const {
    return dtype == DTypeOf<T>() && data.size() == static_cast<size_t>(num_elements()) * sizeof(T);
  }
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TENSOR_H_
