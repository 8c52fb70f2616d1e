#include "shoal/runtime/sandbox/tenant_ids.h"

#include <gtest/gtest.h>

#include "tests/support/sandbox_test_util.h"

namespace shoal {
namespace {

TEST(TenantIdsTest, FixedFromConfigOthersAllocatedAndStable) {
  shoal::testing::TempDir tmp("shoal-sandbox-test");
  NodeConfig c;
  c.state_dir = tmp.path();
  c.tenant_uid_base = 300000;
  c.tenant_uid_count = 2;
  c.tenants["fixed"] = TenantIdConfig{300000, 300500};  // takes the range's first id
  {
    auto ids = TenantIds::Open(c);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    auto f = ids->For("fixed");
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->uid, 300000u);
    EXPECT_EQ(f->gid, 300500u);
    auto a = ids->For("a");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->uid, 300001u);  // 300000 is the fixed tenant's
    EXPECT_EQ(a->gid, 300001u);
    auto b = ids->For("b");
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().message(),
              "tenant 'b': no free uid in 300000..300001 (config tenant_uid_base, "
              "tenant_uid_count)");
  }
  EXPECT_EQ(testing::ReadAll(tmp.path() + "/tenants.yaml"), "a: {uid: 300001, gid: 300001}\n");
  // A restart reads them back: the same tenant keeps its id.
  c.tenant_uid_count = 10;
  auto again = TenantIds::Open(c);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->For("a")->uid, 300001u);
  EXPECT_EQ(again->For("b")->uid, 300002u);
}

TEST(TenantIdsTest, ConfigRefusesRoot) {
  auto c = NodeConfig::LoadString("tenants: {x: {uid: 0, gid: 5}}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "config: tenants.x: uid and gid must not be 0 (root)");
  auto d = NodeConfig::LoadString("tenants: {x: {uid: 7, gid: 8}}\nhandler_dirs: [/opt/h]\n");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->tenants.at("x").gid, 8u);
  EXPECT_EQ(d->handler_dirs, std::vector<std::string>{"/opt/h"});
  EXPECT_FALSE(NodeConfig::LoadString("handler_dirs: [relative]\n").ok());
  EXPECT_FALSE(NodeConfig::LoadString("tenant_uid_base: 0\n").ok());
}

}  // namespace
}  // namespace shoal
