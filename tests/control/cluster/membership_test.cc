// Node membership against a real etcd: the record under the node's lease, a name conflict
// refused naming the holder, a restart taking over its own registration, a protocol mismatch
// refused, the record gone when the node stops renewing, and re-registration after an outage.
#include "shoal/control/cluster/membership.h"

#include <gtest/gtest.h>

#include <thread>

#include "etcd_fixture.h"

namespace shoal::cluster {
namespace {

using namespace std::chrono_literals;

NodeRecord Record(const std::string& name, const std::string& address) {
  NodeRecord r;
  r.name = name;
  r.address = address;
  r.version = "test";
  r.cores = 2;
  r.memory_mib = 4096;
  r.cold_start_ms = 3.5;
  r.cached_functions = {"echo"};
  r.pools = {{"default", "boost", 64ull << 20}};
  return r;
}

class MembershipTest : public EtcdFixture {
 protected:
  bool WaitState(const NodeMembership& m, MembershipState s, std::chrono::milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
      if (m.state() == s) return true;
      std::this_thread::sleep_for(50ms);
    }
    return m.state() == s;
  }
  ClusterKeys keys_{"/shoal/test/"};
};

TEST(NodeRecordTest, RoundTripsAndNamesABadField) {
  NodeRecord r = Record("node-a", "10.0.0.1:8080");
  auto back = NodeRecord::FromJson(r.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->name, "node-a");
  EXPECT_EQ(back->address, "10.0.0.1:8080");
  EXPECT_EQ(back->memory_mib, 4096u);
  EXPECT_DOUBLE_EQ(back->cold_start_ms, 3.5);
  EXPECT_EQ(back->cached_functions, std::vector<std::string>{"echo"});
  ASSERT_EQ(back->pools.size(), 1u);
  EXPECT_EQ(back->pools[0].bytes, 64ull << 20);
  EXPECT_EQ(back->protocol_major, kClusterProtocolMajor);
  auto missing = NodeRecord::FromJson(R"({"name":"a","protocol":"1.0"})");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "node record: field 'address' is missing");
  auto typed = NodeRecord::FromJson(R"({"name":"a","address":"x","protocol":"1.0","cores":"2"})");
  ASSERT_FALSE(typed.ok());
  EXPECT_EQ(typed.status().message(), "node record: field 'cores' has the wrong type (string)");
  EXPECT_EQ(ValidateNodeName("Node_1").message(),
            "node name 'Node_1' may hold only lower-case letters, digits and '-'");
  EXPECT_TRUE(ValidateNodeName("node-1").ok());
  EXPECT_EQ(ClusterKeys("/p/").Node("a"), "/p/nodes/a");
}

TEST_F(MembershipTest, JoinWritesTheRecordUnderALeaseAndLeaveRemovesIt) {
  NodeMembership m(client_.get(), keys_, Record("node-a", "10.0.0.1:8080"));
  ASSERT_TRUE(m.Join().ok());
  EXPECT_EQ(m.state(), MembershipState::kRegistered);
  auto got = client_->Get("/shoal/test/nodes/node-a");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].lease, m.lease());
  auto rec = NodeRecord::FromJson(got->kvs[0].value);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->address, "10.0.0.1:8080");
  auto version = client_->Get("/shoal/test/version");
  ASSERT_TRUE(version.ok());
  ASSERT_EQ(version->kvs.size(), 1u);
  EXPECT_EQ(version->kvs[0].value, "1.0");
  NodeRecord updated = Record("node-a", "10.0.0.1:8080");
  updated.cached_functions = {"echo", "sha256"};
  ASSERT_TRUE(m.Update(updated).ok());
  auto after = client_->Get("/shoal/test/nodes/node-a");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(NodeRecord::FromJson(after->kvs[0].value)->cached_functions,
            (std::vector<std::string>{"echo", "sha256"}));
  ASSERT_TRUE(m.Leave().ok());
  auto gone = client_->Get("/shoal/test/nodes/node-a");
  ASSERT_TRUE(gone.ok());
  EXPECT_TRUE(gone->kvs.empty());
}

