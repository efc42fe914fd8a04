// The GPU collective group: NCCL (the CUDA toolkit's libnccl), one rank per GPU, NCCL's unique id
// published by rank 0 through the collective rendezvous (as Gloo's addresses are). A build without
// CUDA (third_party/cuda/cuda_configure.bzl) compiles nccl_group_stub.cc instead, whose factory
// fails: callers need no #if.
//
// The collectives take host buffers, as CollectiveGroup's do: each is copied to a device buffer
// the group keeps (grown as needed), reduced or exchanged there on the group's own stream, and
// copied back. Every collective waits for its stream up to options.timeout and never hangs: on a
// timeout, an NCCL error, an Abort, or a heartbeat that learns the generation was aborted, the
// communicator is aborted (ncclCommAbort) and the call fails as collective_group.h says. NCCL
// itself does not tell a rank that a peer stopped (its kernels wait on): the peers learn it from
// the rendezvous, at their next heartbeat. A break between collectives aborts the communicator at
// the next call (kAborted) or when the group is destroyed; destroying a whole group flushes what
// it sent first (ncclCommFinalize, up to options.timeout).
//
// NCCL picks its own network interface (NCCL_SOCKET_IFNAME and its other variables):
// options.listen_host and options.small_allreduce_bytes are Gloo's and not used here. Like Gloo's,
// NCCL's traffic is unauthenticated: keep it on a trusted network.
#ifndef PSTRAIN_COLLECTIVE_NCCL_GROUP_H_
#define PSTRAIN_COLLECTIVE_NCCL_GROUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collective/collective_group.h"

namespace pstrain {

// Joins the group (waiting up to options.join_timeout for every rank) and makes this rank's NCCL
// communicator on GPU `gpu` (-1: rank modulo the visible GPUs). NCCL allows one rank of a group
// per GPU. Errors, in the order checked: kInvalidArgument for a rank outside [0, size) or no
// rendezvous address; kFailedPrecondition when the build has no CUDA or the machine no usable GPU
// (the message says which); kInvalidArgument for a gpu below -1, kFailedPrecondition for no GPU
// `gpu`; kResourceExhausted or kInternal when the group's CUDA stream can't be made; then the
// rendezvous's errors as CreateGlooGroup's (kDeadlineExceeded naming the ranks that never joined,
// kUnavailable naming an unreachable rendezvous); kFailedPrecondition when rank 0's NCCL id has
// another size than this NCCL's (the ranks run different NCCL versions); kDeadlineExceeded or
// kUnavailable, diagnosed as a failed collective, when making the communicator fails or takes
// longer than options.join_timeout.
absl::StatusOr<std::unique_ptr<CollectiveGroup>> CreateNcclGroup(
    const CollectiveGroupOptions& options, int gpu = -1);

// The GPUs this process can give an NCCL group: 0 in a build without CUDA, or on a machine with no
// GPU or no driver; then, if `why_none` is not null, *why_none says why (for messages and skips).
int NcclGpuCount(std::string* why_none = nullptr);

// Whether CreateNcclGroup can work here: a build with CUDA and at least one GPU.
bool NcclGroupAvailable();

}  // namespace pstrain

#endif  // PSTRAIN_COLLECTIVE_NCCL_GROUP_H_
