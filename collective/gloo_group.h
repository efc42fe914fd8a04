// The CPU collective group: Gloo (Debian's libgloo) over TCP, the ranks' addresses exchanged
// through the collective rendezvous. All-reduce picks Gloo's BCube for small buffers and its
// ring (pipelined in 1 MiB segments) for large ones.
//
// Gloo's TCP pairs are plaintext and unauthenticated (Debian builds Gloo without its TLS
// transport): keep the collective traffic on a trusted network, as NCCL's.
#ifndef PSTRAIN_COLLECTIVE_GLOO_GROUP_H_
#define PSTRAIN_COLLECTIVE_GLOO_GROUP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "collective/collective_group.h"

namespace pstrain {

// Joins the group (waiting up to options.join_timeout for every rank) and connects this rank to
// every other. Errors: kInvalidArgument for a rank outside [0, size) or sizes the ranks disagree
// on; kDeadlineExceeded naming the ranks that never joined; kUnavailable naming the rendezvous
// when it can't be reached, or when connecting to a peer fails.
absl::StatusOr<std::unique_ptr<CollectiveGroup>> CreateGlooGroup(
    const CollectiveGroupOptions& options);

}  // namespace pstrain

#endif  // PSTRAIN_COLLECTIVE_GLOO_GROUP_H_
