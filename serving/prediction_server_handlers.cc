#include "serving/prediction_server_handlers.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "nlohmann/json.hpp"
#include "proto/prediction_service.pb.h"

namespace pstrain {
namespace {

using Json = nlohmann::json;

// JSON text of `s`, never throwing: invalid UTF-8 (a column name from a request) is replaced.
std::string JsonText(const Json& j) {
  return j.dump(/*indent=*/-1, /*indent_char=*/' ', /*ensure_ascii=*/false,
                Json::error_handler_t::replace);
}

// The shortest text that reads back as `f` (null for NaN and infinities, which JSON lacks).
void AppendFloat(float f, std::string* out) {
  if (!std::isfinite(f)) {
    out->append("null");
    return;
  }
  char buffer[32];
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), f);
  out->append(buffer, r.ptr);
}

int64_t Percentile(std::vector<int64_t>* values, double q) {
  if (values->empty()) return 0;
  // Nearest rank: the smallest value with at least q of the values at or below it.
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values->size())));
  rank = std::clamp<size_t>(rank, 1, values->size()) - 1;
  std::nth_element(values->begin(), values->begin() + rank, values->end());
  return (*values)[rank];
}

// The SAX handler for ParsePredictJson: a small state machine over the one shape accepted,
//
//   kStart --{--> kBody --"instances"--> kInstancesValue --[--> kInstances --{--> kInstance
//                   |                                             ^   |            |  "<col>"
//                   +--"signature_name"--> kSignature (a string)  |   ]--> kBody   v
//                                                                  +--}------- kField (a scalar)
//
// so nothing deeper is ever built. Any other event stops the parse with an error.
class PredictBodyParser final : public nlohmann::json_sax<Json> {
 public:
  explicit PredictBodyParser(int64_t max_examples) : max_examples_(max_examples) {}

  absl::StatusOr<RawExamples> Finish(bool parsed) {
    if (!error_.ok()) return error_;
    if (!parsed) return absl::InvalidArgumentError("Predict: malformed JSON body");
    if (!saw_instances_) {
      return absl::InvalidArgumentError(
          "Predict: the body has no \"instances\" (expected {\"instances\": [{\"<column>\": "
          "<value>, ...}, ...]})");
    }
    return std::move(examples_);
  }

  bool null() override { return Scalar(""); }
  bool boolean(bool val) override { return Scalar(val ? "true" : "false"); }
  bool number_integer(number_integer_t val) override { return Scalar(absl::StrCat(val)); }
  bool number_unsigned(number_unsigned_t val) override { return Scalar(absl::StrCat(val)); }
  // The number as written: a field reads as the CSV had it.
  bool number_float(number_float_t /*val*/, const string_t& s) override { return Scalar(s); }
  bool string(string_t& val) override {
    if (at_ == At::kSignature) {
      at_ = At::kBody;
      return true;
    }
    return Scalar(std::move(val));
  }
  bool binary(binary_t& /*val*/) override { return Fail("binary values are not JSON text"); }

  bool start_object(std::size_t /*elements*/) override {
    switch (at_) {
      case At::kStart:
        at_ = At::kBody;
        return true;
      case At::kInstances: {
        const int64_t n = static_cast<int64_t>(examples_.rows.size());
        if (n >= max_examples_) {
          error_ = absl::ResourceExhaustedError(absl::StrCat(
              "Predict: more than ", max_examples_, " instances, the server's limit per "
              "request (max_request_examples); split the request"));
          return false;
        }
        examples_.rows.emplace_back();
        at_ = At::kInstance;
        return true;
      }
      default:
        return Unexpected("an object");
    }
  }

  bool key(string_t& val) override {
    if (at_ == At::kBody) {
      if (val == "instances") {
        if (saw_instances_) return Fail("\"instances\" is given twice");
        saw_instances_ = true;
        at_ = At::kInstancesValue;
        return true;
      }
      if (val == "signature_name") {  // TF Serving's clients send it; one signature here
        at_ = At::kSignature;
        return true;
      }
      return Fail(absl::StrCat("unknown key \"", val, "\" (expected \"instances\")"));
    }
    // kInstance: a column.
    const int64_t instance = static_cast<int64_t>(examples_.rows.size()) - 1;
    auto [it, added] = column_index_.try_emplace(val, examples_.columns.size());
    if (added) {
      examples_.columns.push_back(val);
      last_instance_.push_back(-1);
    }
    column_ = it->second;
    if (last_instance_[column_] == instance) {
      return Fail(absl::StrCat("instances[", instance, "]: column \"", val, "\" is given twice"));
    }
    last_instance_[column_] = instance;
    at_ = At::kField;
    return true;
  }

