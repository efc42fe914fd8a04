// Test helper: what the tabular model's workers logged of the rows they trained (its row_log
// option: each worker appends the int64 ids of a trained batch's rows to <prefix>.worker<i>.<pid>).
// Test-only.
#ifndef PSTRAIN_TESTS_ROW_LOG_H_
#define PSTRAIN_TESTS_ROW_LOG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pstrain {

// The row ids logged under `dir`/`prefix`, with how many times each was trained; with
// `per_worker`, how many rows each worker logged (by the index in its files' names).
std::map<int64_t, int> LoggedRows(const std::string& dir, const std::string& prefix,
                                  std::vector<int64_t>* per_worker = nullptr);

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_ROW_LOG_H_
