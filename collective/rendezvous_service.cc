#include "collective/rendezvous_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"

namespace pstrain {
namespace {

std::string GroupName(absl::string_view group, uint64_t generation) {
  return absl::StrFormat("group '%s' generation %d", group, generation);
}

std::string Seconds(absl::Duration d) { return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d)); }

}  // namespace

RendezvousState::RendezvousState(RendezvousOptions options) : options_(std::move(options)) {}

absl::Time RendezvousState::WaitDeadline(int64_t timeout_ms) const {
  absl::Duration wait = absl::Milliseconds(std::max<int64_t>(0, timeout_ms));
  return absl::Now() + std::min(wait, options_.max_wait);
}

absl::StatusOr<RendezvousState::Generation*> RendezvousState::FindLocked(absl::string_view group,
                                                                         uint64_t number) {
  if (group.empty()) return absl::InvalidArgumentError("rendezvous: the group name is empty");
  if (group.size() > static_cast<size_t>(options_.max_key_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous: a group name of ", group.size(),
                                                   " bytes is over the limit of ",
                                                   options_.max_key_bytes));
  }
  if (number == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous: group '", group, "' generation 0 (generations start at 1)"));
  }
  auto it = groups_.find(std::string(group));
  if (it == groups_.end()) {
    if (groups_.size() >= 64) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rendezvous: 64 groups are open; group '", group, "' can't be started"));
    }
    it = groups_.emplace(std::string(group), Generation{}).first;
  }
  Generation& g = it->second;
  if (number < g.number) {
    return absl::FailedPreconditionError(absl::StrCat(GroupName(group, number),
                                                      " is over: the group is at generation ",
                                                      g.number));
  }
  if (number > g.number) {
    if (g.number != 0) {
      LOG(INFO) << "rendezvous: " << GroupName(group, number) << " starts; generation " << g.number
                << " is forgotten";
    }
    g = Generation{};
    g.number = number;
    changed_.SignalAll();  // waiters on the old generation find it gone
  }
  return &g;
}

std::vector<int> RendezvousState::SilentLocked(const Generation& g, absl::Time now,
                                               absl::Time* next) const {
  std::vector<int> silent;
  *next = absl::InfiniteFuture();
  for (const auto& [rank, member] : g.members) {
    const absl::Time stale_at = member.last_seen + options_.stale_after;
    if (stale_at <= now) {
      silent.push_back(rank);
    } else {
      *next = std::min(*next, stale_at);
    }
  }
  return silent;
}

std::string RendezvousState::DescribeLocked(const Generation& g, const std::vector<int>& ranks,
                                            absl::Time now) const {
  std::vector<std::string> parts;
  for (int rank : ranks) {
    auto it = g.members.find(rank);
    if (it == g.members.end()) {
      parts.push_back(absl::StrCat("rank ", rank, " (never joined)"));
    } else {
      parts.push_back(absl::StrCat(it->second.name, " (rank ", rank, ", silent ",
                                   Seconds(now - it->second.last_seen), ")"));
    }
  }
  return absl::StrJoin(parts, ", ");
}

