// Leader election against a real etcd: one leader among candidates, a prompt hand-over when it
// resigns, a take-over after its lease runs out when it dies, and a leader that steps down on
// its own when etcd is gone for a TTL.
#include "shoal/control/cluster/election.h"

#include <gtest/gtest.h>

#include <thread>

#include "etcd_fixture.h"
#include "tests/support/wait_for.h"

namespace shoal::cluster {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using shoal::testing::WaitFor;

class ElectionTest : public EtcdFixture {
 protected:
  ElectionOptions options_{2, 100ms};
};

TEST_F(ElectionTest, OneLeaderAndAPromptHandOverWhenItResigns) {
  auto a = std::make_unique<LeaderElection>(client_.get(), "/e/leader", "ctl-a", options_);
  LeaderElection b(client_.get(), "/e/leader", "ctl-b", options_);
  a->Start();
  ASSERT_TRUE(WaitFor([&] { return a->is_leader(); }, 5s));
  b.Start();
  ASSERT_TRUE(WaitFor([&] { return b.leader() == "ctl-a"; }, 5s));
  EXPECT_FALSE(b.is_leader());
  auto key = client_->Get("/e/leader");
  ASSERT_TRUE(key.ok());
  ASSERT_EQ(key->kvs.size(), 1u);
  EXPECT_EQ(key->kvs[0].value, "ctl-a");
  const auto t0 = Clock::now();
  a.reset();  // resigns
  ASSERT_TRUE(WaitFor([&] { return b.is_leader(); }, 5s));
  EXPECT_LT(Clock::now() - t0, 1s);  // no TTL to wait out
  EXPECT_EQ(b.leader(), "ctl-b");
}

TEST_F(ElectionTest, ADeadLeaderIsReplacedAfterItsLeaseRunsOut) {
  LeaderElection a(client_.get(), "/e/leader", "ctl-a", options_);
  LeaderElection b(client_.get(), "/e/leader", "ctl-b", options_);
  a.Start();
  ASSERT_TRUE(WaitFor([&] { return a.is_leader(); }, 5s));
  b.Start();
  ASSERT_TRUE(WaitFor([&] { return b.leader() == "ctl-a"; }, 5s));
  const auto t0 = Clock::now();
  a.Abandon();  // as kill -9: the key stays until the lease expires
  ASSERT_TRUE(WaitFor([&] { return b.is_leader(); }, 8s));
  const auto took = Clock::now() - t0;
  EXPECT_GT(took, 1s);  // it waited for the 2 s lease, not less
  EXPECT_LT(took, 5s);
}

TEST_F(ElectionTest, ALeaderCutOffFromEtcdStepsDownWithinItsTtl) {
  std::atomic<int> changes{0};
  LeaderElection a(client_.get(), "/e/leader", "ctl-a", options_,
                   [&](bool) { changes.fetch_add(1); });
  a.Start();
  ASSERT_TRUE(WaitFor([&] { return a.is_leader(); }, 5s));
  etcd_.Kill(0);
  const auto t0 = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return !a.is_leader(); }, 6s));
  EXPECT_LT(Clock::now() - t0, 2s + 1s);
  EXPECT_EQ(changes.load(), 2);
  ASSERT_TRUE(etcd_.Restart(0)) << etcd_.Log(0);
  ASSERT_TRUE(WaitFor([&] { return a.is_leader(); }, 10s));
}

}  // namespace
}  // namespace shoal::cluster
