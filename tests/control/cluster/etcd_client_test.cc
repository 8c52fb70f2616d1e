// EtcdClient against a real etcd: bytes in and out, transactions, leases that run out, watches
// that miss nothing across a restart of etcd, and failover between members.
#include "shoal/control/cluster/etcd_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "etcd_fixture.h"
#include "shoal/common/http/http_client.h"

namespace shoal::cluster {
namespace {

using shoal::testing::EtcdForTest;
using shoal::testing::EtcdMissing;
using namespace std::chrono_literals;

std::unique_ptr<EtcdClient> Connect(const std::string& endpoints) {
  auto eps = ParseEndpoints(endpoints);
  EXPECT_TRUE(eps.ok()) << eps.status().message();
  EtcdOptions o;
  o.endpoints = *eps;
  o.request_timeout = 2000ms;
  o.connect_timeout = 300ms;
  auto c = EtcdClient::Create(o);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(*c);
}

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = EtcdMissing(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(etcd_.Start()) << etcd_.Log(0);
    client_ = Connect(etcd_.endpoints());
  }
  EtcdForTest etcd_{1};
  std::unique_ptr<EtcdClient> client_;
};

TEST(EtcdEndpoints, ParseRefusesWhatIsNotHttpHostPortNamingIt) {
  auto ok = ParseEndpoints("http://10.0.0.1:2379,http://node-b:2379/");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(*ok, (std::vector<std::string>{"http://10.0.0.1:2379", "http://node-b:2379"}));
  auto https = ParseEndpoints("https://a:2379");
  ASSERT_FALSE(https.ok());
  EXPECT_EQ(https.status().message(),
            "etcd endpoint 'https://a:2379' is not http://host:port (https is not supported yet)");
  auto noport = ParseEndpoints("http://a:2379,http://b");
  ASSERT_FALSE(noport.ok());
  EXPECT_EQ(noport.status().message(), "etcd endpoint 'http://b' is not http://host:port");
  auto badport = ParseEndpoints("http://a:23x9");
  EXPECT_FALSE(badport.ok());
  auto none = ParseEndpoints(",");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "etcd endpoints: none given (want http://host:port[,...])");
}

TEST(EtcdEndpoints, PrefixRangeEndIncrementsTheLastByte) {
  EXPECT_EQ(PrefixRangeEnd("/shoal/nodes/"), "/shoal/nodes0");
  EXPECT_EQ(PrefixRangeEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixRangeEnd(""), std::string(1, '\0'));
}

TEST_F(EtcdClientTest, PutGetPrefixAndDeleteCarryBytesExactly) {
  const std::string binary("\x00\x01\xff\n{\"x\":1}", 11);
  auto rev = client_->Put("/t/a", binary);
  ASSERT_TRUE(rev.ok()) << rev.status().message();
  EXPECT_GT(*rev, 1);
  ASSERT_TRUE(client_->Put("/t/b", "two").ok());
  ASSERT_TRUE(client_->Put("/u/c", "other prefix").ok());
  auto one = client_->Get("/t/a");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->kvs.size(), 1u);
  EXPECT_EQ(one->kvs[0].key, "/t/a");
  EXPECT_EQ(one->kvs[0].value, binary);
  EXPECT_EQ(one->kvs[0].mod_revision, *rev);
  EXPECT_EQ(one->kvs[0].version, 1);
  auto all = client_->GetPrefix("/t/");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->kvs.size(), 2u);
  EXPECT_EQ(all->kvs[1].key, "/t/b");
  EXPECT_EQ(all->kvs[1].value, "two");
  EXPECT_GE(all->revision, *rev + 2);
  auto missing = client_->Get("/t/none");
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->kvs.empty());
  auto empty_value = client_->Put("/t/empty", "");
  ASSERT_TRUE(empty_value.ok());
  auto e = client_->Get("/t/empty");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->kvs.size(), 1u);
  EXPECT_EQ(e->kvs[0].value, "");
  auto deleted = client_->DeletePrefix("/t/");
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 3);
  auto left = client_->GetPrefix("/");
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->kvs.size(), 1u);
  EXPECT_EQ(left->kvs[0].key, "/u/c");
}

