#include "models/fashion_mnist.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/data/image_splits.h"
#include "ps/sharded_variable.h"

namespace pstrain {
namespace {

// Examples per evaluation closure.
constexpr int64_t kEvalChunk = 1000;

// What Setup learns of the data without reading the training images.
struct DataFacts {
  int64_t num_train = 0;
  int64_t num_validation = 0;
  int64_t num_test = 0;
  int64_t height = 0;  // of the test images
  int64_t width = 0;
  int64_t classes = 0;  // the largest training or test label, plus one
};

// The coordinator needs the counts, the image size and the classes, not the training images.
// Errors: the reader's (kNotFound naming a missing file), kInvalidArgument without training
// examples.
absl::StatusOr<DataFacts> ReadDataFacts(const FashionMnistConfig& config) {
  ASSIGN_OR_RETURN(std::vector<int32_t> train_labels,
                   data::ReadImageLabels(data::DataFile(config.data_dir, data::kTrainLabelsFile)));
  ASSIGN_OR_RETURN(
      data::ImageSplit test,
      data::ReadImageSplit(config.data_dir, data::kTestImagesFile, data::kTestLabelsFile));
  DataFacts facts;
  if (config.validation_dir.empty()) {
    for (int64_t r = 0; r < static_cast<int64_t>(train_labels.size()); ++r) {
      ++(data::IsValidationExample(config.seed, r, config.validation_fraction)
             ? facts.num_validation
             : facts.num_train);
    }
  } else {
    facts.num_train = static_cast<int64_t>(train_labels.size());
    ASSIGN_OR_RETURN(
        std::vector<int32_t> labels,
        data::ReadImageLabels(data::DataFile(config.validation_dir, data::kTrainLabelsFile)));
    facts.num_validation = static_cast<int64_t>(labels.size());
  }
  facts.num_test = test.size();
  if (facts.num_train == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        data::DataFile(config.data_dir, data::kTrainLabelsFile), " has no training examples"));
  }
  int32_t max_label = 0;
  for (int32_t y : train_labels) max_label = std::max(max_label, y);
  for (int32_t y : test.labels) max_label = std::max(max_label, y);
  facts.height = test.images.rows;
  facts.width = test.images.cols;
  facts.classes = max_label + 1;
  return facts;
}

class FashionMnistModel final : public Model {
 public:
  FashionMnistModel(FashionMnistModelDef def, FashionMnistConfig config,
                    BuildFashionNetLayout build_net)
      : def_(std::move(def)), config_(std::move(config)), build_net_(std::move(build_net)) {}

  std::string name() const override { return def_.name; }

  absl::Status Setup(ClusterCoordinator* coordinator) override {
    ASSIGN_OR_RETURN(facts_, ReadDataFacts(config_));
    ASSIGN_OR_RETURN(net_, build_net_(facts_.height, facts_.width, facts_.classes));
    PlanSteps();
    RETURN_IF_ERROR(CreateVariables(coordinator));
    std::vector<Tensor> args = FashionMnistDataArgs(
        config_.data_dir, config_.seed, config_.batch_size, config_.dense_turns,
        static_cast<float>(config_.validation_fraction), config_.validation_dir, config_.devices);
    for (Tensor& t : net_->DatasetArgs()) args.push_back(std::move(t));
    ASSIGN_OR_RETURN(dataset_,
                     coordinator->CreatePerWorkerDataset(def_.names.data, std::move(args)));
    return absl::OkStatus();
  }

  int64_t total_steps() const override { return total_steps_; }
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  int64_t examples_per_step() const override { return config_.batch_size; }

  bool has_validation() const override { return facts_.num_validation > 0; }
  std::string validation_metric() const override { return "val_accuracy"; }
  // On the averaged weights once averaging has begun (the averages so far), else the trained ones.
  absl::StatusOr<ModelMetrics> Validate(ClusterCoordinator* coordinator) override {
    ASSIGN_OR_RETURN(int64_t averaged, AveragedSteps(coordinator));
    ModelMetrics m;
    RETURN_IF_ERROR(Score(coordinator, {{"val", facts_.num_validation, 2, averaged, {}}}, &m));
    return m;
  }

  // The last averaged_steps_ steps add the weights they pulled into the averages' sums.
  absl::StatusOr<RemoteValue> ScheduleStep(ClusterCoordinator* coordinator, int64_t step) override {
    const int64_t average = step >= total_steps_ - averaged_steps_ ? 1 : 0;
    return coordinator->Schedule(def_.names.train,
                                 {Tensor::Scalar<int64_t>(step), Tensor::Scalar<int64_t>(average)},
                                 {dataset_});
  }