  bool end_object() override {
    if (at_ == At::kInstance) {
      at_ = At::kInstances;
      return true;
    }
    at_ = At::kEnd;  // kBody: the body is done
    return true;
  }

  bool start_array(std::size_t /*elements*/) override {
    if (at_ != At::kInstancesValue) return Unexpected("an array");
    at_ = At::kInstances;
    return true;
  }

  bool end_array() override {
    at_ = At::kBody;  // only the instances array gets here
    return true;
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) override {
    error_ = absl::InvalidArgumentError(absl::StrCat("Predict: malformed JSON body: ", ex.what()));
    return false;
  }

 private:
  enum class At {
    kStart, kBody, kInstancesValue, kInstances, kInstance, kField, kSignature, kEnd
  };

  bool Scalar(std::string value) {
    if (at_ != At::kField) return Unexpected("a string, number, boolean or null");
    std::vector<std::string>& row = examples_.rows.back();
    if (row.size() <= column_) row.resize(column_ + 1);
    row[column_] = std::move(value);
    at_ = At::kInstance;
    return true;
  }

  // A value of the wrong kind where the state machine is.
  bool Unexpected(absl::string_view what) {
    const int64_t instance = static_cast<int64_t>(examples_.rows.size()) - 1;
    switch (at_) {
      case At::kStart:
        return Fail(absl::StrCat("the body is ", what, ", not an object {\"instances\": [...]}"));
      case At::kInstancesValue:
        return Fail(absl::StrCat("\"instances\" is ", what,
                                 ", not an array of objects (one per example)"));
      case At::kInstances:
        return Fail(absl::StrCat("instances[", instance + 1, "] is ", what,
                                 ", not an object of \"<column>\": <value>"));
      case At::kField:
        return Fail(absl::StrCat("instances[", instance, "]: the value of column \"",
                                 examples_.columns[column_], "\" is ", what,
                                 "; a value is a string, number, boolean or null"));
      case At::kSignature:
        return Fail(absl::StrCat("\"signature_name\" is ", what, ", not a string"));
      default:
        return Fail(absl::StrCat("unexpected ", what));
    }
  }

  bool Fail(absl::string_view why) {
    error_ = absl::InvalidArgumentError(absl::StrCat("Predict: bad JSON body: ", why));
    return false;
  }

  const int64_t max_examples_;
  At at_ = At::kStart;
  bool saw_instances_ = false;
  RawExamples examples_;
  absl::flat_hash_map<std::string, size_t> column_index_;
  std::vector<int64_t> last_instance_;  // per column: the last instance that gave it
  size_t column_ = 0;
  absl::Status error_;
};

int MethodIndex(const char* name) {
  const google::protobuf::MethodDescriptor* m = PredictionHandlers::Service()->FindMethodByName(name);
  return m == nullptr ? -1 : m->index();
}

size_t TotalBytes(const std::vector<absl::string_view>& pieces) {
  size_t n = 0;
  for (absl::string_view p : pieces) n += p.size();
  return n;
}

}  // namespace

absl::StatusOr<RawExamples> ParsePredictJson(absl::string_view body, int64_t max_examples) {
  PredictBodyParser parser(max_examples);
  bool parsed = false;
  // nlohmann reports errors to the handler; this catch is only the boundary's guarantee that
  // nothing it throws reaches the server.
  try {
    parsed = Json::sax_parse(body.begin(), body.end(), &parser, Json::input_format_t::json,
                             /*strict=*/true, /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("Predict: malformed JSON body: ", e.what()));
  }
  return parser.Finish(parsed);
}

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 413;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string ErrorJson(const absl::Status& status) {
  return JsonText(Json{{"error", std::string(status.message())},
                       {"code", absl::StatusCodeToString(status.code())}});
}

const google::protobuf::ServiceDescriptor* PredictionHandlers::Service() {
  static const google::protobuf::ServiceDescriptor* service =
      PredictRequest::descriptor()->file()->FindServiceByName("PredictionService");
  return service;
}

PredictionHandlers::PredictionHandlers(std::string model_name, const ModelVersions* versions,
                                       PredictionBatcher* batcher, const PredictionLimits& limits,
                                       int latency_window)
    : model_name_(std::move(model_name)),
      versions_(versions),
      batcher_(batcher),
      limits_(limits),
      predict_method_(MethodIndex("Predict")),
      status_method_(MethodIndex("ModelStatus")),
      latency_us_(static_cast<size_t>(std::max(1, latency_window)), 0) {}

absl::Status PredictionHandlers::Serve(int method, const std::vector<absl::string_view>& request,
                                       const ReplyAllocator& reply) {
  if (method == predict_method_) return ServePredict(request, reply, absl::Now());
  if (method == status_method_) return ServeModelStatus(request, reply);
  return absl::UnimplementedError(
      absl::StrCat("PredictionService method ", method, " is not served here"));
}

