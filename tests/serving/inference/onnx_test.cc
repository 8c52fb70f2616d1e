// The ONNX reader's errors and the writer's round trip.
#include "shoal/serving/onnx/onnx.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "shoal/serving/graph/architectures_graph.h"
#include "test_graphs.h"

namespace shoal::inference {
namespace {

using testing::DataPath;
using testing::ReadFloats;
using testing::RunCpu;

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Onnx, UnsupportedOperatorNamesOperatorAndNode) {
  auto g = LoadOnnx(DataPath("lstm.onnx"));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("unsupported operator 'LSTM' (node 'lstm_1')"),
            std::string::npos)
      << g.status().message();
}

TEST(Onnx, NonFloatInputRefused) {
  auto g = LoadOnnx(DataPath("int_input.onnx"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("graph input 'ids' is INT64"), std::string::npos)
      << g.status().message();
}

TEST(Onnx, GarbageTruncatedAndMissingFiles) {
  auto garbage = LoadOnnxBytes("this is not a protobuf \xff\xff\xff\xff");
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("not an ONNX model"), std::string::npos);

  const std::string mlp = FileBytes(DataPath("mlp.onnx"));
  ASSERT_GT(mlp.size(), 1000u);
  for (size_t cut : {mlp.size() / 2, mlp.size() - 3, size_t{10}}) {
    auto t = LoadOnnxBytes(std::string_view(mlp).substr(0, cut));
    EXPECT_FALSE(t.ok()) << "cut at " << cut;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  }
  auto empty = LoadOnnxBytes("");
  EXPECT_FALSE(empty.ok());

  auto missing = LoadOnnx("/nonexistent/model.onnx");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(Onnx, ConstantNodesBecomeInitializers) {
  auto g = LoadOnnx(DataPath("resnet.onnx"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  bool reshape = false;
  for (const Node& n : g->nodes) {
    if (n.op != OpType::kReshape) continue;
    reshape = true;
    ASSERT_EQ(g->initializers.count(n.inputs[1]), 1u);
    EXPECT_EQ(g->initializers.at(n.inputs[1]).ints, (std::vector<int64_t>{-1, 16}));
  }
  EXPECT_TRUE(reshape);
  EXPECT_EQ(g->inputs.size(), 1u);
  EXPECT_EQ(g->inputs[0].shape, (std::vector<int64_t>{-1, 3, 32, 32}));
}

TEST(Onnx, SaveLoadRoundTripKeepsGraphAndOutputs) {
  Graph g = ResNetGraph({.widths = {8, 16},
                         .blocks = {1, 1},
                         .image = 32,
                         .classes = 10,
                         .small_stem = true,
                         .seed = 3});
  ASSERT_TRUE(g.Validate().ok());
  auto bytes = SerializeOnnx(g);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto back = LoadOnnxBytes(*bytes, {.fold_batchnorm = false});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->nodes.size(), g.nodes.size());
  EXPECT_EQ(back->initializers.size(), g.initializers.size());
  for (const auto& [name, init] : g.initializers) {
    ASSERT_EQ(back->initializers.count(name), 1u) << name;
    EXPECT_EQ(back->initializers.at(name).floats, init.floats) << name;
    EXPECT_EQ(back->initializers.at(name).shape, init.shape) << name;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    EXPECT_EQ(back->nodes[i].name, g.nodes[i].name);
    EXPECT_EQ(back->nodes[i].op, g.nodes[i].op);
    EXPECT_EQ(back->nodes[i].attributes, g.nodes[i].attributes) << g.nodes[i].name;
  }
  const auto x = ReadFloats("resnet.input.bin");
  EXPECT_EQ(RunCpu(*back, x, 2), RunCpu(g, x, 2));  // the same outputs, exactly
}

TEST(Onnx, FileWithWeightsReplacesOnlyTheNamedInitializers) {
  Graph g = ResNetGraph({.widths = {8, 16},
                         .blocks = {1, 1},
                         .image = 32,
                         .classes = 10,
                         .small_stem = true,
                         .seed = 3});
  const std::string path = ::testing::TempDir() + "/shoal_with_weights.onnx";
  ASSERT_TRUE(SaveOnnx(g, path).ok());
  const auto& [name, init] = *g.initializers.begin();
  std::vector<float> w(init.floats.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  auto bytes = OnnxFileWithWeights(path, {{name, w}});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto back = LoadOnnxBytes(*bytes, {.fold_batchnorm = false});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->initializers.at(name).floats, w);
  for (const auto& [other, i] : g.initializers) {
    if (other != name) {
      EXPECT_EQ(back->initializers.at(other).floats, i.floats) << other;
    }
  }
  EXPECT_EQ(back->nodes.size(), g.nodes.size());
  w.pop_back();
  EXPECT_EQ(OnnxFileWithWeights(path, {{name, w}}).status().message(),
            path + ": initializer '" + name + "' has " + std::to_string(w.size() + 1) +
                " values, the model's tensor " + std::to_string(w.size()));
  EXPECT_EQ(OnnxFileWithWeights(path, {{"no.such.tensor", {1.0f}}}).status().message(),
            path + ": 1 of the model's tensors are not initializers of the graph");
  EXPECT_EQ(OnnxFileWithWeights(path + ".missing", {}).status().code(), StatusCode::kNotFound);
  std::remove(path.c_str());
}

// onnx.checker is the reference for "other tools load it"; it runs under the venv's Python.
TEST(Onnx, SavedFilePassesOnnxChecker) {
  if (std::system(SHOAL_PYTHON " -c 'import onnx' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << SHOAL_PYTHON << " cannot import onnx (scripts/lib.sh makes the venv)";
  }
  const std::string path = ::testing::TempDir() + "/shoal_saved_mlp.onnx";
  Graph g = MlpGraph(784, {128}, 10);
  ASSERT_TRUE(g.Validate().ok());
  ASSERT_TRUE(SaveOnnx(g, path).ok());
  const std::string cmd = SHOAL_PYTHON
                          " -c 'import onnx, sys; m = onnx.load(sys.argv[1]); "
                          "onnx.checker.check_model(m, full_check=True)' " +
                          path;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace shoal::inference