TEST_F(EtcdClientTest, TransactionsWriteOnlyWhenTheirComparisonHolds) {
  RangeResult current;
  auto first = client_->PutIfAbsent("/k", "first", 0, &current);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(*first);
  auto second = client_->PutIfAbsent("/k", "second", 0, &current);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(*second);
  ASSERT_EQ(current.kvs.size(), 1u);
  EXPECT_EQ(current.kvs[0].value, "first");
  const int64_t mod = current.kvs[0].mod_revision;
  auto stale = client_->PutIfModRevision("/k", "stale", mod - 1);
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(*stale);
  auto cas = client_->PutIfModRevision("/k", "third", mod);
  ASSERT_TRUE(cas.ok());
  EXPECT_TRUE(*cas);
  auto not_mine = client_->DeleteIfValue("/k", "first");
  ASSERT_TRUE(not_mine.ok());
  EXPECT_FALSE(*not_mine);
  auto mine = client_->DeleteIfValue("/k", "third");
  ASSERT_TRUE(mine.ok());
  EXPECT_TRUE(*mine);
  auto gone = client_->Get("/k");
  ASSERT_TRUE(gone.ok());
  EXPECT_TRUE(gone->kvs.empty());
}

TEST_F(EtcdClientTest, KeysUnderALeaseVanishWhenItRunsOutOrIsRevoked) {
  auto lease = client_->GrantLease(1);
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  ASSERT_TRUE(client_->Put("/lease/a", "x", *lease).ok());
  auto got = client_->Get("/lease/a");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].lease, *lease);
  auto ttl = client_->KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status().message();
  EXPECT_EQ(*ttl, 1);
  // Not renewed: gone within the TTL plus etcd's expiry check.
  EXPECT_TRUE(KeyGone(*client_, "/lease/a", 60));
  auto expired = client_->KeepAlive(*lease);
  ASSERT_FALSE(expired.ok());
  EXPECT_EQ(expired.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(expired.status().message(), "etcd lease " + std::to_string(*lease) + " has expired");

  auto second = client_->GrantLease(30);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(client_->Put("/lease/b", "y", *second).ok());
  ASSERT_TRUE(client_->RevokeLease(*second).ok());
  auto b = client_->Get("/lease/b");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->kvs.empty());
  auto bad = client_->GrantLease(0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "etcd lease TTL must be at least 1 s");
}

// Collects watch events for the tests.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<WatchEvent> events;
  bool WaitFor(size_t n, std::chrono::milliseconds d) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, d, [&] { return events.size() >= n; });
  }
  EtcdClient::EventsFn Fn() {
    return [this](const std::vector<WatchEvent>& ev, int64_t) {
      std::lock_guard lock(mu);
      events.insert(events.end(), ev.begin(), ev.end());
      cv.notify_all();
    };
  }
};

// A watch asked for history etcd has compacted is told the compaction revision (its owner
// re-reads the prefix) and carries on from now: a key written afterwards still arrives.
TEST_F(EtcdClientTest, AWatchFromCompactedHistoryIsToldAndCarriesOnFromNow) {
  auto first = client_->Put("/c/a", "1");
  ASSERT_TRUE(first.ok());
  auto second = client_->Put("/c/a", "2");
  ASSERT_TRUE(second.ok());
  client::HttpClient http(etcd_.endpoint(0));
  const std::string body =
      "{\"revision\": \"" + std::to_string(*second) + "\", \"physical\": true}";
  client::HttpRequest compact;
  compact.method = "POST";
  compact.path = "/v3/kv/compaction";
  compact.body = body;
  compact.headers = {"Content-Type: application/json"};
  std::string error;
  auto r = http.Send(compact, &error);
  ASSERT_TRUE(r.has_value()) << error;
  ASSERT_EQ(r->status, 200) << r->body;

  std::mutex mu;
  std::condition_variable cv;
  int64_t compacted = 0;
  Seen seen;
  auto watch = client_->WatchPrefix("/c/", *first, seen.Fn(), [&](int64_t revision) {
    std::lock_guard lock(mu);
    compacted = revision;
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return compacted != 0; }));
    EXPECT_EQ(compacted, *second);
  }
  // The watch re-opens from now after a short back-off: write until a write arrives.
  int64_t written = 0;
  for (int i = 0; i < 50 && !seen.WaitFor(1, 0ms); ++i) {
    auto put = client_->Put("/c/b", std::to_string(i));
    ASSERT_TRUE(put.ok());
    written = *put;
    seen.WaitFor(1, 200ms);
  }
  std::lock_guard lock(seen.mu);
  ASSERT_FALSE(seen.events.empty()) << "nothing arrived after the compaction";
  EXPECT_EQ(seen.events[0].kv.key, "/c/b");
  EXPECT_GT(seen.events[0].kv.mod_revision, *second);
  EXPECT_LE(seen.events[0].kv.mod_revision, written);
}

