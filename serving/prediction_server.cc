#include "serving/prediction_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/raw_service.h"
#include "common/service_metrics.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "common/transport_security.h"
#include "grpcpp/server.h"
#include "httplib.h"
#include "openssl/err.h"
#include "openssl/pem.h"
#include "openssl/ssl.h"

namespace pstrain {
namespace {

// httplib's server with a stop that works whether or not its listening loop has started (its
// own stop() does nothing before the loop runs, which would leave the loop running forever): it
// takes the listening socket away and shuts it down, which ends the loop at its next check or
// wakes it from accept().
template <typename Base>
class StoppableServer final : public Base {
 public:
  using Base::Base;
  // The listening socket, now no longer the server's (INVALID_SOCKET if already taken).
  socket_t TakeListeningSocket() { return this->svr_sock_.exchange(INVALID_SOCKET); }
};

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "no detail";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

// Sets up `ctx` for mutual TLS from PEM text: our certificate chain and key, the CA a client's
// certificate must be signed by (and it must present one).
absl::Status SetUpMutualTls(const TransportSecurity& security, SSL_CTX* ctx) {
  auto bio_of = [](const std::string& pem) {
    return BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  BIO* cert = bio_of(security.tls_cert);
  X509* leaf = PEM_read_bio_X509(cert, nullptr, nullptr, nullptr);
  const bool leaf_ok = leaf != nullptr && SSL_CTX_use_certificate(ctx, leaf) == 1;
  X509_free(leaf);
  bool chain_ok = leaf_ok;
  while (chain_ok) {
    X509* extra = PEM_read_bio_X509(cert, nullptr, nullptr, nullptr);
    if (extra == nullptr) break;
    if (SSL_CTX_add_extra_chain_cert(ctx, extra) != 1) {  // on success ctx owns it
      X509_free(extra);
      chain_ok = false;
    }
  }
  BIO_free(cert);
  if (!chain_ok) {
    return absl::InternalError(absl::StrCat("HTTPS: can't use the TLS certificate (--tls_cert): ",
                                            OpenSslError()));
  }
  ERR_clear_error();  // the end of the chain reads as an error
  BIO* key_bio = bio_of(security.tls_key);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  const bool key_ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx, key) == 1 &&
                      SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(key);
  BIO_free(key_bio);
  if (!key_ok) {
    return absl::InternalError(absl::StrCat(
        "HTTPS: can't use the TLS key (--tls_key) with the certificate: ", OpenSslError()));
  }
  BIO* ca_bio = bio_of(security.tls_ca);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int cas = 0;
  bool ca_ok = true;
  for (;;) {
    X509* ca = PEM_read_bio_X509(ca_bio, nullptr, nullptr, nullptr);
    if (ca == nullptr) break;
    ca_ok = ca_ok && X509_STORE_add_cert(store, ca) == 1 && SSL_CTX_add_client_CA(ctx, ca) == 1;
    X509_free(ca);
    ++cas;
  }
  BIO_free(ca_bio);
  if (!ca_ok || cas == 0) {
    return absl::InternalError(
        absl::StrCat("HTTPS: can't use the CA certificate (--tls_ca): ", OpenSslError()));
  }
  ERR_clear_error();
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return absl::OkStatus();
}

bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

void SetError(const absl::Status& status, httplib::Response* res) {
  res->status = HttpStatusOf(status.code());
  res->set_content(ErrorJson(status), "application/json");
}

// The HTTP/JSON endpoint: httplib's server (HTTPS with mutual TLS when the process has TLS) on
// its own listening thread and pool, every request answered by the handlers. Nothing httplib
// throws reaches us: the handlers don't throw, and the server's exception handler answers 500.
class HttpEndpoint {
 public:
  ~HttpEndpoint() { Stop(); }