  // With averaging, the test_* and train_* metrics are the averaged weights'; last_test_* are the
  // trained weights' as they ended. The averages are those the ps holds (the average count's
  // steps' worth: fewer when a best checkpoint from before the end was restored; none, and the
  // trained weights are evaluated, when it is from before the averaging began).
  absl::StatusOr<ModelMetrics> Evaluate(ClusterCoordinator* coordinator) override {
    ASSIGN_OR_RETURN(int64_t averaged, AveragedSteps(coordinator));
    std::vector<Run> runs = {{"test", facts_.num_test, 0, averaged, {}},
                             {"train", train_eval_examples_, 1, averaged, {}}};
    if (averaged > 0) runs.push_back({"last_test", facts_.num_test, 0, 0, {}});
    ModelMetrics m;
    RETURN_IF_ERROR(Score(coordinator, std::move(runs), &m));
    m.notes[def_.network_note] = net_->ToString();
    m.notes["parameters"] = absl::StrCat(net_->num_params());
    m.notes["train_examples"] = absl::StrCat(facts_.num_train);
    m.notes["test_examples"] = absl::StrCat(facts_.num_test);
    m.notes["train_eval_examples"] = absl::StrCat(train_eval_examples_);
    m.notes["averaged_steps"] = absl::StrCat(averaged);
    m.notes["validation_examples"] = absl::StrCat(facts_.num_validation);
    return m;
  }

 private:
  // One evaluation over a split.
  struct Run {
    const char* metric_prefix;
    int64_t examples;
    int64_t split;           // 0 test, 1 train, 2 validation
    int64_t averaged_steps;  // 0: the trained weights
    std::vector<RemoteValue> values;
  };

  // The steps of an epoch and of the run, the training examples evaluated, the averaged steps.
  void PlanSteps() {
    steps_per_epoch_ = (facts_.num_train + config_.batch_size - 1) / config_.batch_size;
    total_steps_ = steps_per_epoch_ * config_.epochs;
    if (config_.max_steps > 0) total_steps_ = std::min(total_steps_, config_.max_steps);
    train_eval_examples_ = std::min(config_.train_eval_examples, facts_.num_train);
    averaged_steps_ = std::min<int64_t>(
        total_steps_,
        static_cast<int64_t>(std::llround(config_.average_epochs * steps_per_epoch_)));
  }

