#include "models/lr_schedule.h"

#include <map>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "ps/optimizers.h"

namespace pstrain {
namespace {

absl::Status Bad(absl::string_view text, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--lr_schedule=", text, ": ", what));
}

}  // namespace

absl::StatusOr<RelativeSchedule> ParseLrSchedule(absl::string_view text) {
  RelativeSchedule out;
  out.text = std::string(text);
  const std::pair<absl::string_view, absl::string_view> kind_args =
      absl::StrSplit(text, absl::MaxSplits(':', 1));
  const absl::string_view kind = absl::StripAsciiWhitespace(kind_args.first);
  // key -> value ("" for a bare key such as staircase), each at most once.
  std::map<std::string, std::string> args;
  if (!kind_args.second.empty()) {
    for (absl::string_view part : absl::StrSplit(kind_args.second, ',')) {
      part = absl::StripAsciiWhitespace(part);
      if (part.empty()) return Bad(text, "an empty key=value");
      const std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(part, absl::MaxSplits('=', 1));
      if (!args.emplace(std::string(kv.first), std::string(kv.second)).second) {
        return Bad(text, absl::StrCat(kv.first, " given twice"));
      }
    }
  }
  auto take = [&](const std::string& key) -> std::optional<std::string> {
    auto it = args.find(key);
    if (it == args.end()) return std::nullopt;
    std::string v = it->second;
    args.erase(it);
    return v;
  };
  auto int_arg = [&](const std::string& key, bool required, int64_t* out) -> absl::Status {
    std::optional<std::string> v = take(key);
    if (!v.has_value()) {
      return required ? Bad(text, absl::StrCat(kind, " needs ", key, "=N")) : absl::OkStatus();
    }
    if (!absl::SimpleAtoi(*v, out)) return Bad(text, absl::StrCat(key, "=", *v, " is not an integer"));
    return absl::OkStatus();
  };
  auto double_arg = [&](const std::string& key, bool required, double* out) -> absl::Status {
    std::optional<std::string> v = take(key);
    if (!v.has_value()) {
      return required ? Bad(text, absl::StrCat(kind, " needs ", key, "=X")) : absl::OkStatus();
    }
    if (!absl::SimpleAtod(*v, out)) return Bad(text, absl::StrCat(key, "=", *v, " is not a number"));
    return absl::OkStatus();
  };
  LearningRateSchedule& u = out.unit;
  if (kind == "constant") {
    u.set_kind(LearningRateSchedule::CONSTANT);
  } else if (kind == "exponential") {
    u.set_kind(LearningRateSchedule::EXPONENTIAL_DECAY);
    int64_t steps = 0;
    double rate = 0;
    RETURN_IF_ERROR(int_arg("decay_steps", true, &steps));
    RETURN_IF_ERROR(double_arg("decay_rate", true, &rate));
    u.set_decay_steps(steps);
    u.set_decay_rate(rate);
    if (std::optional<std::string> s = take("staircase"); s.has_value()) {
      if (*s == "" || *s == "true" || *s == "1") {
        u.set_staircase(true);
      } else if (*s != "false" && *s != "0") {
        return Bad(text, absl::StrCat("staircase=", *s, " is not true or false"));
      }
    }
  } else if (kind == "piecewise") {
    u.set_kind(LearningRateSchedule::PIECEWISE_CONSTANT);
    std::optional<std::string> boundaries = take("boundaries");
    std::optional<std::string> scales = take("scales");
    if (!scales.has_value()) return Bad(text, "piecewise needs scales=S0+S1+...");
    if (boundaries.has_value()) {
      for (absl::string_view b : absl::StrSplit(*boundaries, '+')) {
        int64_t v = 0;
        if (!absl::SimpleAtoi(b, &v)) {
          return Bad(text, absl::StrCat("boundary ", b, " is not an integer"));
        }
        u.add_boundaries(v);
      }
    }
    for (absl::string_view s : absl::StrSplit(*scales, '+')) {
      double v = 0;
      if (!absl::SimpleAtod(s, &v)) return Bad(text, absl::StrCat("scale ", s, " is not a number"));
      u.add_values(v);
    }
  } else if (kind == "cosine") {
    u.set_kind(LearningRateSchedule::COSINE_DECAY);
    int64_t steps = 0, warmup = 0;
    double alpha = 0;
    RETURN_IF_ERROR(int_arg("decay_steps", true, &steps));
    RETURN_IF_ERROR(double_arg("alpha", false, &alpha));
    RETURN_IF_ERROR(int_arg("warmup_steps", false, &warmup));
    RETURN_IF_ERROR(double_arg("warmup_from", false, &out.warmup_from));
    u.set_decay_steps(steps);
    u.set_alpha(alpha);
    u.set_warmup_steps(warmup);
    if (warmup > 0) u.set_warmup_target(1);
    if (!(out.warmup_from >= 0 && out.warmup_from <= 1)) {
      return Bad(text, "warmup_from must be in [0, 1]");
    }
  } else {
    return Bad(text, absl::StrCat("unknown schedule '", kind,
                                  "' (constant, exponential, piecewise, cosine)"));
  }
  if (!args.empty()) {
    return Bad(text, absl::StrCat("unknown key '", args.begin()->first, "' for ", kind));
  }
  if (absl::Status s = ValidateSchedule(u); !s.ok()) {
    return Bad(text, absl::StripPrefix(s.message(), "learning-rate schedule: "));
  }
  return out;
}

void ApplyLrSchedule(const RelativeSchedule& schedule, OptimizerDef* optimizer) {
  if (schedule.is_constant()) return;
  const double rate = optimizer->learning_rate();
  LearningRateSchedule s = schedule.unit;
  if (s.kind() == LearningRateSchedule::PIECEWISE_CONSTANT) {
    for (int i = 0; i < s.values_size(); ++i) s.set_values(i, s.values(i) * rate);
  }
  if (s.kind() == LearningRateSchedule::COSINE_DECAY && s.warmup_steps() > 0) {
    s.set_warmup_target(rate);
    optimizer->set_learning_rate(rate * schedule.warmup_from);
  }
  *optimizer->mutable_schedule() = std::move(s);
}

}  // namespace pstrain