  absl::Status Start(const std::string& host, int port, int threads,
                     PredictionHandlers* handlers) {
    host_ = host;
    handlers_ = handlers;
    const std::shared_ptr<const TransportSecurity> security = CurrentTransportSecurity();
    token_ = security->auth_token.empty() ? "" : absl::StrCat("Bearer ", security->auth_token);
    if (security->tls()) {
      absl::Status tls;
      auto server = std::make_unique<StoppableServer<httplib::SSLServer>>(
          [&](SSL_CTX& ctx) {
            tls = SetUpMutualTls(*security, &ctx);
            return tls.ok();
          });
      RETURN_IF_ERROR(tls);
      if (!server->is_valid()) return absl::InternalError("HTTPS: can't set up TLS");
      take_socket_ = [s = server.get()] { return s->TakeListeningSocket(); };
      server_ = std::move(server);
    } else {
      auto server = std::make_unique<StoppableServer<httplib::Server>>();
      take_socket_ = [s = server.get()] { return s->TakeListeningSocket(); };
      server_ = std::move(server);
    }
    Configure(std::max(1, threads));
    // httplib's default also sets SO_REUSEPORT, which would let a second server share the port
    // silently: only SO_REUSEADDR (a restarted server gets its port back at once).
    server_->set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    port_ = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
    if (port_ <= 0) {
      return absl::UnavailableError(absl::StrCat("HTTP: can't listen on ", host, ":", port,
                                                 " (in use, or not an address of this machine)"));
    }
    // listen_after_bind returns once Stop() has taken the socket (or at once, if it already has).
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    if (!security->tls() && security->auth_token.empty() && !IsLoopbackHost(host)) {
      LOG(WARNING) << "HTTP on " << address()
                   << " beyond loopback with neither TLS nor a token: anyone who can reach this "
                      "port can use the model (--tls_cert, --tls_key, --tls_ca, --auth_token_file)";
    }
    return absl::OkStatus();
  }

  int port() const { return port_; }
  std::string address() const { return absl::StrCat(host_, ":", port_); }

  // Stops listening, then waits for the requests in progress. Idempotent.
  void Stop() {
    if (server_ == nullptr) return;
    const socket_t sock = take_socket_();
    if (sock != INVALID_SOCKET) ::shutdown(sock, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();  // its pool's requests finish first
    if (sock != INVALID_SOCKET) ::close(sock);
    server_.reset();
  }

 private:
  void Configure(int threads) {
    httplib::Server& s = *server_;
    s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    s.set_tcp_nodelay(true);  // answers are small: don't let Nagle hold them
    s.set_keep_alive_max_count(1000);
    const size_t max_bytes = static_cast<size_t>(handlers_->limits().max_request_bytes);
    // A body declared larger is refused before it is read (413); one that turns out larger
    // (chunked, or compressed) is cut off by the reader below.
    s.set_payload_max_length(max_bytes);
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (token_.empty()) return httplib::Server::HandlerResponse::Unhandled;
      const std::string given = req.get_header_value("Authorization");
      if (given.empty() || !ConstantTimeEqual(given, token_)) {
        res.set_header("WWW-Authenticate", "Bearer");
        SetError(absl::UnauthenticatedError(
                     given.empty() ? "no auth token (this server requires \"Authorization: Bearer "
                                     "<token>\", --auth_token_file's token)"
                                   : "wrong auth token"),
                 &res);
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    s.Post(R"(/v1/models/([^/:]+):predict)",
           [this, max_bytes](const httplib::Request& req, httplib::Response& res,
                             const httplib::ContentReader& content_reader) {
             std::string body;
             bool too_big = false;
             const bool read = content_reader([&](const char* data, size_t length) {
               if (body.size() + length > max_bytes) {
                 too_big = true;
                 return false;
               }
               body.append(data, length);
               return true;
             });
             // httplib refuses a declared Content-Length over the limit itself (status 413).
             if (too_big || (!read && res.status == 413)) {
               SetError(absl::ResourceExhaustedError(absl::StrCat(
                            "Predict: a body over the server's limit of ", max_bytes,
                            " bytes (max_request_bytes); split the request")),
                        &res);
               res.set_header("Connection", "close");
               return;
             }
             if (!read) {
               SetError(absl::InvalidArgumentError(
                            "Predict: the body could not be read (cut short, or a bad chunked "
                            "or compressed encoding)"),
                        &res);
               res.set_header("Connection", "close");
               return;
             }
             HttpReply reply = handlers_->HttpPredict(req.matches[1].str(), body);
             res.status = reply.status;
             res.set_content(std::move(reply.body), "application/json");
           });
    s.Get(R"(/v1/models/([^/:]+))", [this](const httplib::Request& req, httplib::Response& res) {
      HttpReply reply = handlers_->HttpModelStatus(req.matches[1].str());
      res.status = reply.status;
      res.set_content(std::move(reply.body), "application/json");
    });
    // httplib's own refusals (no such path, a body declared too large, a request it can't
    // parse) get a JSON body like ours.
    s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      absl::Status s;
      switch (res.status) {
        case 404:
          s = absl::NotFoundError(absl::StrCat(
              "no such endpoint: ", req.method, " ", req.path,
              " (POST /v1/models/<name>:predict, GET /v1/models/<name>)"));
          break;
        case 413:
          s = absl::ResourceExhaustedError(
              "Predict: the body is over the server's limit (max_request_bytes); split the "
              "request");
          break;
        case 400:
          s = absl::InvalidArgumentError("malformed HTTP request");
          break;
        default:
          s = absl::UnknownError(absl::StrCat("HTTP status ", res.status));
      }
      res.set_content(ErrorJson(s), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }));
    s.set_exception_handler(
        [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown exception";
          try {  // the boundary: name what was thrown, and answer 500
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          LOG(ERROR) << "HTTP " << req.method << " " << req.path << ": " << what;
          SetError(absl::InternalError(absl::StrCat("internal error: ", what)), &res);
        });
  }

  std::string host_;
  int port_ = -1;
  std::string token_;  // "Bearer <token>", or empty: none required
  PredictionHandlers* handlers_ = nullptr;
  std::unique_ptr<httplib::Server> server_;
  std::function<socket_t()> take_socket_;
  std::thread thread_;
};

std::string DefaultModelName(const std::string& base) {
  std::string b = base;
  while (b.size() > 1 && b.back() == '/') b.pop_back();
  const size_t slash = b.rfind('/');
  std::string name = slash == std::string::npos ? b : b.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") name = "default";
  return name;
}

absl::Status Validate(const PredictionServerOptions& o) {
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("prediction server: ", why));
  };
  if (o.model_base.empty()) return bad("model_base is required");
  if (o.model_name.empty() || absl::StrContains(o.model_name, "/") ||
      absl::StrContains(o.model_name, ":")) {
    return bad(absl::StrCat("model_name \"", o.model_name, "\" must be non-empty without '/' or ':'"));
  }
  if (o.grpc_address.empty() && o.http_port < 0) return bad("neither gRPC nor HTTP: nothing to serve");
  if (o.http_port > 65535) return bad(absl::StrCat("http_port ", o.http_port, " is over 65535"));
  if (o.batching.max_batch_examples < 1) return bad("max_batch_examples must be at least 1");
  if (o.batching.max_batch_wait < absl::ZeroDuration()) return bad("max_batch_wait is negative");
  if (o.batching.threads < 1) return bad("batch threads must be at least 1");
  if (o.limits.max_request_examples < 1) return bad("max_request_examples must be at least 1");
  if (o.limits.max_request_bytes < 1) return bad("max_request_bytes must be at least 1");
  if (o.latency_window < 1) return bad("latency_window must be at least 1");
  return absl::OkStatus();
}

class PredictionServerImpl final : public PredictionServer {
 public:
  ~PredictionServerImpl() override { Shutdown(); }

