#include "shoal/runtime/node/node_capacity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace shoal {
namespace {

namespace fs = std::filesystem;

class NodeCapacityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("node_capacity_" + std::to_string(getpid()));
    fs::create_directories(root_ / "dev");
    std::ofstream(root_ / "meminfo") << "MemTotal:       16384000 kB\nMemFree:  100 kB\n";
  }
  void TearDown() override { fs::remove_all(root_); }
  void Touch(const std::string& name) { std::ofstream(root_ / "dev" / name) << ""; }
  fs::path root_;
};

TEST_F(NodeCapacityTest, CountsNvidiaDevicesMemTotalAndCores) {
  Touch("nvidia0");
  Touch("nvidia1");
  Touch("nvidiactl");  // control devices are not GPUs
  Touch("nvidia-uvm");
  Touch("nvidia-caps");
  const Resources r = ProbeNodeCapacity(6, (root_ / "meminfo").string(), (root_ / "dev").string());
  EXPECT_EQ(r.gpus, 2u);
  EXPECT_DOUBLE_EQ(r.memory_mb, 16000.0);
  EXPECT_DOUBLE_EQ(r.cores, 6.0);
}

TEST_F(NodeCapacityTest, NoGpusAndHardwareCoresByDefault) {
  const Resources r = ProbeNodeCapacity(0, (root_ / "meminfo").string(), (root_ / "dev").string());
  EXPECT_EQ(r.gpus, 0u);
  EXPECT_GE(r.cores, 1.0);
}

TEST(NodeCapacity, SpecResourcesAndTheShortResourceIsNamed) {
  FunctionSpec spec;
  spec.cpu = 0.5;
  spec.memory_bytes = 512ull << 20;
  spec.gpu = 1;
  const Resources want = SpecResources(spec);
  EXPECT_DOUBLE_EQ(want.cores, 0.5);
  EXPECT_DOUBLE_EQ(want.memory_mb, 512.0);
  EXPECT_EQ(want.gpus, 1u);

  ClusterModel c;
  c.AddNode("n", {4, 1024, 0}, 0.1);
  EXPECT_NE(ShortResource(c.node(0), want).find("GPU"), std::string::npos);
  EXPECT_FALSE(Place(c, {"f", want}).ok());

  Resources mem = {1, 2048, 0};
  EXPECT_NE(ShortResource(c.node(0), mem).find("memory"), std::string::npos);
  // What running instances hold counts: 768 MiB used leaves 256 MiB, short for 512.
  ASSERT_TRUE(c.Allocate(0, {1, 768, 0}).ok());
  EXPECT_NE(ShortResource(c.node(0), {0, 512, 0}).find("memory"), std::string::npos);
  c.Release(0, {1, 768, 0});
  EXPECT_EQ(ShortResource(c.node(0), {0, 512, 0}), "");
  EXPECT_TRUE(Place(c, {"f", {0, 512, 0}}).ok());
}

}  // namespace
}  // namespace shoal
