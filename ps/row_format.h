// Rows stored in fewer bits than float32 (DynamicTableDef.row_format / slot_format): the bytes of
// a stored row and the conversions to and from float32. Everything that computes (lookups, the
// optimizer, checkpoints) sees float32; a row is converted when read and rounded when stored.
//
//   FLOAT32   4 bytes per element, as is.
//   FLOAT16   2 bytes: IEEE half (11 significant bits, |x| <= 65504; larger values are stored as
//             +-65504, never as infinity; values under 2^-24 round to zero or 2^-24).
//   BFLOAT16  2 bytes: float32's top half (8 significant bits, float32's range).
//   INT8      8 + 1 bytes: the row's least and greatest values (a float each), then one byte per
//             element, q in [0, 255] standing for least + (greatest - least) * q / 255. The
//             least and greatest elements are stored exactly.
//
// Each stored row takes RowBytes(format, dim), a multiple of 4 (so that the next row, in any
// format, starts aligned).
//
// Rounding: to nearest (EncodeRow without RoundingBits; ties away from zero) where a value is set
// (initial rows, assignments, restores), stochastically (with RoundingBits: 16 random bits per
// element) where a value is updated (the optimizer, assign-adds): rounded up with probability
// equal to the fraction of a step it lies above the lower neighbour, so that on average a row moves
// by the update even when the update is smaller than half a step (in 16 bits, an Adagrad step of
// 1e-4 on a weight of 0.5 is under a quarter of bfloat16's step there, and rounding to nearest
// would drop every one of them). A value already on a step (within 1/1000 of one, in INT8) is
// stored as it is, so converting a stored row to float32 and storing it again gives the same row:
// checkpoints hold float32 rows and restore them exactly. (In INT8 that holds while a row's range
// is more than about 1% of its largest magnitude: below that, float32 itself can't place the 256
// steps within 1/1000 of a step.) Non-finite values: NaN stays NaN (in INT8, the whole row reads
// NaN); infinities are stored as the format's largest finite value (FLOAT16, BFLOAT16) or make the
// row NaN (INT8).
//
// Thread safety: the functions are thread-safe; a RoundingBits is one thread's.
#ifndef PSTRAIN_PS_ROW_FORMAT_H_
#define PSTRAIN_PS_ROW_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/ps_service.pb.h"

namespace pstrain {

// Bytes of one stored row of `dim` elements (a multiple of 4).
int64_t RowBytes(RowFormat format, int64_t dim);
// The format a table of width `dim` asked to store `asked` gets from the coordinator: INT8's
// 8 bytes of range per row make rows of 10 or fewer elements no smaller than BFLOAT16's, which
// are also finer (8 significant bits per element rather than 8 bits over the row's range), so
// those get BFLOAT16. (A DynamicTableDef given to a ps directly is taken as it is.)
RowFormat StoredFormatFor(RowFormat asked, int64_t dim);
// "float32", "float16", "bfloat16", "int8".
const char* RowFormatName(RowFormat format);
// The reverse of RowFormatName. Errors: kInvalidArgument listing the names.
absl::Status ParseRowFormat(const std::string& name, RowFormat* format);
// The formats an optimizer's slots may be stored in: FLOAT32, FLOAT16, BFLOAT16 (not INT8: an
// accumulator's row has no useful common range).
bool IsSlotFormat(RowFormat format);
// ParseRowFormat for slots. Errors: kInvalidArgument listing the slots' names.
absl::Status ParseSlotFormat(const std::string& name, RowFormat* format);

// Random bits for stochastic rounding (splitmix64; not for anything secret).
class RoundingBits {
 public:
  explicit RoundingBits(uint64_t seed) : state_(seed) {}
  uint64_t Next64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Stores `dim` floats as a row of `format` at `out` (RowBytes(format, dim) bytes, any alignment):
// to nearest with `bits` null, stochastically with it.
void EncodeRow(RowFormat format, const float* row, int64_t dim, char* out, RoundingBits* bits);
// The `dim` floats a stored row stands for, written at `out_floats`. Neither the stored row nor
// the output need be aligned (a reply's buffer, a value read from disk).
void DecodeRow(RowFormat format, const char* stored, int64_t dim, void* out_floats);

// One element's conversions (FLOAT16, BFLOAT16), for tests and tools.
uint16_t FloatToHalf(float x, uint32_t random13);  // random13: 13 bits, or 0x1000 for nearest
float HalfToFloat(uint16_t h);
uint16_t FloatToBfloat16(float x, uint32_t random16);  // random16: 16 bits, or 0x8000 for nearest
float Bfloat16ToFloat(uint16_t b);

}  // namespace pstrain

#endif  // PSTRAIN_PS_ROW_FORMAT_H_