TEST_F(EtcdClientTest, WatchDeliversPutsAndDeletesUnderItsPrefixInOrder) {
  auto start = client_->Put("/w/before", "0");
  ASSERT_TRUE(start.ok());
  Seen seen;
  auto watch = client_->WatchPrefix("/w/", *start + 1, seen.Fn());
  ASSERT_TRUE(client_->Put("/w/a", "1").ok());
  ASSERT_TRUE(client_->Put("/elsewhere", "ignored").ok());
  ASSERT_TRUE(client_->Put("/w/a", "2").ok());
  ASSERT_TRUE(client_->Delete("/w/a").ok());
  ASSERT_TRUE(seen.WaitFor(3, 10s));
  std::lock_guard lock(seen.mu);
  ASSERT_EQ(seen.events.size(), 3u);
  EXPECT_EQ(seen.events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(seen.events[0].kv.key, "/w/a");
  EXPECT_EQ(seen.events[0].kv.value, "1");
  EXPECT_EQ(seen.events[1].kv.value, "2");
  EXPECT_EQ(seen.events[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(seen.events[2].kv.key, "/w/a");
  EXPECT_LT(seen.events[0].kv.mod_revision, seen.events[1].kv.mod_revision);
  EXPECT_TRUE(watch->connected());
}

TEST_F(EtcdClientTest, WatchMissesNothingWrittenWhileEtcdWasDown) {
  Seen seen;
  auto rev = client_->Put("/r/0", "0");
  ASSERT_TRUE(rev.ok());
  auto watch = client_->WatchPrefix("/r/", *rev + 1, seen.Fn());
  ASSERT_TRUE(client_->Put("/r/1", "1").ok());
  ASSERT_TRUE(seen.WaitFor(1, 10s));
  etcd_.Kill(0);
  // etcd is gone: calls fail naming the endpoint, the watch notices.
  auto down = client_->Put("/r/x", "x");
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(down.status().message().find("etcd unreachable (" + etcd_.endpoint(0) + ": "),
            std::string::npos)
      << down.status().message();
  for (int i = 0; i < 50 && watch->connected(); ++i) std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(watch->connected());
  ASSERT_TRUE(etcd_.Restart(0)) << etcd_.Log(0);
  // Written before the watch has reconnected: still delivered, once each, in order.
  ASSERT_TRUE(client_->Put("/r/2", "2").ok());
  ASSERT_TRUE(client_->Put("/r/3", "3").ok());
  ASSERT_TRUE(seen.WaitFor(3, 15s));
  std::this_thread::sleep_for(300ms);
  std::lock_guard lock(seen.mu);
  ASSERT_EQ(seen.events.size(), 3u);
  EXPECT_EQ(seen.events[0].kv.key, "/r/1");
  EXPECT_EQ(seen.events[1].kv.key, "/r/2");
  EXPECT_EQ(seen.events[2].kv.key, "/r/3");
  EXPECT_GE(client_->failures(), 1u);
}

TEST(EtcdClientCluster, CallsFailOverToALiveMember) {
  if (auto why = EtcdMissing(); !why.empty()) GTEST_SKIP() << why;
  EtcdForTest etcd(3);
  ASSERT_TRUE(etcd.Start()) << etcd.Log(0);
  auto client = Connect(etcd.endpoints());
  ASSERT_TRUE(client->Put("/f", "before").ok());
  etcd.Kill(0);
  auto put = client->Put("/f", "after");
  ASSERT_TRUE(put.ok()) << put.status().message();
  auto got = client->Get("/f");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "after");
  // Only a dead member named: unavailable, naming it.
  auto only_dead = Connect(etcd.endpoint(0));
  auto r = only_dead->Get("/f");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find(etcd.endpoint(0)), std::string::npos);
}

}  // namespace
}  // namespace shoal::cluster