  // The weights (with the optimizer), and with averaging their sums and the count of steps.
  absl::Status CreateVariables(ClusterCoordinator* coordinator) {
    OptimizerDef optimizer;
    optimizer.set_kind(config_.optimizer);
    optimizer.set_learning_rate(config_.learning_rate);
    ApplyLrSchedule(config_.lr_schedule, &optimizer);
    const int shards =
        static_cast<int>(config_.shards > 0 ? config_.shards : coordinator->ps()->num_ps());
    auto create = [&](const char* prefix, bool trained) -> absl::Status {
      for (const VariableSpec& spec :
           net_->Variables(prefix, trained, optimizer, shards, config_.seed)) {
        RETURN_IF_ERROR(coordinator->variables()->Create(spec).status());
      }
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(create(def_.names.weights, /*trained=*/true));
    if (averaged_steps_ == 0) return absl::OkStatus();
    RETURN_IF_ERROR(create(def_.names.averages, /*trained=*/false));
    VariableSpec count;
    count.name = def_.names.average_count;
    count.shape = {1};
    return coordinator->variables()->Create(count).status();
  }

  // The steps the averages' sums hold now (0 without averaging).
  absl::StatusOr<int64_t> AveragedSteps(ClusterCoordinator* coordinator) {
    if (averaged_steps_ == 0) return 0;
    const char* const name = def_.names.average_count;
    ASSIGN_OR_RETURN(ShardedVariable count, coordinator->ps()->Variable(name));
    ASSIGN_OR_RETURN(std::string bytes, count.ReadAll());
    float value = 0;
    if (bytes.size() != sizeof(value)) {
      return absl::InternalError(absl::StrCat(name, ": ", bytes.size(), " bytes"));
    }
    std::memcpy(&value, bytes.data(), sizeof(value));
    return static_cast<int64_t>(std::llround(value));
  }

  // Each run's accuracy and loss into `m` ("<prefix>_accuracy", "<prefix>_loss").
  absl::Status Score(ClusterCoordinator* coordinator, std::vector<Run> runs, ModelMetrics* m) {
    // Schedule every chunk of every run before fetching any, so that every worker takes a share.
    for (Run& run : runs) {
      ASSIGN_OR_RETURN(run.values, ScheduleChunks(
                                       coordinator, def_.names.eval, run.examples, kEvalChunk,
                                       [&run](int64_t begin, int64_t end) {
                                         return std::vector<Tensor>{
                                             Tensor::Scalar<int64_t>(run.split),
                                             Tensor::Scalar<int64_t>(begin),
                                             Tensor::Scalar<int64_t>(end),
                                             Tensor::Scalar<int64_t>(run.averaged_steps)};
                                       },
                                       dataset_));
    }
    for (const Run& run : runs) {
      if (run.examples == 0) continue;
      double loss_sum = 0;
      int64_t correct = 0, count = 0;
      for (const RemoteValue& v : run.values) {
        ASSIGN_OR_RETURN(std::vector<Tensor> out, v.Fetch());
        loss_sum += out[0].scalar<float>();
        correct += out[1].scalar<int64_t>();
        count += out[2].scalar<int64_t>();
      }
      const std::string prefix = run.metric_prefix;
      m->values[prefix + "_accuracy"] = static_cast<double>(correct) / static_cast<double>(count);
      m->values[prefix + "_loss"] = loss_sum / static_cast<double>(count);
    }
    return absl::OkStatus();
  }

  const FashionMnistModelDef def_;
  const FashionMnistConfig config_;
  const BuildFashionNetLayout build_net_;
  // Set by Setup.
  DataFacts facts_;
  std::unique_ptr<FashionNetLayout> net_;
  int64_t train_eval_examples_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t averaged_steps_ = 0;
  PerWorkerDataset dataset_;
};

// The optimizer `name` among the model's. Errors: kInvalidArgument listing them.
absl::StatusOr<FashionMnistOptimizer> FindOptimizer(const FashionMnistModelDef& def,
                                                    const std::string& name) {
  std::vector<std::string> names;
  for (const FashionMnistOptimizer& o : def.optimizers) {
    if (name == o.name) return o;
    names.push_back(o.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(def.name, ": optimizer=", name, " is not one of ", absl::StrJoin(names, ", ")));
}

}  // namespace

absl::StatusOr<FashionMnistConfig> ReadFashionMnistConfig(const FashionMnistModelDef& def,
                                                          const ModelOptions& options,
                                                          ExtraOptions* extra) {
  FashionMnistConfig c;
  if (!options.data.empty()) c.data_dir = options.data;
  const std::string optimizer = extra->GetString("optimizer", def.optimizers.front().name);
  ASSIGN_OR_RETURN(c.shards, extra->GetInt("shards", c.shards));
  ASSIGN_OR_RETURN(c.train_eval_examples,
                   extra->GetInt("train_eval_examples", c.train_eval_examples));
  ASSIGN_OR_RETURN(c.average_epochs, extra->GetDouble("average_epochs", c.average_epochs));
  RETURN_IF_ERROR(extra->Finish());
  ASSIGN_OR_RETURN(FashionMnistOptimizer chosen, FindOptimizer(def, optimizer));
  c.optimizer = chosen.kind;
  c.learning_rate =
      options.learning_rate > 0 ? options.learning_rate : chosen.default_learning_rate;
  c.lr_schedule = options.lr_schedule;
  c.epochs = options.epochs > 0 ? options.epochs : def.epochs;
  c.batch_size = options.batch_size > 0 ? options.batch_size : def.batch_size;
  c.max_steps = options.max_steps;
  c.seed = options.seed;
  c.devices = options.devices;
  c.dense_turns = options.dense_turns;
  // Rounded to float as the workers get it (a float32 closure argument): the same split everywhere.
  c.validation_fraction = static_cast<float>(options.validation_fraction);
  c.validation_dir = options.validation_data;
  if (!(c.validation_fraction >= 0 && c.validation_fraction < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        def.name, ": validation_fraction ", options.validation_fraction, " is outside [0, 1)"));
  }
  return c;
}

absl::Status CheckFashionMnistConfig(const FashionMnistModelDef& def, const FashionMnistConfig& c) {
  struct NonNegative {
    const char* name;
    int64_t value;
  };
  for (const NonNegative& n :
       {NonNegative{"shards", c.shards}, NonNegative{"train_eval_examples", c.train_eval_examples},
        NonNegative{"dense_turns", c.dense_turns}}) {
    if (n.value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(def.name, ": ", n.name, "=", n.value, " must be >= 0"));
    }
  }
  if (!(c.average_epochs >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(def.name, ": average_epochs=", c.average_epochs, " must be >= 0"));
  }
  return absl::OkStatus();
}

std::unique_ptr<Model> NewFashionMnistModel(FashionMnistModelDef def, FashionMnistConfig config,
                                            BuildFashionNetLayout build_net) {
  return std::make_unique<FashionMnistModel>(std::move(def), std::move(config),
                                             std::move(build_net));
}

}  // namespace pstrain
