#include "common/metrics_http.h"

#include <sys/socket.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "httplib.h"

namespace pstrain {
namespace {

class MetricsHttpServerImpl final : public MetricsHttpServer {
 public:
  explicit MetricsHttpServerImpl(const MetricsRegistry* registry) : registry_(registry) {}

  ~MetricsHttpServerImpl() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Start(const std::string& host, int port) {
    host_ = host;
    // httplib's default also sets SO_REUSEPORT, which would let a second server share the port
    // silently: only SO_REUSEADDR (a restarted task gets its port back at once).
    server_.set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(registry_->Render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    if (port == 0) {
      port_ = server_.bind_to_any_port(host);
    } else {
      port_ = server_.bind_to_port(host, port) ? port : -1;
    }
    if (port_ <= 0) {
      return absl::UnavailableError(
          absl::StrCat("metrics: can't listen on ", host, ":", port, " (in use, or not an address "
                       "of this machine)"));
    }
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the listening loop started would be lost (and the thread never end): wait
    // for it to run. httplib 0.11 has no notification for that, so this polls (briefly, once).
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!server_.is_running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
    return absl::OkStatus();
  }

  int port() const override { return port_; }
  std::string address() const override { return absl::StrCat(host_, ":", port_); }

 private:
  const MetricsRegistry* const registry_;
  httplib::Server server_;
  std::thread thread_;
  std::string host_;
  int port_ = -1;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, const MetricsRegistry* registry) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics: port ", port, " is not 0..65535"));
  }
  auto server = std::make_unique<MetricsHttpServerImpl>(registry);
  absl::Status s = server->Start(host, port);
  if (!s.ok()) return s;
  return std::unique_ptr<MetricsHttpServer>(std::move(server));
}

}  // namespace pstrain
