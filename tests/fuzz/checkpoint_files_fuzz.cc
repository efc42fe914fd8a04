// The coordinator's checkpoint files (coordinator/checkpoint_files.h): a MANIFEST and a BEST marker
// from any bytes, as found in a checkpoint directory the job restores from.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "coordinator/checkpoint_files.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {

std::vector<std::string> FuzzSeeds() {
  EmptyFuzzDir();
  CheckpointManifest manifest;
  manifest.set_step(1234);
  manifest.set_format_version(1);
  manifest.add_variables()->set_name("emb");
  (*manifest.mutable_state())["trainer/epoch"] = "3";
  std::vector<std::string> seeds;
  const std::string dir = FuzzDir() + "/ckpt-1234";
  std::filesystem::create_directories(dir);
  if (WriteManifest(dir, manifest).ok()) {
    std::ifstream in(dir + "/" + kManifestFileName, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    seeds.push_back(FuzzInputBuilder().Byte(0).Bytes(bytes.str()).str());
  }
  seeds.push_back(FuzzInputBuilder().Byte(1).Bytes("ckpt-1234\nval_auc=0.81 at step 1234\n").str());
  EmptyFuzzDir();
  return seeds;
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::FuzzInput in(data, size);
  const bool best = in.TakeByte() & 1;
  const std::string bytes = in.TakeRest();
  const std::string name = best ? pstrain::kBestFileName : pstrain::kManifestFileName;
  pstrain::WriteFuzzFile(name, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (best) {
    (void)pstrain::ReadBestMarker(pstrain::FuzzDir());
  } else {
    absl::StatusOr<pstrain::CheckpointManifest> manifest =
        pstrain::ReadManifest(pstrain::FuzzDir());
    if (manifest.ok()) (void)manifest->DebugString();
  }
  return 0;
}