absl::Status PredictionHandlers::CheckModelName(absl::string_view name) const {
  if (name.empty() || name == model_name_) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("no model \"", name, "\" here: this server serves \"", model_name_, "\""));
}

absl::StatusOr<PredictionHandlers::Answer> PredictionHandlers::Predict(const RawExamples& examples,
                                                                       absl::Time start) {
  absl::StatusOr<BatchedPrediction> got = batcher_->Predict(examples);
  if (!got.ok()) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    return got.status();
  }
  Answer answer;
  answer.prediction = *std::move(got);
  answer.latency = absl::Now() - start;
  requests_.fetch_add(1, std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    latency_us_[latency_next_] = absl::ToInt64Microseconds(answer.latency);
    latency_next_ = (latency_next_ + 1) % latency_us_.size();
    ++latency_count_;
  }
  return answer;
}

LatencyStats PredictionHandlers::latency() const {
  std::vector<int64_t> values;
  {
    absl::MutexLock lock(&mu_);
    const size_t n = std::min<size_t>(latency_us_.size(), static_cast<size_t>(latency_count_));
    values.assign(latency_us_.begin(), latency_us_.begin() + n);  // the ring's order is no matter
  }
  LatencyStats stats;
  stats.samples = static_cast<int64_t>(values.size());
  stats.p50 = absl::Microseconds(Percentile(&values, 0.5));
  stats.p99 = absl::Microseconds(Percentile(&values, 0.99));
  return stats;
}

absl::Status PredictionHandlers::ServePredict(const std::vector<absl::string_view>& request,
                                              const ReplyAllocator& reply, absl::Time start) {
  // Every error is an answered request too.
  auto fail = [this](absl::Status s) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    return s;
  };
  const size_t bytes = TotalBytes(request);
  if (bytes > static_cast<size_t>(limits_.max_request_bytes)) {
    return fail(absl::ResourceExhaustedError(
        absl::StrCat("Predict: a request of ", bytes, " bytes is over the server's limit of ",
                     limits_.max_request_bytes, " (max_request_bytes); split the request")));
  }
  PredictRequest parsed;
  if (absl::Status s = ParseRequest(request, "Predict", &parsed); !s.ok()) return fail(s);
  if (absl::Status s = CheckModelName(parsed.model_name()); !s.ok()) return fail(s);
  if (parsed.examples().rows_size() > limits_.max_request_examples) {
    return fail(absl::ResourceExhaustedError(absl::StrCat(
        "Predict: ", parsed.examples().rows_size(), " examples is over the server's limit of ",
        limits_.max_request_examples, " per request (max_request_examples); split the request")));
  }
  RawExamples examples;
  TextExamples* text = parsed.mutable_examples();
  examples.columns.assign(std::make_move_iterator(text->mutable_columns()->begin()),
                          std::make_move_iterator(text->mutable_columns()->end()));
  examples.rows.reserve(text->rows_size());
  for (TextRow& row : *text->mutable_rows()) {
    examples.rows.emplace_back(std::make_move_iterator(row.mutable_fields()->begin()),
                               std::make_move_iterator(row.mutable_fields()->end()));
  }
  absl::StatusOr<Answer> answer = Predict(examples, start);
  if (!answer.ok()) return answer.status();
  PredictResponse response;
  response.set_model_name(model_name_);
  const ServableModel& model = *answer->prediction.model;
  response.set_version(model.version());
  for (const std::string& o : model.outputs()) response.add_outputs(o);
  const std::vector<float>& p = answer->prediction.predictions;
  response.mutable_predictions()->Add(p.begin(), p.end());
  response.set_latency_us(absl::ToInt64Microseconds(absl::Now() - start));
  return WriteReply(response, reply);
}

