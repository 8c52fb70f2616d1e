// The nodes' FL peer links (cluster/fl_peer.h) on loopback: a call whose reply does not come in
// time is not sent a second time (an admission sent twice is admitted once and then refused as
// a duplicate, which left the first one in flight at the top for good: issue 14), while a
// pooled link the peer closed is retried once on a fresh one.
#include "shoal/cluster/fl_peer.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace shoal::cluster {
namespace {

class FlPeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // as shoald: a peer that left is an EPIPE, not the end
    server_ = std::make_unique<FlPeerServer>(
        [this](FlPeerCall, const std::string& json, std::span<const std::byte>) {
          const int n = ++calls_;
          if (json == "{\"slow\":true}") std::this_thread::sleep_for(std::chrono::seconds(2));
          FlPeerReply r;
          r.json = "{\"call\":" + std::to_string(n) + "}";
          return r;
        },
        nullptr);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
    address_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  std::unique_ptr<FlPeerServer> server_;
  std::string address_;
  std::atomic<int> calls_{0};
};

TEST_F(FlPeerTest, ACallWhoseReplyComesTooLateIsNotSentAgain) {
  FlPeerClient client;
  auto first = client.Call(address_, FlPeerCall::kAdmit, "{}", {}, 5);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->json, "{\"call\":1}");
  // On the pooled link: the peer serves it, but answers after the caller gave up.
  auto late = client.Call(address_, FlPeerCall::kAdmit, "{\"slow\":true}", {}, 0.3);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(late.status().message().find("no reply within"), std::string::npos)
      << late.status().ToString();
  // The next call is the third the peer serves: the late one was not sent twice.
  auto next = client.Call(address_, FlPeerCall::kAdmit, "{}", {}, 5);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->json, "{\"call\":3}");
}

TEST_F(FlPeerTest, APooledLinkThePeerClosedIsRetriedOnAFreshOne) {
  FlPeerClient client;
  ASSERT_TRUE(client.Call(address_, FlPeerCall::kSpec, "{}", {}, 5).ok());
  // The peer restarts on the same port: the pooled link is dead.
  const uint16_t port = server_->port();
  server_->Stop();
  server_ = std::make_unique<FlPeerServer>(
      [](FlPeerCall, const std::string&, std::span<const std::byte>) {
        FlPeerReply r;
        r.json = "{\"restarted\":true}";
        return r;
      },
      nullptr);
  ASSERT_TRUE(server_->Start("127.0.0.1", port).ok());
  auto r = client.Call(address_, FlPeerCall::kSpec, "{}", {}, 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->json, "{\"restarted\":true}");
}

}  // namespace
}  // namespace shoal::cluster
