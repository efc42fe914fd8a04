#include "cluster/cluster_spec.h"

#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_util.h"
#include "common/json_parse.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace pstrain {
namespace {

using Json = nlohmann::json;

constexpr const char* kValidJobs[] = {kChief, kWorker, kPs, kEvaluator};

bool IsValidJob(absl::string_view name) {
  for (const char* job : kValidJobs) {
    if (name == job) return true;
  }
  return false;
}

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("invalid cluster spec: ", message));
}

absl::Status ValidateTask(const ClusterSpec::Jobs& jobs, const TaskRef& task) {
  if (!IsValidJob(task.type)) {
    return Invalid(absl::StrCat("task type \"", task.type,
                                "\" is not a valid job name (chief, worker, ps, evaluator)"));
  }
  if (task.index < 0) {
    return Invalid(absl::StrCat("task index ", task.index, " is negative"));
  }
  auto it = jobs.find(task.type);
  if (it == jobs.end()) {
    // TF lets an evaluator run outside the cluster.
    if (task.type == kEvaluator) return absl::OkStatus();
    return Invalid(absl::StrCat("task type \"", task.type, "\" not found in cluster"));
  }
  if (task.index >= static_cast<int>(it->second.size())) {
    return Invalid(absl::StrCat("task index ", task.index, " is out of range for job \"",
                                task.type, "\" with ", it->second.size(), " task(s)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TaskRef::ToString() const { return absl::StrCat(type, ":", index); }

absl::StatusOr<TaskRef> ParseTaskRef(absl::string_view text) {
  size_t colon = text.find(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("task \"", text, "\" is not type:index (e.g. ps:0)"));
  }
  TaskRef task;
  task.type = std::string(text.substr(0, colon));
  absl::string_view index = text.substr(colon + 1);
  if (!IsValidJob(task.type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task \"", text, "\": type \"", task.type,
        "\" is not a valid job name (chief, worker, ps, evaluator)"));
  }
  if (index.empty() || !absl::ascii_isdigit(index[0]) || !absl::SimpleAtoi(index, &task.index)) {
    return absl::InvalidArgumentError(
        absl::StrCat("task \"", text, "\": index \"", index, "\" is not a non-negative integer"));
  }
  return task;
}

absl::StatusOr<ClusterSpec> ClusterSpec::Create(Jobs jobs, std::optional<TaskRef> task,
                                                SpecUse use) {
  absl::flat_hash_map<std::string, std::string> owner_of_address;
  for (const auto& [name, tasks] : jobs) {
    if (!IsValidJob(name)) {
      return Invalid(absl::StrCat("unrecognized job name \"", name,
                                  "\"; valid job names are chief, worker, ps, evaluator"));
    }
    if (tasks.empty()) return Invalid(absl::StrCat("job \"", name, "\" has no tasks"));
    for (size_t i = 0; i < tasks.size(); ++i) {
      const std::string where = absl::StrCat(name, ":", i);
      absl::Status address_ok = SplitHostPort(tasks[i], nullptr, nullptr);
      if (!address_ok.ok()) {
        return Invalid(absl::StrCat("task ", where, ": ", address_ok.message()));
      }
      int port = 0;
      SplitHostPort(tasks[i], nullptr, &port).IgnoreError();  // validated just above
      if (port == 0) {
        return Invalid(absl::StrCat("task ", where, ": address \"", tasks[i],
                                    "\" has port 0; each task needs a fixed port"));
      }
      auto [it, inserted] = owner_of_address.emplace(tasks[i], where);
      if (!inserted) {
        return Invalid(absl::StrCat("address \"", tasks[i], "\" is used by both ", it->second,
                                    " and ", where));
      }
    }
  }
  for (const char* single : {kChief, kEvaluator}) {
    auto it = jobs.find(single);
    if (it != jobs.end() && it->second.size() > 1) {
      return Invalid(absl::StrCat("the \"", single, "\" job can only have one task, got ",
                                  it->second.size()));
    }
  }
  if (jobs.find(kWorker) == jobs.end()) {
    return Invalid(use == SpecUse::kParameterServer
                       ? "no \"worker\" job; ParameterServerStrategy needs at least one worker"
                       : "no \"worker\" job; a synchronous strategy needs at least one worker");
  }
  if (use == SpecUse::kParameterServer && jobs.find(kPs) == jobs.end()) {
    return Invalid("no \"ps\" job; ParameterServerStrategy needs at least one ps");
  }
  if (task.has_value()) RETURN_IF_ERROR(ValidateTask(jobs, *task));
  return ClusterSpec(std::move(jobs), std::move(task), use);
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromJson(absl::string_view json_text, SpecUse use) {
  absl::StatusOr<Json> parsed = ParseJson(json_text);
  if (!parsed.ok()) return Invalid(std::string(parsed.status().message()));
  const Json& root = *parsed;
  if (!root.is_object()) return Invalid("top level must be a JSON object");
  for (const auto& [key, value] : root.items()) {
    if (key != "cluster" && key != "task" && key != "environment" && key != "rpc_layer") {
      return Invalid(absl::StrCat("unknown field \"", key,
                                  "\" (expected cluster, task, environment, rpc_layer)"));
    }
  }
  if (!root.contains("cluster")) return Invalid("missing field \"cluster\"");
  const Json& cluster = root["cluster"];
  if (!cluster.is_object()) return Invalid("field \"cluster\" must be an object of job -> addresses");

  Jobs jobs;
  for (const auto& [name, tasks] : cluster.items()) {
    if (!tasks.is_array()) {
      return Invalid(absl::StrCat("job \"", name,
                                  "\" must be a list of \"host:port\" strings (sparse jobs, given "
                                  "as an object, are not supported)"));
    }
    std::vector<std::string>& addresses = jobs[name];
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (!tasks[i].is_string()) {
        return Invalid(absl::StrCat("task ", name, ":", i, " must be a \"host:port\" string, got ",
                                    tasks[i].dump()));
      }
      addresses.push_back(tasks[i].get<std::string>());
    }
  }

  std::optional<TaskRef> task;
  if (root.contains("task")) {
    const Json& t = root["task"];
    if (!t.is_object()) return Invalid("field \"task\" must be an object {type, index}");
    if (!t.empty()) {
      for (const auto& [key, value] : t.items()) {
        if (key != "type" && key != "index" && key != "trial") {
          return Invalid(absl::StrCat("unknown field \"task.", key, "\" (expected type, index)"));
        }
      }
      if (!t.contains("type") || !t["type"].is_string()) {
        return Invalid("field \"task.type\" must be a string");
      }
      TaskRef ref;
      ref.type = t["type"].get<std::string>();
      if (t.contains("index")) {
        if (!t["index"].is_number_integer()) {
          return Invalid(absl::StrCat("field \"task.index\" must be an integer, got ",
                                      t["index"].dump()));
        }
        ref.index = t["index"].get<int>();
      }
      task = ref;
    }
  }
  return Create(std::move(jobs), std::move(task), use);
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromFlagValue(absl::string_view value, SpecUse use) {
  absl::string_view trimmed = absl::StripAsciiWhitespace(value);
  if (trimmed.empty()) return Invalid("empty");
  if (trimmed[0] == '{') return FromJson(trimmed, use);
  std::ifstream file{std::string(trimmed)};
  if (!file) {
    return absl::NotFoundError(absl::StrCat(
        "cluster spec file \"", trimmed, "\" can't be read (a --cluster_spec value is JSON "
        "text starting with '{' or the path of a JSON file)"));
  }
  std::stringstream contents;
  contents << file.rdbuf();
  absl::StatusOr<ClusterSpec> spec = FromJson(contents.str(), use);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(),
                        absl::StrCat(trimmed, ": ", spec.status().message()));
  }
  return spec;
}

const std::vector<std::string>& ClusterSpec::tasks(absl::string_view job) const {
  static const std::vector<std::string>* const kNone = new std::vector<std::string>();
  auto it = jobs_.find(std::string(job));
  return it == jobs_.end() ? *kNone : it->second;
}

absl::StatusOr<std::string> ClusterSpec::address(const TaskRef& task) const {
  const std::vector<std::string>& t = tasks(task.type);
  if (task.index < 0 || task.index >= static_cast<int>(t.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", task.ToString(), " is not in the cluster spec"));
  }
  return t[task.index];
}

std::vector<TaskRef> ClusterSpec::AllTasks() const {
  std::vector<TaskRef> all;
  for (const auto& [name, tasks] : jobs_) {
    for (size_t i = 0; i < tasks.size(); ++i) all.push_back({name, static_cast<int>(i)});
  }
  return all;
}

absl::StatusOr<ClusterSpec> ClusterSpec::WithTask(const TaskRef& task) const {
  return Create(jobs_, task, use_);
}

std::string ClusterSpec::ToJson() const {
  Json root;
  root["cluster"] = Json::object();
  for (const auto& [name, tasks] : jobs_) root["cluster"][name] = tasks;
  if (task_.has_value()) root["task"] = {{"type", task_->type}, {"index", task_->index}};
  return root.dump();
}

ClusterDef ClusterSpec::ToProto() const {
  ClusterDef def;
  for (const auto& [name, tasks] : jobs_) {
    JobDef* job = def.add_jobs();
    job->set_name(name);
    for (const std::string& t : tasks) job->add_tasks(t);
  }
  return def;
}

}  // namespace pstrain