  absl::Status Init(const PredictionServerOptions& options) {
    model_name_ = options.model_name;
    ModelVersionsOptions v;
    v.base = options.model_base;
    v.predictor = options.predictor;
    v.poll_period = options.poll_period;
    v.follow_checkpoints = options.follow_checkpoints;
    ASSIGN_OR_RETURN(versions_, ModelVersions::Start(v));
    batcher_ = std::make_unique<PredictionBatcher>(options.batching, versions_->Source());
    handlers_ = std::make_unique<PredictionHandlers>(model_name_, versions_.get(), batcher_.get(),
                                                     options.limits, options.latency_window);
    metrics_ = options.metrics;
    if (metrics_ != nullptr) {
      collector_ = metrics_->AddCollector([this](MetricsRegistry::Sink& out) { Collect(out); });
    }
    if (!options.grpc_address.empty()) {
      pool_ = std::make_unique<ThreadPool>(std::max(1, options.grpc_threads));
      const int predict = PredictionHandlers::Service()->FindMethodByName("Predict")->index();
      service_ = std::make_unique<RawUnaryService>(
          PredictionHandlers::Service(),
          InstrumentRawHandler(
              [handlers = handlers_.get()](int method,
                                           const std::vector<absl::string_view>& request,
                                           const ReplyAllocator& reply) {
                return handlers->Serve(method, request, reply);
              },
              PredictionHandlers::Service(), metrics_, "pstrain_prediction_grpc"),
          // Predict waits for its batch: on the pool, not on gRPC's callback threads.
          [pool = pool_.get(), predict](int method, std::function<void()> work) {
            if (method == predict) {
              pool->Schedule(std::move(work));
            } else {
              work();
            }
          });
      ASSIGN_OR_RETURN(StartedServer started,
                       StartGrpcServer(options.grpc_address, {service_.get()}));
      grpc_server_ = std::move(started.server);
      grpc_address_ = started.address;
    }
    if (options.http_port >= 0) {
      http_ = std::make_unique<HttpEndpoint>();
      RETURN_IF_ERROR(
          http_->Start(options.http_host, options.http_port, options.http_threads, handlers_.get()));
    }
    LOG(INFO) << "prediction server: model \"" << model_name_ << "\" version " << version()
              << " from " << options.model_base << "; gRPC "
              << (grpc_address_.empty() ? "off" : grpc_address_) << ", HTTP "
              << (http_ == nullptr ? "off" : http_->address()) << " ("
              << CurrentTransportSecurity()->Describe() << ")";
    return absl::OkStatus();
  }

