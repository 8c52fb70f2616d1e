// Tiny graphs for the inference tests: one operator at a time with hand-checkable values.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "shoal/inference/executor.h"
#include "shoal/inference/graph.h"

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
  g.initializers[name] =
      Initializer{{static_cast<int64_t>(values.size())}, {}, std::move(values)};
}

// Validates, compiles on the CPU executor and runs one batch; fails the test on any error.
inline std::vector<float> RunCpu(Graph g, const std::vector<float>& input, int64_t batch,
                                 const ExecutorOptions& options = {}) {
  const Status v = g.Validate();
  EXPECT_TRUE(v.ok()) << v.ToString();
  auto ex = CreateExecutor("cpu");
  EXPECT_TRUE(ex.ok()) << ex.status().ToString();
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
