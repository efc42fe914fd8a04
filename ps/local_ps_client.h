// A PsClient for a ps task in the caller's own process: each call is served by the ps's handlers
// (the same parsing, validation and work as over gRPC or the data plane, counted in its metrics)
// in the calling thread, with no socket and no thread hand-off. The synchronous strategies' workers
// reach their own replica this way (a ps task in the worker's process: trainer/mirrored_strategy.h).
//
// Every call runs to its end, `done` included, before it returns; so calls made one after another
// are served in that order (ordered()). Thread-safe as the handlers are.
#ifndef PSTRAIN_PS_LOCAL_PS_CLIENT_H_
#define PSTRAIN_PS_LOCAL_PS_CLIENT_H_

#include <memory>
#include <string>

#include "common/raw_service.h"
#include "ps/ps_client.h"

namespace pstrain {

// `handler` serves PsService's methods by number (PsServer's RawHandler); it is kept alive by the
// client. `name` names the ps in messages ("ps:0 (in process)").
std::unique_ptr<PsClient> NewLocalPsClient(std::string name,
                                           std::shared_ptr<const RawHandler> handler);

}  // namespace pstrain

#endif  // PSTRAIN_PS_LOCAL_PS_CLIENT_H_
