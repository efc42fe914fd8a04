// A PsClient over an exported model (serving/model_store.h), so that the models' own lookup code
// (handles found through a PsConnection, LookupBatch) reads an exported model as it reads the ps
// tasks: every variable is one shard (a fixed one named as the variable, a table "<name>/part_0"
// of one shard); lookups are evaluation lookups (a table's absent key reads its default row;
// `insert` is ignored); reads return dense and fixed variables' rows. Everything that would change
// the model (create, update, restore) is FAILED_PRECONDITION: the store is read-only.
#ifndef PSTRAIN_SERVING_STORE_PS_CLIENT_H_
#define PSTRAIN_SERVING_STORE_PS_CLIENT_H_

#include <memory>

#include "ps/ps_client.h"
#include "serving/model_store.h"

namespace pstrain {

// `store` must outlive the client. Calls complete on the caller's thread, before returning.
std::unique_ptr<PsClient> NewStorePsClient(const ModelStore* store);

}  // namespace pstrain

#endif  // PSTRAIN_SERVING_STORE_PS_CLIENT_H_