absl::Status RendezvousState::Set(const RendezvousSetRequest& request) {
  if (request.key().empty() || request.key().size() > static_cast<size_t>(options_.max_key_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous Set: a key of ", request.key().size(),
                                                   " bytes (1 to ", options_.max_key_bytes,
                                                   " allowed)"));
  }
  if (request.value().size() > static_cast<size_t>(options_.max_value_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous Set: key '", request.key(),
                                                   "' has a value of ", request.value().size(),
                                                   " bytes, over the limit of ",
                                                   options_.max_value_bytes));
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Generation * g, FindLocked(request.group(), request.generation()));
  auto it = g->kv.find(request.key());
  const int64_t old_bytes =
      it == g->kv.end() ? 0 : static_cast<int64_t>(it->first.size() + it->second.size());
  const int64_t new_bytes = request.key().size() + request.value().size();
  if (g->kv_bytes - old_bytes + new_bytes > options_.max_total_bytes ||
      (it == g->kv.end() && static_cast<int64_t>(g->kv.size()) >= options_.max_keys)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous Set: ", GroupName(request.group(), request.generation()), " holds ",
        g->kv.size(), " keys of ", g->kv_bytes, " bytes; key '", request.key(),
        "' would pass the limit (", options_.max_keys, " keys, ", options_.max_total_bytes,
        " bytes)"));
  }
  g->kv_bytes += new_bytes - old_bytes;
  g->kv[request.key()] = request.value();
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<RendezvousGetResponse> RendezvousState::Get(const RendezvousGetRequest& request) {
  const absl::Time deadline = WaitDeadline(request.timeout_ms());
  absl::MutexLock lock(&mu_);
  while (true) {
    ASSIGN_OR_RETURN(Generation * g, FindLocked(request.group(), request.generation()));
    auto it = g->kv.find(request.key());
    if (it != g->kv.end()) {
      RendezvousGetResponse response;
      response.set_value(it->second);
      return response;
    }
    if (!g->aborted.empty()) {
      return absl::AbortedError(absl::StrCat(GroupName(request.group(), request.generation()),
                                             " was aborted: ", g->aborted));
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous: key '", request.key(), "' of ", GroupName(request.group(), request.generation()),
          " was not set within ", request.timeout_ms(), " ms"));
    }
  }
}

absl::StatusOr<RendezvousJoinResponse> RendezvousState::Join(const RendezvousJoinRequest& request) {
  if (request.size() < 1 || request.size() > options_.max_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous Join: group size ", request.size(),
                                                   " (1 to ", options_.max_ranks, " allowed)"));
  }
  if (request.rank() < 0 || request.rank() >= request.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous Join: rank ", request.rank(),
                                                   " is outside [0, ", request.size(), ")"));
  }
  if (request.name().size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous Join: a rank name of ",
                                                   request.name().size(),
                                                   " bytes (at most 256 allowed)"));
  }
  const std::string what = GroupName(request.group(), request.generation());
  const absl::Time deadline = WaitDeadline(request.timeout_ms());
  absl::MutexLock lock(&mu_);
  {
    ASSIGN_OR_RETURN(Generation * g, FindLocked(request.group(), request.generation()));
    if (g->size == 0) g->size = request.size();
    if (g->size != request.size()) {
      return absl::InvalidArgumentError(absl::StrCat("rendezvous Join: ", request.name(), " says ",
                                                     what, " has ", request.size(),
                                                     " ranks; the ranks before it said ", g->size));
    }
    Member& member = g->members[request.rank()];
    member.name = request.name().empty() ? absl::StrCat("rank ", request.rank()) : request.name();
    member.last_seen = absl::Now();
    changed_.SignalAll();
  }
  while (true) {
    ASSIGN_OR_RETURN(Generation * g, FindLocked(request.group(), request.generation()));
    if (!g->aborted.empty()) {
      return absl::AbortedError(absl::StrCat(what, " was aborted: ", g->aborted));
    }
    if (static_cast<int>(g->members.size()) == g->size) {
      RendezvousJoinResponse response;
      for (const auto& [rank, member] : g->members) response.add_names(member.name);
      return response;
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      g = FindLocked(request.group(), request.generation()).value_or(nullptr);
      if (g == nullptr || static_cast<int>(g->members.size()) == g->size) continue;
      std::vector<int> missing;
      std::vector<std::string> joined;
      for (int r = 0; r < g->size; ++r) {
        auto it = g->members.find(r);
        if (it == g->members.end()) {
          missing.push_back(r);
        } else {
          joined.push_back(it->second.name);
        }
      }
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": rank", missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, ", "),
          " never joined within ", request.timeout_ms(), " ms (joined: ", absl::StrJoin(joined, ", "),
          ")"));
    }
  }
}

