// TensorBoard event files (trainer/event_writer.h): the reader on any bytes (a file a user points
// it at), and the writer's inputs (a metric's tag and value, as a spec's names make them), which
// must read back as written.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/fuzz/fuzz_target.h"
#include "trainer/event_writer.h"

namespace pstrain {

std::vector<std::string> FuzzSeeds() {
  EmptyFuzzDir();
  std::vector<std::string> seeds;
  {
    absl::StatusOr<std::unique_ptr<EventWriter>> writer = EventWriter::Create(FuzzDir());
    if (writer.ok()) {
      (void)(*writer)->WriteScalar("loss", 1, 0.5f);
      (void)(*writer)->WriteScalar("val_auc", 2, 0.75f);
      (void)(*writer)->Close();
      for (const auto& entry : std::filesystem::directory_iterator(FuzzDir())) {
        std::ifstream in(entry.path(), std::ios::binary);
        std::ostringstream bytes;
        bytes << in.rdbuf();
        seeds.push_back(FuzzInputBuilder().Byte(0).Bytes(bytes.str()).str());
      }
    }
  }
  seeds.push_back(FuzzInputBuilder().Byte(1).Bytes("\x01\x00\x00\x00train/loss").str());
  EmptyFuzzDir();
  return seeds;
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::FuzzInput in(data, size);
  const bool write = in.TakeByte() & 1;
  if (!write) {
    const std::string bytes = in.TakeRest();
    const std::string path = pstrain::WriteFuzzFile(
        "events.out.tfevents", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    (void)pstrain::ReadEventFile(path);
    return 0;
  }
  float value;
  const std::string value_bytes = in.TakeBytes(sizeof(value));
  if (value_bytes.size() != sizeof(value)) return 0;
  std::memcpy(&value, value_bytes.data(), sizeof(value));
  const std::string tag = in.TakeRest();
  pstrain::EmptyFuzzDir();
  absl::StatusOr<std::unique_ptr<pstrain::EventWriter>> writer =
      pstrain::EventWriter::Create(pstrain::FuzzDir());
  if (!writer.ok()) return 0;
  if (!(*writer)->WriteScalar(tag, 7, value).ok()) return 0;
  if (!(*writer)->Close().ok()) return 0;
  for (const auto& entry : std::filesystem::directory_iterator(pstrain::FuzzDir())) {
    absl::StatusOr<std::vector<tensorflow::Event>> events = pstrain::ReadEventFile(entry.path());
    if (!events.ok()) __builtin_trap();  // what the writer wrote must read back
    bool found = false;
    for (const tensorflow::Event& e : *events) {
      if (e.has_summary() && e.summary().value_size() == 1) {
        const auto& v = e.summary().value(0);
        const bool same = std::isnan(value) ? std::isnan(v.simple_value()) : v.simple_value() == value;
        if (v.tag() != tag || !same || e.step() != 7) __builtin_trap();
        found = true;
      }
    }
    if (!found) __builtin_trap();
  }
  return 0;
}
