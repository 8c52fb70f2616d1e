// Tiny graphs for the inference tests: one operator at a time with hand-checkable values.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shoal/serving/executor/executor.h"
#include "shoal/serving/graph/graph.h"

namespace shoal::inference::testing {

// A graph reading "x" of per-sample shape `sample` and writing the last node's output "y".
inline Graph OneInput(std::vector<int64_t> sample) {
  Graph g;
  g.name = "test";
  sample.insert(sample.begin(), -1);
  g.inputs.push_back({"x", DType::kF32, sample});
  g.outputs.push_back({"y", DType::kF32, {}});
  return g;
}

inline void AddInit(Graph& g, const std::string& name, std::vector<int64_t> shape,
                    std::vector<float> values) {
  g.initializers[name] = Initializer{std::move(shape), std::move(values), {}};
}

inline void AddInts(Graph& g, const std::string& name, std::vector<int64_t> values) {
  g.initializers[name] = Initializer{{static_cast<int64_t>(values.size())}, {}, std::move(values)};
}

// Validates, compiles on the executor `kind` ("cpu", "cuda") and runs one batch; fails the test
// on any error.
inline std::vector<float> RunOn(const std::string& kind, Graph g, const std::vector<float>& input,
                                int64_t batch, const ExecutorOptions& options = {}) {
  const Status v = g.Validate();
  EXPECT_TRUE(v.ok()) << v.ToString();
  auto ex = CreateExecutor(kind);
  EXPECT_TRUE(ex.ok()) << ex.status().ToString();
  if (!ex.ok()) return {};
  auto exe = (*ex)->Compile(g, options);
  EXPECT_TRUE(exe.ok()) << exe.status().ToString();
  if (!exe.ok()) return {};
  int64_t per = 1;
  for (int64_t d : (*exe)->output_shape()) per *= d;
  std::vector<float> out(static_cast<size_t>(per * batch), -777.0f);
  const Status r = (*exe)->Run({input, out, batch});
  EXPECT_TRUE(r.ok()) << r.ToString();
  return out;
}

inline std::vector<float> RunCpu(Graph g, const std::vector<float>& input, int64_t batch,
                                 const ExecutorOptions& options = {}) {
  return RunOn("cpu", std::move(g), input, batch, options);
}

// One 1x3x3 channel through a 2x2 convolution of ones with bias 100, padded by one zero row and
// column at the top and left, stride 2: x = 1..9 gives {101, 105, 111, 128} (2x2 sums:
// x00 = 1; x01+x02 = 5; x10+x20 = 11; x11+x12+x21+x22 = 28).
inline Graph PaddedStridedConv() {
  Graph g = OneInput({1, 3, 3});
  AddInit(g, "W", {1, 1, 2, 2}, {1, 1, 1, 1});
  AddInit(g, "b", {1}, {100});
  g.nodes.push_back(
      {OpType::kConv,
       "conv",
       {"x", "W", "b"},
       {"y"},
       {{"pads", std::vector<int64_t>{1, 1, 0, 0}}, {"strides", std::vector<int64_t>{2, 2}}}});
  return g;
}

inline void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                       float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

inline std::string DataPath(const std::string& file) {
  return std::string(SHOAL_INFERENCE_TEST_DATA) + "/" + file;
}

// A raw little-endian float32 file written by gen_refs.py.
inline std::vector<float> ReadFloats(const std::string& file) {
  std::ifstream in(DataPath(file), std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in.good()) << DataPath(file);
  const auto bytes = static_cast<size_t>(in.tellg());
  std::vector<float> v(bytes / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
  return v;
}

inline float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace shoal::inference::testing