  const std::string& model_name() const override { return model_name_; }
  const std::string& grpc_address() const override { return grpc_address_; }
  int http_port() const override { return http_ == nullptr ? -1 : http_->port(); }
  std::string http_address() const override {
    return http_ == nullptr ? "" : http_->address();
  }
  int64_t version() const override { return versions_->Current()->version(); }
  FollowStats following() const override { return versions_->Following(); }
  std::vector<VersionStatus> versions() const override { return versions_->Versions(); }
  int64_t CheckForNewVersion() override { return versions_->CheckNow(); }
  bool WaitForVersion(int64_t version, absl::Duration timeout) const override {
    return versions_->WaitForVersion(version, timeout);
  }
  LatencyStats latency() const override { return handlers_->latency(); }
  BatchStats batch_stats() const override { return batcher_->stats(); }
  int64_t requests() const override { return handlers_->requests(); }
  int64_t failed_requests() const override { return handlers_->failed_requests(); }

  void Shutdown() override {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    if (metrics_ != nullptr && collector_ >= 0) metrics_->RemoveCollector(collector_);
    // No new requests; those in progress finish (their batches run): HTTP's, then gRPC's (calls
    // still open after a second are cancelled; the pool's queued ones run to their end first).
    if (http_ != nullptr) http_->Stop();
    if (grpc_server_ != nullptr) {
      grpc_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      pool_.reset();
      grpc_server_->Wait();
      grpc_server_.reset();
    }
    batcher_.reset();  // answers anything still queued, joins its threads
    LOG(INFO) << "prediction server: model \"" << model_name_ << "\" stopped";
  }

 private:
  void Collect(MetricsRegistry::Sink& out) const {
    const LatencyStats l = handlers_->latency();
    const BatchStats b = batcher_->stats();
    out.AddGauge("pstrain_prediction_model_version", "The model version new requests go to.", {},
                 static_cast<double>(versions_->Current()->version()));
    out.AddCounter("pstrain_prediction_requests_total",
                   "Predict requests answered OK (gRPC and HTTP).", {},
                   static_cast<double>(handlers_->requests()));
    out.AddCounter("pstrain_prediction_failed_requests_total",
                   "Predict requests answered with an error (gRPC and HTTP).", {},
                   static_cast<double>(handlers_->failed_requests()));
    out.AddCounter("pstrain_prediction_batches_total", "Model calls made for batches.", {},
                   static_cast<double>(b.batches));
    out.AddCounter("pstrain_prediction_merged_batches_total",
                   "Model calls that merged two or more requests.", {},
                   static_cast<double>(b.merged_batches));
    out.AddCounter("pstrain_prediction_batched_examples_total", "Examples predicted in batches.",
                   {}, static_cast<double>(b.examples));
    out.AddGauge("pstrain_prediction_latency_p50_seconds",
                 "Median server-side latency of the last successful requests.", {},
                 absl::ToDoubleSeconds(l.p50));
    out.AddGauge("pstrain_prediction_latency_p99_seconds",
                 "99th percentile server-side latency of the last successful requests.", {},
                 absl::ToDoubleSeconds(l.p99));
  }

  std::string model_name_;
  std::string grpc_address_;
  MetricsRegistry* metrics_ = nullptr;
  int collector_ = -1;
  std::unique_ptr<ModelVersions> versions_;
  std::unique_ptr<PredictionBatcher> batcher_;
  std::unique_ptr<PredictionHandlers> handlers_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<RawUnaryService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<HttpEndpoint> http_;
  absl::Mutex mu_;
  // Below: guarded by mu_.
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PredictionServer>> PredictionServer::Start(
    const PredictionServerOptions& options) {
  PredictionServerOptions o = options;
  if (o.model_name.empty()) o.model_name = DefaultModelName(o.model_base);
  RETURN_IF_ERROR(Validate(o));
  auto server = std::make_unique<PredictionServerImpl>();
  absl::Status s = server->Init(o);
  if (!s.ok()) return s;
  return std::unique_ptr<PredictionServer>(std::move(server));
}

}  // namespace pstrain
