// The tabular net's gradients against finite differences of its loss, for each task and model
// type, with a multi-valued mean-pooled feature, dense inputs and the dot interaction.
#include "models/tabular/tabular_net.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/tabular/spec_test_util.h"

namespace pstrain {
namespace tabular {
namespace {

struct Case {
  std::string task;  // binary, regression, multiclass
  std::string type;  // deep, wide, wide_and_deep
  bool dot;
};

class TabularNetGradTest : public ::testing::TestWithParam<Case> {};

TEST_P(TabularNetGradTest, GradientsMatchFiniteDifferences) {
  const Case c = GetParam();
  const int K = c.task == "multiclass" ? 3 : 1;
  std::string label = "{'column': 'y', 'task': '" + c.task + "'";
  if (c.task == "multiclass") label += ", 'classes': ['a', 'b', 'c']";
  label += "}";
  Spec spec = MustParse("{'label': " + label + R"(, 'features': [
      {'name': 'a', 'column': 'a'},
      {'name': 'tags', 'column': 't', 'separator': '|', 'pooling': 'mean', 'max_values': 3},
      {'name': 'b', 'column': 'b'},
      {'name': 'x1', 'type': 'numeric', 'column': 'x1'},
      {'name': 'x2', 'type': 'numeric', 'column': 'x2'}],
    'model': {'type': ')" + c.type + "', 'embedding_dim': 3, 'hidden': [4]" +
                        (c.dot ? ", 'interaction': 'dot'" : "") + "}}");
  ExampleLayout layout(spec);
  NetShape shape(spec, layout, K);
  std::unique_ptr<Device> device = *CreateCpuDevice();
  TabularNet net(device.get(), spec, layout, shape);

  const int64_t n = 4, U = 6, d = shape.dim, D = shape.dense;
  const int S = layout.num_slots;  // 1 + 3 + 1
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 0.5f);
  auto randn = [&](int64_t count) {
    std::vector<float> v(count);
    for (float& x : v) x = normal(rng);
    return v;
  };
  std::vector<int32_t> slot_rows = {0, 1, 2, -1, 3,   //
                                    1, -1, -1, -1, 4,  // no tags: mean of nothing is 0
                                    2, 5, 5, 0, 3,     // a repeated tag counts twice
                                    5, 4, -1, -1, 0};
  ASSERT_EQ(static_cast<int>(slot_rows.size()), n * S);
  std::vector<float> emb = randn(U * d), wide = randn(U * K), base = randn(U * K),
                     dense = randn(n * D);
  std::vector<float> labels;
  for (int64_t i = 0; i < n; ++i) {
    labels.push_back(c.task == "binary" ? static_cast<float>(i % 2)
                     : c.task == "multiclass" ? static_cast<float>(i % 3)
                                              : normal(rng));
  }
  const std::vector<int64_t> widths = shape.widths();
  std::vector<std::vector<float>> w, b;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    w.push_back(randn(widths[l] * widths[l + 1]));
    b.push_back(randn(widths[l + 1]));
  }
  std::vector<float> wide_dense = randn(D * K), wide_bias = randn(K), base_dense = randn(D * K),
                     base_bias = randn(K);

  auto run = [&](NetGrads* grads, NetOutput* out) {
    NetBatch batch;
    batch.n = n;
    batch.num_unique = U;
    batch.slot_rows = slot_rows.data();
    batch.emb = emb.data();
    batch.wide = wide.data();
    batch.base = base.data();
    batch.dense = dense.data();
    batch.labels = labels.data();
    NetParams p;
    for (size_t l = 0; l < w.size(); ++l) {
      p.w.push_back(w[l].data());
      p.b.push_back(b[l].data());
    }
    p.wide_dense = wide_dense.data();
    p.wide_bias = wide_bias.data();
    p.base_dense = base_dense.data();
    p.base_bias = base_bias.data();
    if (grads == nullptr) {
      NetGrads g;
      return net.Run(batch, p, out, &g);
    }
    return net.Run(batch, p, out, grads);
  };
  NetGrads grads;
  NetOutput out;
  ASSERT_TRUE(run(&grads, &out).ok());

  // Central differences of the mean loss (and of the baseline's); tables' gradients are of the
  // summed loss, n times the mean's.
  auto check = [&](std::vector<float>* param, const std::vector<float>& analytic, double scale,
                   bool baseline, const char* what) {
    ASSERT_EQ(param->size(), analytic.size()) << what;
    for (size_t i = 0; i < param->size(); ++i) {
      const float keep = (*param)[i];
      const float h = 1e-2f;
      NetOutput o;
      (*param)[i] = keep + h;
      ASSERT_TRUE(run(nullptr, &o).ok());
      const double plus = baseline ? o.base_loss : o.loss;
      (*param)[i] = keep - h;
      ASSERT_TRUE(run(nullptr, &o).ok());
      const double minus = baseline ? o.base_loss : o.loss;
      (*param)[i] = keep;
      const double numeric = scale * (plus - minus) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << what << "[" << i << "] " << c.task << " " << c.type;
    }
  };
  if (shape.deep) {
    check(&emb, grads.emb, n, false, "emb");
    for (size_t l = 0; l < w.size(); ++l) {
      check(&w[l], grads.w[l], 1, false, "w");
      check(&b[l], grads.b[l], 1, false, "b");
    }
  }
  if (shape.wide) {
    check(&wide, grads.wide, n, false, "wide");
    check(&wide_dense, grads.wide_dense, 1, false, "wide_dense");
    check(&wide_bias, grads.wide_bias, 1, false, "wide_bias");
  }
  if (shape.baseline) {
    check(&base, grads.base, n, true, "base");
    check(&base_dense, grads.base_dense, 1, true, "base_dense");
    check(&base_bias, grads.base_bias, 1, true, "base_bias");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tasks, TabularNetGradTest,
    ::testing::Values(Case{"binary", "deep", false}, Case{"binary", "deep", true},
                      Case{"binary", "wide", false}, Case{"binary", "wide_and_deep", true},
                      Case{"regression", "wide_and_deep", false},
                      Case{"multiclass", "deep", true}, Case{"multiclass", "wide", false}));

TEST(TabularNetLossTest, LossesAgainstTheirFormulas) {
  const float logits[] = {0.0f, 2.0f};
  const float labels[] = {1.0f, 0.0f};
  float g[2];
  // Binary: -log(sigmoid(0)) + -log(1 - sigmoid(2)).
  EXPECT_NEAR(TabularNet::Loss(Task::kBinary, 2, 1, logits, labels, g),
              std::log(2.0) + std::log1p(std::exp(2.0)), 1e-6);
  EXPECT_NEAR(g[0], -0.5, 1e-6);
  EXPECT_NEAR(g[1], 1 / (1 + std::exp(-2.0)), 1e-6);
  EXPECT_NEAR(TabularNet::Loss(Task::kRegression, 2, 1, logits, labels, g), 1 + 4, 1e-6);
  const float three[] = {1.0f, 2.0f, 3.0f};
  const float cls[] = {2.0f};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(TabularNet::Loss(Task::kMulticlass, 1, 3, three, cls, nullptr), lse - 3, 1e-6);
}

}  // namespace
}  // namespace tabular
}  // namespace pstrain