TEST_F(MembershipTest, ALiveNodeHoldingTheNameIsAConflictNamingIt) {
  NodeMembership a(client_.get(), keys_, Record("node-a", "10.0.0.1:8080"));
  ASSERT_TRUE(a.Join().ok());
  NodeMembership b(client_.get(), keys_, Record("node-a", "10.0.0.2:8080"));
  Status st = b.Join();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(st.message(),
            "node name 'node-a' is held by a live node at 10.0.0.1:8080 "
            "(/shoal/test/nodes/node-a, lease " +
                std::to_string(a.lease()) +
                "): give this node another --node-name or stop that one");
  // Nothing of b's was written.
  auto got = client_->Get("/shoal/test/nodes/node-a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(NodeRecord::FromJson(got->kvs[0].value)->address, "10.0.0.1:8080");
  auto bad = NodeMembership(client_.get(), keys_, Record("Bad_Name", "x:1")).Join();
  EXPECT_EQ(bad.message(), "node name 'Bad_Name' may hold only lower-case letters, digits and '-'");
}

TEST_F(MembershipTest, ARestartedNodeTakesOverItsOwnRegistration) {
  int64_t first_lease = 0;
  {
    NodeMembership before(client_.get(), keys_, Record("node-a", "10.0.0.1:8080"));
    ASSERT_TRUE(before.Join().ok());
    first_lease = before.lease();
  }  // "crashed": its lease still runs
  NodeMembership after(client_.get(), keys_, Record("node-a", "10.0.0.1:8080"));
  ASSERT_TRUE(after.Join().ok());
  EXPECT_NE(after.lease(), first_lease);
  auto old = client_->KeepAlive(first_lease);
  EXPECT_EQ(old.status().code(), StatusCode::kNotFound);
}

TEST_F(MembershipTest, AClusterSpeakingAnotherProtocolIsRefused) {
  ASSERT_TRUE(client_->Put("/shoal/test/version", "7.3").ok());
  NodeMembership m(client_.get(), keys_, Record("node-a", "10.0.0.1:8080"));
  Status st = m.Join();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "cluster /shoal/test speaks protocol 7.3 and this shoald speaks 1.0: it cannot join");
  auto got = client_->Get("/shoal/test/nodes/node-a");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->kvs.empty());
}

TEST_F(MembershipTest, ANodeThatStopsRenewingVanishesAfterItsTtl) {
  MembershipOptions o;
  o.lease_ttl_s = 1;
  auto m =
      std::make_unique<NodeMembership>(client_.get(), keys_, Record("node-a", "10.0.0.1:8080"), o);
  ASSERT_TRUE(m->Join().ok());
  std::this_thread::sleep_for(2500ms);  // renewing: still there after two TTLs
  auto alive = client_->Get("/shoal/test/nodes/node-a");
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(alive->kvs.size(), 1u);
  m.reset();  // stops renewing, revokes nothing
  EXPECT_TRUE(KeyGone(*client_, "/shoal/test/nodes/node-a", 50));
}

TEST_F(MembershipTest, AnEtcdOutageIsReportedAndTheNodeRegistersAgainAfterIt) {
  MembershipOptions o;
  o.lease_ttl_s = 1;
  o.max_backoff = 300ms;
  std::vector<MembershipState> states;
  std::mutex mu;
  NodeMembership m(client_.get(), keys_, Record("node-a", "10.0.0.1:8080"), o,
                   [&](MembershipState s, const std::string&) {
                     std::lock_guard lock(mu);
                     states.push_back(s);
                   });
  ASSERT_TRUE(m.Join().ok());
  etcd_.Kill(0);
  ASSERT_TRUE(WaitState(m, MembershipState::kDisconnected, 5s));
  EXPECT_NE(m.detail().find("etcd unreachable"), std::string::npos) << m.detail();
  std::this_thread::sleep_for(1500ms);  // longer than the TTL: the lease expires in etcd
  ASSERT_TRUE(etcd_.Restart(0)) << etcd_.Log(0);
  ASSERT_TRUE(WaitState(m, MembershipState::kRegistered, 10s)) << m.detail();
  bool back = false;
  for (int i = 0; i < 50 && !back; ++i) {
    auto r = client_->Get("/shoal/test/nodes/node-a");
    back = r.ok() && r->kvs.size() == 1 && r->kvs[0].lease == m.lease();
    if (!back) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(back);
  std::lock_guard lock(mu);
  ASSERT_GE(states.size(), 3u);
  EXPECT_EQ(states.front(), MembershipState::kRegistered);
  EXPECT_EQ(states[1], MembershipState::kDisconnected);
  EXPECT_EQ(states.back(), MembershipState::kRegistered);
}

}  // namespace
}  // namespace shoal::cluster
