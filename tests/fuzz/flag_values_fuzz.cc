// Flag values parsed from the command line: byte sizes (--memory_budget), learning-rate schedules
// (--lr_schedule), listen and spec addresses (host:port). The first byte picks the parser.
#include "common/byte_size.h"
#include "common/grpc_util.h"
#include "models/lr_schedule.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {

std::vector<std::string> FuzzSeeds() {
  return {
      std::string("\x00") + "20G",
      std::string("\x00") + "1536k",
      std::string("\x01") + "exponential:decay_steps=1000,decay_rate=0.96,staircase",
      std::string("\x01") + "piecewise:boundaries=100+200,scales=1+0.5+0.1",
      std::string("\x01") + "cosine:decay_steps=1000,alpha=0.1,warmup_steps=100",
      std::string("\x02") + "[::1]:2222",
      std::string("\x02") + "localhost:0",
  };
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::FuzzInput in(data, size);
  const uint8_t which = in.TakeByte();
  const std::string text = in.TakeRest();
  switch (which % 3) {
    case 0:
      (void)pstrain::ParseByteSize(text);
      break;
    case 1: {
      absl::StatusOr<pstrain::RelativeSchedule> schedule = pstrain::ParseLrSchedule(text);
      if (schedule.ok()) {
        pstrain::OptimizerDef optimizer;
        optimizer.set_learning_rate(0.01);
        pstrain::ApplyLrSchedule(*schedule, &optimizer);
      }
      break;
    }
    default: {
      std::string host;
      int port = 0;
      (void)pstrain::SplitHostPort(text, &host, &port);
    }
  }
  return 0;
}
