// The ps's data plane (common/raw_tcp.h) as a peer on the network sees it: each input is the byte
// stream one client connection sends (the hello with its token, then frames), written to a real
// RawTcpServer serving the ps's handlers (a fresh ps per process, with a token), and the
// connection read until the server closes it or goes quiet. Malformed hellos, wrong tokens, bad
// magic, lying lengths, unknown methods and malformed requests must all end in an error reply or a
// closed connection, never a crash; the server must keep serving a valid client afterwards.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cluster/task_identity.h"
#include "common/raw_tcp.h"
#include "proto/ps_service.pb.h"
#include "ps/checkpoint_root.h"
#include "ps/ps_service_handlers.h"
#include "tests/fuzz/fuzz_target.h"

namespace pstrain {
namespace {

constexpr char kToken[] = "fuzz-token";

struct Served {
  std::unique_ptr<PsServiceHandlers> handlers;
  std::unique_ptr<RawTcpServer> server;
};

std::string CheckpointDir() { return FuzzDir() + "/root"; }

Served& Server() {
  static Served* served = [] {
    auto* s = new Served;
    PsServiceLimits limits;
    limits.memory_budget_bytes = 64 << 20;
    limits.max_ids_per_request = 1 << 16;
    // Checkpoints confined to this process's own directory, as a ps's to its --checkpoint_root
    // (an unconfined ps wrote the databases of SaveShards requests into the working directory).
    absl::StatusOr<CheckpointRoot> root = CheckpointRoot::Open(CheckpointDir());
    if (!root.ok()) std::abort();
    s->handlers = std::make_unique<PsServiceHandlers>(limits, *std::move(root));
    RawTcpServerOptions options;
    options.host = "127.0.0.1";
    options.token = kToken;
    options.max_request_bytes = 1 << 20;
    options.service_name = "PsService";
    auto server = RawTcpServer::Start(
        options, [h = s->handlers.get()](int method, const std::vector<absl::string_view>& request,
                                         const ReplyAllocator& reply) {
          return h->Serve(method, request, reply);
        });
    if (!server.ok()) {
      std::fprintf(stderr, "data_plane_fuzz: %s\n", std::string(server.status().message()).c_str());
      std::abort();
    }
    s->server = *std::move(server);
    // As the ps's server does once its ports are bound (Health waits for it until then).
    TaskIdentity identity =
        TaskIdentity::New("ps", 0, absl::StrCat("127.0.0.1:", s->server->port()));
    identity.data_port = s->server->port();
    s->handlers->SetIdentity(identity);
    return s;
  }();
  return *served;
}

// Sends `bytes` on a new connection, then reads until the server closes it (it reads to the end
// of what was sent, answers, and closes), so that no connection is still being served when the
// next input starts or the process exits. libFuzzer's timer interrupts system calls with SIGALRM
// every second: an EINTR is retried, never taken for the end of the exchange (that was a false
// "leak": the connection's request still being served when libFuzzer counted allocations). A
// server that never closes is caught by libFuzzer's -timeout.
void Exchange(const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(Server().server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // An interrupted connect goes on in the background: asking again says EALREADY until it is
  // done, then EISCONN.
  for (;;) {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 || errno == EISCONN) {
      break;
    }
    if (errno != EINTR && errno != EALREADY) std::abort();
  }
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server closed on us: fine
    at += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // closed (or reset) by the server
  }
  ::close(fd);
}

std::string Hello(absl::string_view token) {
  std::string out = "PSHI";
  const uint32_t version = 1, n = static_cast<uint32_t>(token.size());
  out.append(reinterpret_cast<const char*>(&version), 4);
  out.append(reinterpret_cast<const char*>(&n), 4);
  out.append(token.data(), token.size());
  return out;
}

std::string Frame(uint32_t method, uint64_t id, const std::string& request) {
  std::string out = "PSRQ";
  const uint64_t bytes = request.size();
  out.append(reinterpret_cast<const char*>(&method), 4);
  out.append(reinterpret_cast<const char*>(&id), 8);
  out.append(reinterpret_cast<const char*>(&bytes), 8);
  return out + request;
}

int Method(const char* name) {
  return PsServiceHandlers::Service()->FindMethodByName(name)->index();
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  CreateShardsRequest create;
  VariableShardDef* def = create.add_shards();
  def->set_name("v");
  def->set_variable("v");
  def->add_full_shape(8);
  def->add_full_shape(4);
  def->set_dtype(DT_FLOAT32);
  def->set_num_rows(8);
  def->set_num_shards(1);
  def->mutable_optimizer()->set_kind(OptimizerDef::SGD);
  LookupRequest lookup;
  LookupOp* op = lookup.add_ops();
  op->set_shard("v");
  const int64_t ids[] = {0, 3, 7};
  op->set_ids(std::string(reinterpret_cast<const char*>(ids), sizeof(ids)));
  UpdateRequest update;
  UpdateOp* u = update.add_ops();
  u->set_shard("v");
  u->set_kind(UpdateOp::APPLY_GRADIENT);
  u->set_ids(op->ids());
  u->set_values(std::string(3 * 4 * sizeof(float), '\x01'));
  u->set_dtype(DT_FLOAT32);
  ReadRequest read;
  read.add_ops()->set_shard("v");
  const std::string hello = Hello(kToken);
  return {
      hello + Frame(Method("CreateShards"), 1, create.SerializeAsString()) +
          Frame(Method("Lookup"), 2, lookup.SerializeAsString()) +
          Frame(Method("Update"), 3, update.SerializeAsString()) +
          Frame(Method("Read"), 4, read.SerializeAsString()),
      Hello("wrong") + Frame(Method("Lookup"), 1, lookup.SerializeAsString()),
      hello + Frame(99, 1, "garbage"),
      hello + "PSRQ" + std::string(20, '\xff'),
  };
}

}  // namespace pstrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // What the previous input saved is gone; the root itself stays.
  pstrain::EmptyFuzzDir();
  ::mkdir(pstrain::CheckpointDir().c_str(), 0755);
  pstrain::Exchange(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
