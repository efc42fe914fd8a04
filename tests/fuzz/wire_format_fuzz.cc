// The ps's hand-written wire-format parsing: UpdateRequest read in place from gRPC's received
// slices (ps/update_view.h over common/wire_reader.h), on any bytes cut into any pieces. A message
// protobuf's own parser accepts must parse here to the same ops, and the reverse.
#include "ps/update_view.h"
#include "proto/ps_service.pb.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {

std::vector<std::string> FuzzSeeds() {
  UpdateRequest request;
  request.set_step(42);
  UpdateOp* sparse = request.add_ops();
  sparse->set_shard("emb/part_0");
  sparse->set_kind(UpdateOp::APPLY_GRADIENT);
  sparse->set_dtype(DT_FLOAT32);
  const int64_t ids[] = {3, 1, 3};
  sparse->set_ids(std::string(reinterpret_cast<const char*>(ids), sizeof(ids)));
  sparse->set_values(std::string(3 * 4 * sizeof(float), '\x01'));
  UpdateOp* dense = request.add_ops();
  dense->set_shard("w");
  dense->set_kind(UpdateOp::ASSIGN);
  dense->set_dtype(DT_FLOAT32);
  dense->mutable_range()->set_row_begin(0);
  dense->mutable_range()->set_row_end(2);
  dense->set_values(std::string(2 * 8 * sizeof(float), '\x02'));
  const std::string bytes = request.SerializeAsString();
  return {
      FuzzInputBuilder().Byte(0).Bytes(bytes).str(),
      FuzzInputBuilder().Byte(3).Byte(5).Byte(40).Byte(90).Bytes(bytes).str(),
  };
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::FuzzInput in(data, size);
  // Up to 7 cut points, then the message; it is cut into pieces there (as gRPC's slices).
  const int cuts = in.TakeByte() & 7;
  std::vector<size_t> at;
  for (int i = 0; i < cuts; ++i) at.push_back(in.TakeByte());
  const std::string message = in.TakeRest();
  std::vector<absl::string_view> pieces;
  size_t from = 0;
  for (size_t a : at) {
    size_t to = std::min(message.size(), from + a);
    pieces.emplace_back(message.data() + from, to - from);
    from = to;
  }
  pieces.emplace_back(message.data() + from, message.size() - from);

  std::vector<pstrain::UpdateOpView> ops;
  int64_t step = 0;
  const absl::Status parsed = pstrain::ParseUpdateRequest(pieces, &ops, &step);
  pstrain::UpdateRequest reference;
  const bool reference_ok = reference.ParseFromString(message);
  if (parsed.ok()) {
    for (const pstrain::UpdateOpView& op : ops) {
      size_t bytes = 0;
      for (absl::string_view v : op.values) bytes += v.size();
      if (static_cast<int64_t>(bytes) != op.values_bytes) __builtin_trap();
    }
  }
  // Both accept the same messages, with the same ops (protobuf also checks strings are UTF-8,
  // which the view does not need: shard names are looked up, never trusted as text).
  if (reference_ok && !parsed.ok()) __builtin_trap();
  if (reference_ok && parsed.ok()) {
    if (static_cast<int>(ops.size()) != reference.ops_size() || step != reference.step()) {
      __builtin_trap();
    }
    for (int i = 0; i < reference.ops_size(); ++i) {
      const pstrain::UpdateOp& want = reference.ops(i);
      const pstrain::UpdateOpView& got = ops[i];
      if (got.shard_name != want.shard() || got.kind != want.kind() ||
          got.ids != absl::string_view(want.ids()) ||
          got.values_bytes != static_cast<int64_t>(want.values().size())) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
