#include "tests/row_log.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace pstrain {

std::map<int64_t, int> LoggedRows(const std::string& dir, const std::string& prefix,
                                  std::vector<int64_t>* per_worker) {
  std::map<int64_t, int> seen;
  const std::string start = prefix + ".worker";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(start, 0) != 0) continue;
    const size_t worker = static_cast<size_t>(std::atoi(name.c_str() + start.size()));
    if (per_worker != nullptr && per_worker->size() <= worker) per_worker->resize(worker + 1, 0);
    std::ifstream in(entry.path(), std::ios::binary);
    int64_t id = 0;
    while (in.read(reinterpret_cast<char*>(&id), sizeof(id))) {
      ++seen[id];
      if (per_worker != nullptr) ++(*per_worker)[worker];
    }
  }
  return seen;
}

}  // namespace pstrain
