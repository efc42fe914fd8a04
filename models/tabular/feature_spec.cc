#include "models/tabular/feature_spec.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "common/json_parse.h"
#include "ps/optimizers.h"
#include "ps/staleness.h"

namespace pstrain {
namespace tabular {
namespace {

using Json = nlohmann::json;

// A JSON object being read: each Take* removes the key it reads, so that Finish() can name any
// key left over (unknown to the spec). Errors name the spec file and the key's path.
class Object {
 public:
  Object(const Json& j, std::string path, const std::string* file)
      : j_(j), path_(std::move(path)), file_(file) {
    if (!j.is_object()) return;  // the caller reports it; a non-object has no keys to list
    for (auto it = j.begin(); it != j.end(); ++it) left_.insert(it.key());
  }

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(*file_, ": ", Path(key), ": ", what));
  }
  std::string Path(absl::string_view key) const {
    if (key.empty()) return path_.empty() ? "the spec" : path_;
    return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
  }
  bool Has(const std::string& key) const { return j_.contains(key); }

  const Json* Take(const std::string& key) {
    left_.erase(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  absl::StatusOr<std::string> String(const std::string& key, std::optional<std::string> fallback) {
    const Json* v = Take(key);
    if (v == nullptr) {
      if (!fallback.has_value()) return Error(key, "is required");
      return *fallback;
    }
    if (!v->is_string()) return Error(key, "must be a string");
    return v->get<std::string>();
  }
  absl::StatusOr<double> Number(const std::string& key, double fallback) {
    const Json* v = Take(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return Error(key, "must be a number");
    return v->get<double>();
  }
  absl::StatusOr<int64_t> Int(const std::string& key, int64_t fallback) {
    const Json* v = Take(key);
    if (v == nullptr) return fallback;
    if (!v->is_number_integer()) return Error(key, "must be an integer");
    return v->get<int64_t>();
  }
  absl::StatusOr<std::vector<std::string>> Strings(const std::string& key) {
    const Json* v = Take(key);
    std::vector<std::string> out;
    if (v == nullptr) return out;
    if (!v->is_array()) return Error(key, "must be an array of strings");
    for (const Json& e : *v) {
      if (e.is_string()) {
        out.push_back(e.get<std::string>());
      } else if (e.is_number_integer()) {
        out.push_back(std::to_string(e.get<int64_t>()));  // label values such as [1]
      } else {
        return Error(key, "must be an array of strings");
      }
    }
    return out;
  }
  absl::StatusOr<std::vector<double>> Numbers(const std::string& key) {
    const Json* v = Take(key);
    std::vector<double> out;
    if (v == nullptr) return out;
    if (!v->is_array()) return Error(key, "must be an array of numbers");
    for (const Json& e : *v) {
      if (!e.is_number()) return Error(key, "must be an array of numbers");
      out.push_back(e.get<double>());
    }
    return out;
  }
  absl::Status Finish() const {
    if (left_.empty()) return absl::OkStatus();
    return Error("", absl::StrCat("unknown field", left_.size() > 1 ? "s " : " ",
                                  absl::StrJoin(left_, ", ")));
  }

 private:
  const Json& j_;
  const std::string path_;
  const std::string* file_;
  std::set<std::string> left_;
};

// `options` names the choices in the message.
template <typename E>
absl::StatusOr<E> Choice(Object& o, const std::string& key, const std::string& fallback,
                         const std::vector<std::pair<const char*, E>>& options) {
  // An empty fallback: the key is required.
  ASSIGN_OR_RETURN(std::string text,
                   o.String(key, fallback.empty() ? std::nullopt : std::optional(fallback)));
  std::vector<std::string> names;
  for (const auto& [name, value] : options) {
    if (text == name) return value;
    names.push_back(name);
  }
  return o.Error(key, absl::StrCat("'", text, "' is not one of ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<LabelSpec> ParseLabel(const Json& j, const std::string& file) {
  Object o(j, "label", &file);
  if (!j.is_object()) return o.Error("", "must be an object");
  LabelSpec l;
  ASSIGN_OR_RETURN(l.column, o.String("column", std::nullopt));
  ASSIGN_OR_RETURN(l.task, (Choice<Task>(o, "task", "binary",
                                         {{"binary", Task::kBinary},
                                          {"regression", Task::kRegression},
                                          {"multiclass", Task::kMulticlass}})));
  if (l.task == Task::kBinary) {
    ASSIGN_OR_RETURN(l.positive, o.Strings("positive"));
    ASSIGN_OR_RETURN(l.negative, o.Strings("negative"));
    if (const Json* t = o.Take("threshold"); t != nullptr) {
      if (!t->is_number()) return o.Error("threshold", "must be a number");
      l.threshold = t->get<double>();
      if (!l.positive.empty() || !l.negative.empty()) {
        return o.Error("threshold", "goes without positive and negative");
      }
    }
    if (l.positive.empty() != l.negative.empty()) {
      return o.Error(l.positive.empty() ? "positive" : "negative",
                     "is needed with the other (both lists, or neither for 0/1 labels)");
    }
    for (const std::string& p : l.positive) {
      for (const std::string& n : l.negative) {
        if (p == n) return o.Error("positive", absl::StrCat("'", p, "' is negative too"));
      }
    }
  } else if (l.task == Task::kMulticlass) {
    ASSIGN_OR_RETURN(l.classes, o.Strings("classes"));
    std::set<std::string> seen;
    for (const std::string& c : l.classes) {
      if (!seen.insert(c).second) return o.Error("classes", absl::StrCat("'", c, "' is listed twice"));
    }
    if (!l.classes.empty() && l.classes.size() < 2) {
      return o.Error("classes", "needs at least 2 classes");
    }
  }
  RETURN_IF_ERROR(o.Finish());
  return l;
}

absl::StatusOr<FeatureSpec> ParseFeature(const Json& j, const std::string& path,
                                         const std::string& file) {
  Object o(j, path, &file);
  if (!j.is_object()) return o.Error("", "must be an object");
  FeatureSpec f;
  ASSIGN_OR_RETURN(f.name, o.String("name", std::nullopt));
  if (f.name.empty()) return o.Error("name", "must not be empty");
  ASSIGN_OR_RETURN(f.type, (Choice<FeatureType>(o, "type", "categorical",
                                                {{"categorical", FeatureType::kCategorical},
                                                 {"numeric", FeatureType::kNumeric},
                                                 {"datetime", FeatureType::kDatetime},
                                                 {"cross", FeatureType::kCross}})));
  if (f.type == FeatureType::kCross) {
    ASSIGN_OR_RETURN(f.of, o.Strings("of"));
    if (f.of.size() < 2) return o.Error("of", "must name at least 2 features");
  } else {
    ASSIGN_OR_RETURN(f.column, o.String("column", std::nullopt));
  }
  switch (f.type) {
    case FeatureType::kCategorical: {
      ASSIGN_OR_RETURN(f.separator, o.String("separator", ""));
      ASSIGN_OR_RETURN(f.pooling, (Choice<Pooling>(o, "pooling", "sum",
                                                   {{"sum", Pooling::kSum}, {"mean", Pooling::kMean}})));
      ASSIGN_OR_RETURN(int64_t max_values, o.Int("max_values", f.max_values));
      if (max_values < 1 || max_values > 1024) return o.Error("max_values", "must be in [1, 1024]");
      f.max_values = static_cast<int>(max_values);
      if (f.separator.empty() && (o.Has("pooling") || o.Has("max_values"))) {
        return o.Error("separator", "is needed for pooling and max_values (multi-valued features)");
      }
      break;
    }
    case FeatureType::kNumeric: {
      ASSIGN_OR_RETURN(f.transform, (Choice<NumericTransform>(
                                        o, "transform", "standardize",
                                        {{"standardize", NumericTransform::kStandardize},
                                         {"none", NumericTransform::kNone},
                                         {"bucketize", NumericTransform::kBucketize}})));
      ASSIGN_OR_RETURN(f.boundaries, o.Numbers("boundaries"));
      ASSIGN_OR_RETURN(int64_t q, o.Int("quantiles", 0));
      if (f.transform == NumericTransform::kBucketize) {
        if (f.boundaries.empty() == (q == 0)) {
          return o.Error("transform", "bucketize needs either boundaries or quantiles");
        }
        if (q != 0 && (q < 2 || q > 10000)) return o.Error("quantiles", "must be in [2, 10000]");
        for (size_t i = 1; i < f.boundaries.size(); ++i) {
          if (!(f.boundaries[i] > f.boundaries[i - 1])) {
            return o.Error("boundaries", "must increase");
          }
        }
        f.quantiles = static_cast<int>(q);
      } else if (!f.boundaries.empty() || q != 0) {
        return o.Error(f.boundaries.empty() ? "quantiles" : "boundaries",
                       "goes with \"transform\": \"bucketize\"");
      }
      break;
    }
    case FeatureType::kDatetime: {
      ASSIGN_OR_RETURN(f.part, (Choice<DatePart>(o, "part", "",
                                                 {{"year", DatePart::kYear},
                                                  {"month", DatePart::kMonth},
                                                  {"day", DatePart::kDay},
                                                  {"weekday", DatePart::kWeekday},
                                                  {"day_of_year", DatePart::kDayOfYear},
                                                  {"hour", DatePart::kHour},
                                                  {"minute_of_day", DatePart::kMinuteOfDay},
                                                  {"time_slot", DatePart::kTimeSlot}})));
      ASSIGN_OR_RETURN(int64_t slot, o.Int("slot_minutes", 15));
      if (slot < 1 || slot > 1440) return o.Error("slot_minutes", "must be in [1, 1440]");
      if (o.Has("slot_minutes") && f.part != DatePart::kTimeSlot) {
        return o.Error("slot_minutes", "goes with \"part\": \"time_slot\"");
      }
      f.slot_minutes = static_cast<int>(slot);
      break;
    }
    case FeatureType::kCross:
      break;
  }
  if (f.embedded()) {
    ASSIGN_OR_RETURN(f.min_count, o.Int("min_count", 0));
    if (f.min_count < 0) return o.Error("min_count", "must be >= 0");
  }
  if (f.type == FeatureType::kCategorical || f.type == FeatureType::kDatetime) {
    ASSIGN_OR_RETURN(f.unknown_fraction, o.Number("unknown_fraction", 0));
    if (!(f.unknown_fraction >= 0 && f.unknown_fraction < 1)) {
      return o.Error("unknown_fraction", "must be in [0, 1)");
    }
    if (f.unknown_fraction > 0 && !f.separator.empty()) {
      return o.Error("unknown_fraction", "is for single-valued features");
    }
  }
  RETURN_IF_ERROR(o.Finish());
  return f;
}

// An optimizer part: {"kind": "adagrad", "learning_rate": 0.05, "schedule": {...}, ...}.
absl::StatusOr<OptimizerDef> ParseOptimizer(const Json& j, const std::string& path,
                                            const std::string& file, OptimizerDef def,
                                            bool* has_schedule) {
  Object o(j, path, &file);
  if (!j.is_object()) return o.Error("", "must be an object");
  ASSIGN_OR_RETURN(OptimizerDef::Kind kind,
                   (Choice<OptimizerDef::Kind>(
                       o, "kind", absl::AsciiStrToLower(OptimizerDef::Kind_Name(def.kind())),
                       {{"sgd", OptimizerDef::SGD},
                        {"momentum", OptimizerDef::MOMENTUM},
                        {"adagrad", OptimizerDef::ADAGRAD},
                        {"adam", OptimizerDef::ADAM},
                        {"ftrl", OptimizerDef::FTRL}})));
  if (kind != def.kind()) {
    def = OptimizerDef();
    def.set_kind(kind);
  }
  // Keras's names for the hyperparameters.
  struct Field {
    const char* name;
    void (OptimizerDef::*set)(double);
  };
  const Field fields[] = {{"learning_rate", &OptimizerDef::set_learning_rate},
                          {"momentum", &OptimizerDef::set_momentum},
                          {"initial_accumulator_value", &OptimizerDef::set_initial_accumulator_value},
                          {"epsilon", &OptimizerDef::set_epsilon},
                          {"beta_1", &OptimizerDef::set_beta_1},
                          {"beta_2", &OptimizerDef::set_beta_2},
                          {"learning_rate_power", &OptimizerDef::set_learning_rate_power},
                          {"l1_regularization_strength", &OptimizerDef::set_l1_regularization_strength},
                          {"l2_regularization_strength", &OptimizerDef::set_l2_regularization_strength}};
  for (const Field& f : fields) {
    if (const Json* v = o.Take(f.name); v != nullptr) {
      if (!v->is_number()) return o.Error(f.name, "must be a number");
      (def.*f.set)(v->get<double>());
    }
  }
  if (const Json* v = o.Take("staleness"); v != nullptr) {
    if (!v->is_string()) return o.Error("staleness", "must be none, inverse or inverse_sqrt");
    absl::StatusOr<OptimizerDef::StalenessScaling> s =
        ParseStalenessScaling(v->get<std::string>());
    if (!s.ok()) return o.Error("staleness", "must be none, inverse or inverse_sqrt");
    def.set_staleness_scaling(*s);
  }
  if (const Json* v = o.Take("nesterov"); v != nullptr) {
    if (!v->is_boolean()) return o.Error("nesterov", "must be true or false");
    def.set_nesterov(v->get<bool>());
  }
  if (const Json* s = o.Take("schedule"); s != nullptr) {
    Object so(*s, o.Path("schedule"), &file);
    if (!s->is_object()) return so.Error("", "must be an object");
    LearningRateSchedule& sc = *def.mutable_schedule();
    ASSIGN_OR_RETURN(LearningRateSchedule::Kind k,
                     (Choice<LearningRateSchedule::Kind>(
                         so, "kind", "",
                         {{"constant", LearningRateSchedule::CONSTANT},
                          {"exponential_decay", LearningRateSchedule::EXPONENTIAL_DECAY},
                          {"piecewise_constant", LearningRateSchedule::PIECEWISE_CONSTANT},
                          {"cosine_decay", LearningRateSchedule::COSINE_DECAY}})));
    sc.set_kind(k);
    ASSIGN_OR_RETURN(int64_t decay_steps, so.Int("decay_steps", 0));
    ASSIGN_OR_RETURN(double decay_rate, so.Number("decay_rate", 0));
    sc.set_decay_steps(decay_steps);
    sc.set_decay_rate(decay_rate);
    if (const Json* v = so.Take("staircase"); v != nullptr) {
      if (!v->is_boolean()) return so.Error("staircase", "must be true or false");
      sc.set_staircase(v->get<bool>());
    }
    ASSIGN_OR_RETURN(std::vector<double> boundaries, so.Numbers("boundaries"));
    for (double b : boundaries) {
      if (b != static_cast<double>(static_cast<int64_t>(b))) {
        return so.Error("boundaries", "must be whole steps");
      }
      sc.add_boundaries(static_cast<int64_t>(b));
    }
    ASSIGN_OR_RETURN(std::vector<double> values, so.Numbers("values"));
    for (double v : values) sc.add_values(v);
    ASSIGN_OR_RETURN(double alpha, so.Number("alpha", 0));
    ASSIGN_OR_RETURN(int64_t warmup_steps, so.Int("warmup_steps", 0));
    ASSIGN_OR_RETURN(double warmup_target, so.Number("warmup_target", 0));
    sc.set_alpha(alpha);
    sc.set_warmup_steps(warmup_steps);
    sc.set_warmup_target(warmup_target);
    RETURN_IF_ERROR(so.Finish());
    if (absl::Status v = ValidateSchedule(sc); !v.ok()) {
      return so.Error("", absl::StripPrefix(v.message(), "learning-rate schedule: "));
    }
    *has_schedule = true;
  }
  RETURN_IF_ERROR(o.Finish());
  // The rest of the checks (a rate > 0, ranges) are the ps's, with its words.
  absl::StatusOr<std::unique_ptr<Optimizer>> check = Optimizer::Create(def);
  if (!check.ok()) return o.Error("", check.status().message());
  return def;
}

OptimizerDef Adagrad(double rate) {
  OptimizerDef d;
  d.set_kind(OptimizerDef::ADAGRAD);
  d.set_learning_rate(rate);
  return d;
}

absl::StatusOr<ModelSpec> ParseModel(const Json& j, const std::string& file) {
  Object o(j, "model", &file);
  if (!j.is_object()) return o.Error("", "must be an object");
  ModelSpec m;
  ASSIGN_OR_RETURN(m.type, (Choice<ModelType>(o, "type", "deep",
                                              {{"wide", ModelType::kWide},
                                               {"deep", ModelType::kDeep},
                                               {"wide_and_deep", ModelType::kWideAndDeep}})));
  ASSIGN_OR_RETURN(m.embedding_dim, o.Int("embedding_dim", m.embedding_dim));
  if (m.embedding_dim < 1 || m.embedding_dim > 4096) {
    return o.Error("embedding_dim", "must be in [1, 4096]");
  }
  if (const Json* h = o.Take("hidden"); h != nullptr) {
    if (!h->is_array()) return o.Error("hidden", "must be an array of layer widths");
    m.hidden.clear();
    for (const Json& w : *h) {
      if (!w.is_number_integer() || w.get<int64_t>() < 1 || w.get<int64_t>() > 65536) {
        return o.Error("hidden", "widths must be integers in [1, 65536]");
      }
      m.hidden.push_back(w.get<int64_t>());
    }
  }
  ASSIGN_OR_RETURN(m.interaction, (Choice<Interaction>(o, "interaction", "none",
                                                       {{"none", Interaction::kNone},
                                                        {"dot", Interaction::kDot}})));
  ASSIGN_OR_RETURN(m.init_stddev, o.Number("init_stddev", m.init_stddev));
  if (!(m.init_stddev >= 0 && m.init_stddev <= 10)) return o.Error("init_stddev", "must be in [0, 10]");
  ASSIGN_OR_RETURN(const std::string rows, o.String("row_format", "float32"));
  if (!ParseRowFormat(rows, &m.row_format).ok()) {
    return o.Error("row_format", "must be float32, float16, bfloat16 or int8");
  }
  ASSIGN_OR_RETURN(const std::string slots, o.String("slot_format", "float32"));
  if (!ParseSlotFormat(slots, &m.slot_format).ok()) {
    return o.Error("slot_format", "must be float32, float16 or bfloat16");
  }
  m.embeddings = Adagrad(0.05);
  m.wide = Adagrad(0.05);
  m.dense = Adagrad(0.2);
  if (const Json* opts = o.Take("optimizers"); opts != nullptr) {
    Object oo(*opts, o.Path("optimizers"), &file);
    if (!opts->is_object()) return oo.Error("", "must be an object");
    struct Part {
      const char* name;
      OptimizerDef* def;
      bool* schedule;
      bool* given;
    };
    const Part parts[] = {
        {"embeddings", &m.embeddings, &m.embeddings_schedule, &m.embeddings_given},
        {"wide", &m.wide, &m.wide_schedule, &m.wide_given},
        {"dense", &m.dense, &m.dense_schedule, &m.dense_given}};
    for (const Part& p : parts) {
      if (const Json* v = oo.Take(p.name); v != nullptr) {
        ASSIGN_OR_RETURN(*p.def, ParseOptimizer(*v, oo.Path(p.name), file, *p.def, p.schedule));
        *p.given = true;
      }
    }
    RETURN_IF_ERROR(oo.Finish());
  }
  if (m.type == ModelType::kWide && m.interaction != Interaction::kNone) {
    return o.Error("interaction", "needs a deep part (type deep or wide_and_deep)");
  }
  RETURN_IF_ERROR(o.Finish());
  return m;
}

absl::StatusOr<SplitSpec> ParseSplit(const Json& j, const std::string& file) {
  Object o(j, "split", &file);
  if (!j.is_object()) return o.Error("", "must be an object");
  SplitSpec s;
  ASSIGN_OR_RETURN(s.test_data, o.String("test_data", ""));
  ASSIGN_OR_RETURN(s.test_fraction, o.Number("test_fraction", s.test_fraction));
  if (const Json* t = o.Take("test"); t != nullptr) {
    Object to(*t, o.Path("test"), &file);
    if (!t->is_object()) return to.Error("", "must be an object");
    ASSIGN_OR_RETURN(s.test_column, to.String("column", std::nullopt));
    ASSIGN_OR_RETURN(s.test_at_least, to.String("at_least", std::nullopt));
    RETURN_IF_ERROR(to.Finish());
  }
  const int ways = (s.test_column.empty() ? 0 : 1) + (s.test_data.empty() ? 0 : 1) +
                   (o.Has("test_fraction") ? 1 : 0);
  if (ways > 1) return o.Error("", "give one of test, test_fraction and test_data");
  if (!(s.test_fraction > 0 && s.test_fraction < 1)) {
    return o.Error("test_fraction", "must be in (0, 1)");
  }
  RETURN_IF_ERROR(o.Finish());
  return s;
}

}  // namespace

const char* TaskName(Task task) {
  switch (task) {
    case Task::kBinary: return "binary";
    case Task::kRegression: return "regression";
    case Task::kMulticlass: return "multiclass";
  }
  return "?";
}

int Spec::FeatureIndex(absl::string_view name) const {
  for (size_t i = 0; i < features.size(); ++i) {
    if (features[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<Spec> ParseSpec(absl::string_view json_text, const std::string& path) {
  absl::StatusOr<Json> parsed = ParseJson(json_text, /*ignore_comments=*/true);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
  }
  const Json& j = *parsed;
  Object o(j, "", &path);
  if (!j.is_object()) return o.Error("", "must be a JSON object");
  Spec s;
  s.path = path;
  s.text = std::string(json_text);
  const Json* label = o.Take("label");
  if (label == nullptr) return o.Error("label", "is required");
  ASSIGN_OR_RETURN(s.label, ParseLabel(*label, path));
  const Json* features = o.Take("features");
  if (features == nullptr) return o.Error("features", "is required");
  if (!features->is_array() || features->empty()) {
    return o.Error("features", "must be a non-empty array");
  }
  for (size_t i = 0; i < features->size(); ++i) {
    ASSIGN_OR_RETURN(FeatureSpec f,
                     ParseFeature((*features)[i], absl::StrCat("features[", i, "]"), path));
    if (s.FeatureIndex(f.name) >= 0) {
      return o.Error(absl::StrCat("features[", i, "].name"),
                     absl::StrCat("'", f.name, "' is used twice"));
    }
    s.features.push_back(std::move(f));
  }
  // Crosses name earlier or later features that are single-valued and embedded.
  bool any_embedded = false;
  for (size_t i = 0; i < s.features.size(); ++i) {
    const FeatureSpec& f = s.features[i];
    any_embedded |= f.embedded();
    if (f.column == s.label.column && !f.column.empty()) {
      return o.Error(absl::StrCat("features[", i, "].column"),
                     absl::StrCat("'", f.column, "' is the label"));
    }
    for (const std::string& name : f.of) {
      const int k = s.FeatureIndex(name);
      const std::string where = absl::StrCat("features[", i, "].of");
      if (k < 0) return o.Error(where, absl::StrCat("no feature named '", name, "'"));
      const FeatureSpec& g = s.features[k];
      if (g.type == FeatureType::kCross) {
        return o.Error(where, absl::StrCat("'", name, "' is a cross: list its features instead"));
      }
      if (!g.embedded()) {
        return o.Error(where, absl::StrCat("'", name,
                                           "' is a dense numeric feature: bucketize it to cross it"));
      }
      if (!g.separator.empty()) {
        return o.Error(where, absl::StrCat("'", name, "' is multi-valued and can't be crossed"));
      }
    }
  }
  if (const Json* split = o.Take("split"); split != nullptr) {
    ASSIGN_OR_RETURN(s.split, ParseSplit(*split, path));
  }
  if (const Json* model = o.Take("model"); model != nullptr) {
    ASSIGN_OR_RETURN(s.model, ParseModel(*model, path));
  } else {
    s.model.embeddings = Adagrad(0.05);
    s.model.wide = Adagrad(0.05);
    s.model.dense = Adagrad(0.2);
  }
  // Defaults scaled to the number of inputs, one per feature (feature_spec.h); a part the spec
  // names keeps the rate it gives (0.05 if it gives none).
  const double sparse_rate = DefaultSparseRate(static_cast<int64_t>(s.features.size()));
  if (!s.model.embeddings_given) s.model.embeddings.set_learning_rate(sparse_rate);
  if (!s.model.wide_given) s.model.wide.set_learning_rate(sparse_rate);
  if (!any_embedded && s.model.type == ModelType::kWide) {
    // A wide model over numeric features only is linear regression on them: fine.
  }
  ASSIGN_OR_RETURN(std::string delimiter, o.String("delimiter", ","));
  if (delimiter == "\\t" || delimiter == "tab") delimiter = "\t";
  if (delimiter.size() != 1 || delimiter == "\"" || delimiter == "\n" || delimiter == "\r") {
    return o.Error("delimiter", "must be one character (not a quote or a line end)");
  }
  s.delimiter = delimiter[0];
  if (o.Has("missing_values")) {
    ASSIGN_OR_RETURN(s.missing_values, o.Strings("missing_values"));
  }
  RETURN_IF_ERROR(o.Finish());
  return s;
}

double DefaultSparseRate(int64_t inputs) {
  return 0.05 * std::min(1.0, 16.0 / static_cast<double>(std::max<int64_t>(inputs, 1)));
}

absl::StatusOr<Spec> ReadSpec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open the feature spec ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().size() > (size_t{16} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 16 MiB; not a spec"));
  }
  return ParseSpec(text.str(), path);
}

}  // namespace tabular
}  // namespace pstrain