absl::StatusOr<RendezvousHeartbeatResponse> RendezvousState::Heartbeat(
    const RendezvousHeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Generation * g, FindLocked(request.group(), request.generation()));
  auto it = g->members.find(request.rank());
  if (it == g->members.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous Heartbeat: rank ", request.rank(), " has not joined ",
                     GroupName(request.group(), request.generation())));
  }
  const absl::Time now = absl::Now();
  it->second.last_seen = now;
  if (g->aborted.empty() && static_cast<int>(g->members.size()) == g->size) {
    absl::Time next;
    std::vector<int> silent = SilentLocked(*g, now, &next);
    if (!silent.empty()) {
      g->aborted = absl::StrCat(DescribeLocked(*g, silent, now), " stopped answering");
      LOG(WARNING) << "rendezvous: " << GroupName(request.group(), request.generation())
                   << " aborted: " << g->aborted;
      changed_.SignalAll();
    }
  }
  RendezvousHeartbeatResponse response;
  response.set_aborted(g->aborted);
  return response;
}

absl::StatusOr<RendezvousAbortResponse> RendezvousState::Abort(const RendezvousAbortRequest& request) {
  const absl::Time deadline = WaitDeadline(request.wait_ms());
  absl::MutexLock lock(&mu_);
  {
    ASSIGN_OR_RETURN(Generation * g, FindLocked(request.group(), request.generation()));
    if (g->aborted.empty()) {
      auto it = g->members.find(request.rank());
      const std::string who =
          it == g->members.end() ? absl::StrCat("rank ", request.rank()) : it->second.name;
      g->aborted = request.deliberate()
                       ? request.reason().substr(0, 1024)
                       : absl::StrCat(who, " failed: ", request.reason().substr(0, 1024));
      g->aborted_deliberately = request.deliberate();
      changed_.SignalAll();
    } else if (g->aborted_deliberately) {
      // The cause is known (a rank stopped on purpose): no need to wait for a silent one.
      RendezvousAbortResponse response;
      response.set_aborted(g->aborted);
      return response;
    }
  }
  while (true) {
    ASSIGN_OR_RETURN(Generation * g, FindLocked(request.group(), request.generation()));
    const absl::Time now = absl::Now();
    absl::Time next;
    std::vector<int> silent = SilentLocked(*g, now, &next);
    for (int r = 0; r < g->size; ++r) {
      if (g->members.count(r) == 0) silent.push_back(r);
    }
    std::sort(silent.begin(), silent.end());
    if (!silent.empty() || now >= deadline) {
      RendezvousAbortResponse response;
      response.set_aborted(g->aborted);
      for (int r : silent) {
        response.add_silent_ranks(r);
        response.add_silent(DescribeLocked(*g, {r}, now));
      }
      return response;
    }
    changed_.WaitWithDeadline(&mu_, std::min(deadline, next));
  }
}

absl::StatusOr<RendezvousStatusResponse> RendezvousState::Status(
    const RendezvousStatusRequest& request) {
  if (request.group().empty() ||
      request.group().size() > static_cast<size_t>(options_.max_key_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous Status: a group name of ",
                                                   request.group().size(), " bytes (1 to ",
                                                   options_.max_key_bytes, " allowed)"));
  }
  absl::MutexLock lock(&mu_);
  RendezvousStatusResponse response;
  auto it = groups_.find(request.group());
  if (it == groups_.end()) return response;
  const Generation& g = it->second;
  response.set_generation(g.number);
  response.set_size(g.size);
  response.set_joined(static_cast<int>(g.members.size()));
  response.set_aborted(g.aborted);
  return response;
}

const google::protobuf::ServiceDescriptor* RendezvousHandlers::Service() {
  static const google::protobuf::ServiceDescriptor* service =
      FindService("pstrain.CollectiveRendezvous");
  return service;
}

