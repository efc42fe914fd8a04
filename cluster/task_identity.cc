#include "cluster/task_identity.h"

#include <unistd.h>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace pstrain {

TaskIdentity TaskIdentity::New(std::string type, int index, std::string address) {
  TaskIdentity id;
  id.type = std::move(type);
  id.index = index;
  id.address = std::move(address);
  absl::BitGen gen;
  do {
    id.incarnation = absl::Uniform<uint64_t>(gen);
  } while (id.incarnation == 0);
  id.start_time_unix_micros = absl::ToUnixMicros(absl::Now());
  return id;
}

int TaskIdentity::port() const {
  const size_t colon = address.rfind(':');
  int value = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &value)) return 0;
  return value;
}

void TaskIdentity::ToHealthResponse(HealthResponse* response) const {
  response->mutable_task()->set_type(type);
  response->mutable_task()->set_index(index);
  response->set_incarnation(incarnation);
  response->set_address(address);
  response->set_start_time_unix_micros(start_time_unix_micros);
  response->set_pid(static_cast<int32_t>(::getpid()));
  response->set_data_port(data_port);
}

std::string TaskIdentity::DebugString() const {
  return absl::StrFormat("%s:%d at %s (incarnation %016x)", type, index, address, incarnation);
}

}  // namespace pstrain
