#include "shoal/control/node/registry.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "registry_fixture.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;

class RegistryTest : public RegistryFixture {
 protected:
  void SetUp() override { OpenRegistry("shoal-registry-test"); }
};

TEST_F(RegistryTest, DeployAssignsIdsAndGenerationOne) {
  auto r = reg_->Deploy(Fn("a") + "---\n" + Fn("b"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].id, 1u);
  EXPECT_EQ((*r)[1].id, 2u);
  EXPECT_EQ((*r)[0].generation, 1u);
  EXPECT_GT((*r)[0].created_unix_ms, 0);
  auto a = reg_->Get("a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->id, 1u);
  EXPECT_EQ(a->manifest, Fn("a"));
  EXPECT_FALSE(reg_->Get("c").has_value());
  auto list = reg_->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "a");
  EXPECT_EQ(list[1].name, "b");
  EXPECT_TRUE(fs::exists(config_.state_dir + "/functions/a.pb"));
}

TEST_F(RegistryTest, RedeployBumpsGenerationAndKeepsId) {
  ASSERT_TRUE(reg_->Deploy(Fn("a")).ok());
  ASSERT_TRUE(reg_->Deploy(Fn("b")).ok());
  const int64_t created = reg_->Get("b")->created_unix_ms;
  auto r = reg_->Deploy(Fn("b", "  concurrency: 7\n"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].id, 2u);
  EXPECT_EQ((*r)[0].generation, 2u);
  auto b = reg_->Get("b");
  EXPECT_EQ(b->concurrency, 7u);
  EXPECT_EQ(b->generation, 2u);
  EXPECT_EQ(b->created_unix_ms, created);
  EXPECT_EQ(reg_->Deploy(Fn("b"))->at(0).generation, 3u);
  EXPECT_EQ(reg_->List().size(), 2u);
}

TEST_F(RegistryTest, DeleteAndIdsAreReused) {
  ASSERT_TRUE(reg_->Deploy(Fn("a") + "---\n" + Fn("b") + "---\n" + Fn("c")).ok());
  ASSERT_TRUE(reg_->Delete("b").ok());
  EXPECT_FALSE(reg_->Get("b").has_value());
  EXPECT_FALSE(fs::exists(config_.state_dir + "/functions/b.pb"));
  Status missing = reg_->Delete("b");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "function 'b' not found");
  // The lowest free id goes to the next new function; generation restarts.
  auto d = reg_->Deploy(Fn("d") + "---\n" + Fn("e"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)[0].id, 2u);
  EXPECT_EQ((*d)[0].generation, 1u);
  EXPECT_EQ((*d)[1].id, 4u);
}

TEST_F(RegistryTest, DeploymentsSurviveAReopen) {
  ASSERT_TRUE(
      reg_->Deploy(Fn("a") + "---\n" + Fn("b", "  concurrency: 5\n  scale: {min: 1, max: 3}\n"))
          .ok());
  ASSERT_TRUE(reg_->Deploy(Fn("b",
                              "  concurrency: 6\n  scale: {min: 1, max: 3}\n"
                              "  autoscaling:\n    policy: kpa\n    target: 4\n"
                              "    params: {stableWindow: 12s}\n"))
                  .ok());
  ASSERT_TRUE(reg_->Delete("a").ok());
  const FunctionSpec before = *reg_->Get("b");
  reg_.reset();
  auto again = Open();
  ASSERT_NE(again, nullptr);
  auto list = again->List();
  ASSERT_EQ(list.size(), 1u);
  const FunctionSpec& b = list[0];
  EXPECT_EQ(b.name, "b");
  EXPECT_EQ(b.id, 2u);
  EXPECT_EQ(b.generation, 2u);
  EXPECT_EQ(b.concurrency, 6u);
  EXPECT_EQ(b.min_scale, 1u);
  EXPECT_EQ(b.max_scale, 3u);
  EXPECT_EQ(b.handler.builtin, "echo");
  EXPECT_EQ(b.manifest, before.manifest);
  EXPECT_EQ(b.created_unix_ms, before.created_unix_ms);
  EXPECT_DOUBLE_EQ(b.timeout_s, before.timeout_s);
  EXPECT_EQ(b.autoscaling.policy, "kpa");
  EXPECT_DOUBLE_EQ(b.autoscaling.target, 4);
  EXPECT_EQ(b.autoscaling.keep_alive, "fixed");
  EXPECT_DOUBLE_EQ(b.autoscaling.params.at("stableWindow"), 12);
  // The id of the deleted one is free again after the restart; b keeps its own.
  auto c = again->Deploy(Fn("c"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)[0].id, 1u);
  EXPECT_EQ(again->Deploy(Fn("b"))->at(0).generation, 3u);
}

TEST_F(RegistryTest, OneBadDocumentDeploysNothing) {
  ASSERT_TRUE(reg_->Deploy(Fn("a")).ok());
  auto r = reg_->Deploy(Fn("a", "  concurrency: 9\n") + "---\n" + Fn("b") + "---\n" +
                        Fn("c", "  scale: {min: 3, max: 1}\n"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("spec.scale.max"), std::string::npos);
  EXPECT_EQ(reg_->List().size(), 1u);
  EXPECT_EQ(reg_->Get("a")->generation, 1u);
  EXPECT_EQ(reg_->Get("a")->concurrency, config_.default_concurrency);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(config_.state_dir + "/functions")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);
}

TEST_F(RegistryTest, LeftoverTempFilesAreIgnoredAndCorruptRecordsRefused) {
  ASSERT_TRUE(reg_->Deploy(Fn("a")).ok());
  reg_.reset();
  { std::ofstream(config_.state_dir + "/functions/b.pb.tmp") << "half written"; }
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->List().size(), 1u);
  EXPECT_FALSE(fs::exists(config_.state_dir + "/functions/b.pb.tmp"));
  again.reset();
  { std::ofstream(config_.state_dir + "/functions/x.pb") << "\xff\xff\xff garbage"; }
  auto bad = FunctionRegistry::Open(config_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x.pb"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace shoal
