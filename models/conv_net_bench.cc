// conv_net_bench: examples/s of one training step (forward and backward) and of evaluation of the
// seed CNN (models/conv_net.h, 28x28x1 -> conv 32 3x3 -> pool 2 -> 64 -> 10) on one CPU device
// without a pool, at several batch sizes: the compute a fashion_mnist_cnn step costs a worker,
// without the ps round trips. One JSON object per line.
//
//   bazel run -c opt //models:conv_net_bench [-- --seconds=2 --batches=32,128]
#include <algorithm>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "models/conv_net.h"

ABSL_FLAG(double, seconds, 1.0, "Timed seconds per measurement.");
ABSL_FLAG(std::vector<std::string>, batches, std::vector<std::string>({"32", "64", "128"}),
          "Batch sizes.");

namespace pstrain {
namespace {

int Main() {
  auto device = CreateCpuDevice();
  if (!device.ok()) {
    std::cerr << device.status() << std::endl;
    return 1;
  }
  auto net = ConvNet::Create(ConvNetShape{});
  if (!net.ok()) {
    std::cerr << net.status() << std::endl;
    return 1;
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  std::vector<float> params(net->num_params()), grads(net->num_params());
  for (float& p : params) p = dist(rng);
  for (const std::string& text : absl::GetFlag(FLAGS_batches)) {
    int64_t batch = 0;
    if (!absl::SimpleAtoi(text, &batch) || batch < 1) {
      std::cerr << "--batches: \"" << text << "\" is not a positive integer" << std::endl;
      return 1;
    }
    std::vector<float> x(batch * net->inputs());
    for (float& v : x) v = dist(rng) + 0.5f;
    std::vector<int32_t> labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>(i % 10);
    for (const bool train : {true, false}) {
      const absl::Duration timed = absl::Seconds(absl::GetFlag(FLAGS_seconds));
      int64_t steps = 0;
      absl::Duration best = absl::InfiniteDuration();
      const absl::Time start = absl::Now();
      absl::Time now = start;
      while (now - start < timed) {
        const absl::Time before = now;
        absl::Status s = train ? net->ForwardBackward(device->get(), params.data(), batch,
                                                      x.data(), labels.data(), grads.data())
                                     .status()
                               : net->Evaluate(device->get(), params.data(), batch, x.data(),
                                               labels.data())
                                     .status();
        if (!s.ok()) {
          std::cerr << s << std::endl;
          return 1;
        }
        now = absl::Now();
        best = std::min(best, now - before);
        ++steps;
      }
      const double seconds = absl::ToDoubleSeconds(now - start);
      std::cout << "{\"name\": \"conv_net." << (train ? "train_step" : "evaluate") << ".batch"
                << batch << "\", \"value\": " << steps * batch / seconds
                << ", \"best\": " << batch / absl::ToDoubleSeconds(best)
                << ", \"unit\": \"examples/s\", \"step_ms_best\": "
                << absl::ToDoubleMilliseconds(best) << "}" << std::endl;
    }
  }
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
