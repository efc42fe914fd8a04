#include "models/flat_params.h"

#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "ps/ps_client.h"

namespace pstrain {

absl::Status PullFlat(absl::Span<const FlatVariable> vars, float* params,
                      const DenseCache* cache) {
  // One request per ps; per op, where its bytes go and how many there must be.
  struct PerPs {
    PsClient* client = nullptr;
    ReadRequest request;
    ReadResponse response;
    std::vector<std::pair<char*, int64_t>> dests;
  };
  std::map<PsClient*, PerPs> per_ps;
  for (const FlatVariable& v : vars) {
    char* base = reinterpret_cast<char*>(params + v.offset);
    if (cache != nullptr && cache->Read(v.variable, base)) continue;
    for (const ShardLocation& s : v.variable.shards()) {
      PsClient* client = v.variable.ps(s.ps_task);
      PerPs& p = per_ps[client];
      p.client = client;
      p.request.add_ops()->set_shard(s.name);  // an empty range: the whole shard
      p.dests.emplace_back(base + s.row_offset * v.variable.row_bytes(),
                           s.num_rows * v.variable.row_bytes());
    }
  }
  std::vector<PerPs*> entries;
  for (auto& [client, p] : per_ps) entries.push_back(&p);
  RETURN_IF_ERROR(CallAll(static_cast<int>(entries.size()), [&](int i, PsClient::Done done) {
    entries[i]->client->ReadAsync(&entries[i]->request, &entries[i]->response, std::move(done));
  }));
  for (const PerPs* p : entries) {
    if (p->response.values_size() != p->request.ops_size()) {
      return absl::InternalError(absl::StrCat(p->client->name(), ": ", p->response.values_size(),
                                              " values for ", p->request.ops_size(), " reads"));
    }
    for (int k = 0; k < p->request.ops_size(); ++k) {
      const std::string& bytes = p->response.values(k);
      if (static_cast<int64_t>(bytes.size()) != p->dests[k].second) {
        return absl::InternalError(absl::StrCat(
            p->client->name(), ": shard \"", p->request.ops(k).shard(), "\" returned ",
            bytes.size(), " bytes, expected ", p->dests[k].second));
      }
      std::memcpy(p->dests[k].first, bytes.data(), bytes.size());
    }
  }
  return absl::OkStatus();
}

absl::Status AddFlatOps(absl::Span<const FlatVariable> vars, UpdateOp::Kind kind,
                        const float* values, UpdateBatch* update, DenseCache* cache) {
  for (const FlatVariable& v : vars) {
    const absl::string_view bytes(reinterpret_cast<const char*>(values + v.offset),
                                  v.variable.num_rows() * v.variable.row_bytes());
    RETURN_IF_ERROR(update->AddDense(v.variable, kind, bytes, cache));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