bool RendezvousHandlers::Blocks(int method) {
  if (method < 0 || method >= Service()->method_count()) return false;
  const std::string& name = Service()->method(method)->name();
  return name == "Get" || name == "Join" || name == "Abort";
}

absl::Status RendezvousHandlers::Serve(int method, const std::vector<absl::string_view>& request,
                                       const ReplyAllocator& reply) {
  if (method < 0 || method >= Service()->method_count()) {
    return absl::UnimplementedError(
        absl::StrCat("CollectiveRendezvous has no method number ", method));
  }
  const std::string& name = Service()->method(method)->name();
  if (name == "Set") {
    RendezvousSetRequest parsed;
    RETURN_IF_ERROR(ParseRequest(request, name, &parsed));
    return state_.Set(parsed);  // RendezvousSetResponse has no fields: zero bytes
  }
  if (name == "Get") {
    RendezvousGetRequest parsed;
    RETURN_IF_ERROR(ParseRequest(request, name, &parsed));
    ASSIGN_OR_RETURN(RendezvousGetResponse response, state_.Get(parsed));
    return WriteReply(response, reply);
  }
  if (name == "Join") {
    RendezvousJoinRequest parsed;
    RETURN_IF_ERROR(ParseRequest(request, name, &parsed));
    ASSIGN_OR_RETURN(RendezvousJoinResponse response, state_.Join(parsed));
    return WriteReply(response, reply);
  }
  if (name == "Heartbeat") {
    RendezvousHeartbeatRequest parsed;
    RETURN_IF_ERROR(ParseRequest(request, name, &parsed));
    ASSIGN_OR_RETURN(RendezvousHeartbeatResponse response, state_.Heartbeat(parsed));
    return WriteReply(response, reply);
  }
  if (name == "Abort") {
    RendezvousAbortRequest parsed;
    RETURN_IF_ERROR(ParseRequest(request, name, &parsed));
    ASSIGN_OR_RETURN(RendezvousAbortResponse response, state_.Abort(parsed));
    return WriteReply(response, reply);
  }
  if (name == "Status") {
    RendezvousStatusRequest parsed;
    RETURN_IF_ERROR(ParseRequest(request, name, &parsed));
    ASSIGN_OR_RETURN(RendezvousStatusResponse response, state_.Status(parsed));
    return WriteReply(response, reply);
  }
  return absl::UnimplementedError(
      absl::StrCat("CollectiveRendezvous.", name, " is not served here"));
}

namespace {

class RendezvousServerImpl final : public RendezvousServer {
 public:
  ~RendezvousServerImpl() override {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    pool_.reset();
    server_->Wait();
  }

  absl::Status Init(const std::string& listen_address, RendezvousOptions options, int threads) {
    handlers_ = std::make_unique<RendezvousHandlers>(std::move(options));
    pool_ = std::make_unique<ThreadPool>(std::max(1, threads));
    service_ = std::make_unique<RawUnaryService>(
        RendezvousHandlers::Service(),
        [handlers = handlers_.get()](int method, const std::vector<absl::string_view>& request,
                                     const ReplyAllocator& reply) {
          return handlers->Serve(method, request, reply);
        },
        [pool = pool_.get()](int method, std::function<void()> work) {
          if (RendezvousHandlers::Blocks(method)) {
            pool->Schedule(std::move(work));
          } else {
            work();
          }
        });
    ASSIGN_OR_RETURN(StartedServer started, StartGrpcServer(listen_address, {service_.get()}));
    server_ = std::move(started.server);
    address_ = started.address;
    return absl::OkStatus();
  }

  const std::string& address() const override { return address_; }

 private:
  std::unique_ptr<RendezvousHandlers> handlers_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<RawUnaryService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const std::string& listen_address, RendezvousOptions options, int threads) {
  auto server = std::make_unique<RendezvousServerImpl>();
  RETURN_IF_ERROR(server->Init(listen_address, std::move(options), threads));
  return std::unique_ptr<RendezvousServer>(std::move(server));
}

}  // namespace pstrain