absl::Status PredictionHandlers::ServeModelStatus(const std::vector<absl::string_view>& request,
                                                  const ReplyAllocator& reply) {
  ModelStatusRequest parsed;
  if (absl::Status s = ParseRequest(request, "ModelStatus", &parsed); !s.ok()) return s;
  if (absl::Status s = CheckModelName(parsed.model_name()); !s.ok()) return s;
  ModelStatusResponse response;
  response.set_model_name(model_name_);
  std::shared_ptr<const LoadedVersion> current = versions_->Current();
  response.set_version(current->version());
  response.set_model(current->manifest().model);
  response.set_checkpoint(current->manifest().checkpoint);
  response.set_step(current->manifest().step);
  for (const std::string& c : current->columns()) response.add_columns(c);
  for (const std::string& o : current->outputs()) response.add_outputs(o);
  for (const VersionStatus& v : versions_->Versions()) {
    ModelVersionStatus* out = response.add_versions();
    out->set_version(v.version);
    switch (v.state) {
      case VersionState::kLoading: out->set_state(ModelVersionStatus::LOADING); break;
      case VersionState::kAvailable: out->set_state(ModelVersionStatus::AVAILABLE); break;
      case VersionState::kUnloading: out->set_state(ModelVersionStatus::UNLOADING); break;
      case VersionState::kEnd: out->set_state(ModelVersionStatus::END); break;
      case VersionState::kFailed: out->set_state(ModelVersionStatus::FAILED); break;
    }
    if (!v.error.ok()) out->set_error(v.error.ToString());
  }
  const LatencyStats l = latency();
  response.set_latency_p50_us(absl::ToInt64Microseconds(l.p50));
  response.set_latency_p99_us(absl::ToInt64Microseconds(l.p99));
  response.set_latency_samples(l.samples);
  response.set_requests(requests());
  response.set_failed_requests(failed_requests());
  const BatchStats b = batcher_->stats();
  response.set_batches(b.batches);
  response.set_batched_examples(b.examples);
  return WriteReply(response, reply);
}

HttpReply PredictionHandlers::HttpPredict(absl::string_view model_name, absl::string_view body) {
  const absl::Time start = absl::Now();
  auto error = [this](const absl::Status& s) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    return HttpReply{HttpStatusOf(s.code()), ErrorJson(s)};
  };
  if (absl::Status s = CheckModelName(model_name); !s.ok()) return error(s);
  if (body.size() > static_cast<size_t>(limits_.max_request_bytes)) {
    return error(absl::ResourceExhaustedError(
        absl::StrCat("Predict: a body of ", body.size(), " bytes is over the server's limit of ",
                     limits_.max_request_bytes, " (max_request_bytes); split the request")));
  }
  absl::StatusOr<RawExamples> examples = ParsePredictJson(body, limits_.max_request_examples);
  if (!examples.ok()) return error(examples.status());
  absl::StatusOr<Answer> answer = Predict(*examples, start);
  if (!answer.ok()) return HttpReply{HttpStatusOf(answer.status().code()),
                                     ErrorJson(answer.status())};
  const ServableModel& model = *answer->prediction.model;
  const std::vector<float>& p = answer->prediction.predictions;
  const size_t k = model.outputs().size();
  std::string out = "{\"predictions\": [";
  out.reserve(32 + p.size() * 12);
  for (size_t i = 0; i < examples->rows.size(); ++i) {
    if (i > 0) out.append(", ");
    out.push_back('[');
    for (size_t j = 0; j < k; ++j) {
      if (j > 0) out.append(", ");
      AppendFloat(p[i * k + j], &out);
    }
    out.push_back(']');
  }
  absl::StrAppend(&out, "], \"outputs\": ", JsonText(Json(model.outputs())),
                  ", \"version\": ", model.version(), ", \"model_name\": ",
                  JsonText(Json(model_name_)), ", \"latency_us\": ",
                  absl::ToInt64Microseconds(absl::Now() - start), "}");
  return HttpReply{200, std::move(out)};
}

HttpReply PredictionHandlers::HttpModelStatus(absl::string_view model_name) {
  if (absl::Status s = CheckModelName(model_name); !s.ok()) {
    return HttpReply{HttpStatusOf(s.code()), ErrorJson(s)};
  }
  std::shared_ptr<const LoadedVersion> current = versions_->Current();
  // TF Serving's GetModelStatus in its REST form, then this server's own facts.
  Json versions = Json::array();
  for (const VersionStatus& v : versions_->Versions()) {
    versions.push_back(
        {{"version", std::to_string(v.version)},
         {"state", VersionStateName(v.state)},
         {"status", {{"error_code", absl::StatusCodeToString(v.error.code())},
                     {"error_message", std::string(v.error.message())}}}});
  }
  const LatencyStats l = latency();
  const BatchStats b = batcher_->stats();
  Json j = {{"model_version_status", std::move(versions)},
            {"model_name", model_name_},
            {"version", current->version()},
            {"model", current->manifest().model},
            {"checkpoint", current->manifest().checkpoint},
            {"step", current->manifest().step},
            {"columns", current->columns()},
            {"outputs", current->outputs()},
            {"latency", {{"p50_us", absl::ToInt64Microseconds(l.p50)},
                         {"p99_us", absl::ToInt64Microseconds(l.p99)},
                         {"samples", l.samples}}},
            {"requests", requests()},
            {"failed_requests", failed_requests()},
            {"batches", b.batches},
            {"merged_batches", b.merged_batches},
            {"batched_examples", b.examples}};
  return HttpReply{200, JsonText(j)};
}

}  // namespace pstrain
