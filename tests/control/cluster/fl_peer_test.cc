// The nodes' FL peer links (shoal/control/cluster/fl_peer.h) on loopback: a call whose reply does
// not come in time is not sent a second time (an admission sent twice is admitted once and then
// refused as a duplicate, which left the first one in flight at the top for good: issue 14), while
// a pooled link the peer closed is retried once on a fresh one. Every link starts with the
// cluster's peer handshake: a client holding the cluster's secret talks, one with another
// secret or without the handshake is refused with a message and closed, and counted.
#include "shoal/control/cluster/fl_peer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

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
    server_->SetSecret(kSecret);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
    address_ = "127.0.0.1:" + std::to_string(server_->port());
    client_.SetIdentity("node-a", kSecret);
  }
  static inline const std::string kSecret = std::string(32, '\x5a');
  void TearDown() override {
    if (server_) server_->Stop();
  }
  std::unique_ptr<FlPeerServer> server_;
  std::string address_;
  std::atomic<int> calls_{0};
  FlPeerClient client_;
};

TEST_F(FlPeerTest, ACallWhoseReplyComesTooLateIsNotSentAgain) {
  FlPeerClient& client = client_;
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
  FlPeerClient& client = client_;
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
  server_->SetSecret(kSecret);
  ASSERT_TRUE(server_->Start("127.0.0.1", port).ok());
  auto r = client.Call(address_, FlPeerCall::kSpec, "{}", {}, 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->json, "{\"restarted\":true}");
}

TEST_F(FlPeerTest, AClientWithTheClustersSecretTalksAndOneWithAnotherIsRefused) {
  auto ok = client_.Call(address_, FlPeerCall::kSpec, "{}", {}, 5);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->json, "{\"call\":1}");
  EXPECT_EQ(server_->refused(), 0u);

  FlPeerClient stranger;
  stranger.SetIdentity("node-a", std::string(32, '\x5b'));  // one bit off
  for (int i = 1; i <= 2; ++i) {
    auto r = stranger.Call(address_, FlPeerCall::kPartial, "{}", {}, 5);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
    EXPECT_NE(r.status().message().find(
                  "node 'node-a' failed the peer handshake: its proof does not match the "
                  "cluster's peer secret"),
              std::string::npos)
        << r.status().ToString();
    EXPECT_EQ(server_->refused(), static_cast<uint64_t>(i));
  }
  // The handler never ran for it; the right client still talks on its pooled link.
  auto again = client_.Call(address_, FlPeerCall::kSpec, "{}", {}, 5);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->json, "{\"call\":2}");

  FlPeerClient keyless;  // never given the secret: fails here, sends nothing
  auto none = keyless.Call(address_, FlPeerCall::kSpec, "{}", {}, 5);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no cluster peer secret"), std::string::npos);
  EXPECT_EQ(calls_.load(), 2);
}

// Reads one frame: its kind and JSON (payload skipped); false if the link closed first.
bool ReadFrame(int fd, uint32_t* kind, std::string* json) {
  char head[24];
  size_t got = 0;
  while (got < sizeof head) {
    const ssize_t r = recv(fd, head + got, sizeof head - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  uint32_t json_len;
  uint64_t payload_len;
  std::memcpy(kind, head + 4, 4);
  std::memcpy(&json_len, head + 8, 4);
  std::memcpy(&payload_len, head + 16, 8);
  std::string rest(json_len + payload_len, '\0');
  got = 0;
  while (got < rest.size()) {
    const ssize_t r = recv(fd, rest.data() + got, rest.size() - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  *json = rest.substr(0, json_len);
  return true;
}

// A node holding the secret may not speak as another: the node it proves must be the one
// registered at its address.
TEST_F(FlPeerTest, ANodeThatProvesAnotherNodesNameIsRefused) {
  FlPeerServer checked(
      [](FlPeerCall, const std::string&, std::span<const std::byte>) { return FlPeerReply{}; },
      nullptr);
  checked.SetSecret(kSecret);
  std::vector<std::pair<std::string, std::string>> asked;
  checked.SetNodeCheck([&asked](const std::string& node, const std::string& ip) {
    asked.emplace_back(node, ip);
    return node == "node-a" && ip == "127.0.0.1";
  });
  ASSERT_TRUE(checked.Start("127.0.0.1", 0).ok());
  const std::string at = "127.0.0.1:" + std::to_string(checked.port());
  auto ok = client_.Call(at, FlPeerCall::kSpec, "{}", {}, 5);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  FlPeerClient impostor;
  impostor.SetIdentity("node-b", kSecret);  // the right secret, another node's name
  auto r = impostor.Call(at, FlPeerCall::kSpec, "{}", {}, 5);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(r.status().message().find("node 'node-b' holds the cluster's peer secret but is not "
                                      "the node registered at 127.0.0.1"),
            std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(checked.refused(), 1u);
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0], std::make_pair(std::string("node-a"), std::string("127.0.0.1")));
  EXPECT_EQ(asked[1], std::make_pair(std::string("node-b"), std::string("127.0.0.1")));
  checked.Stop();
}

TEST_F(FlPeerTest, ACallWithoutTheHandshakeIsRefusedWithAMessageAndTheLinkClosed) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(server_->port());
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  // A request frame straight away (kAdmit, "{}"), as a process that does not know the secret.
  char frame[26] = {'S', 'H', 'F', 'P'};
  const uint32_t kind = static_cast<uint32_t>(FlPeerCall::kAdmit), json_len = 2;
  std::memcpy(frame + 4, &kind, 4);
  std::memcpy(frame + 8, &json_len, 4);
  std::memcpy(frame + 24, "{}", 2);
  ASSERT_EQ(send(fd, frame, sizeof frame, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof frame));
  uint32_t got_kind = 0;
  std::string json;
  ASSERT_TRUE(ReadFrame(fd, &got_kind, &json));
  EXPECT_EQ(got_kind, kFlPeerChallenge);  // the server speaks first
  ASSERT_TRUE(ReadFrame(fd, &got_kind, &json));
  EXPECT_EQ(got_kind, 401u);
  EXPECT_NE(json.find("fl peer: the link did not start with the cluster's peer handshake"),
            std::string::npos)
      << json;
  char byte;
  EXPECT_EQ(recv(fd, &byte, 1, 0), 0) << "the server closes the link";
  close(fd);
  EXPECT_EQ(calls_.load(), 0);
  EXPECT_EQ(server_->refused(), 1u);
}

TEST_F(FlPeerTest, AServerWithoutTheSecretRefusesEveryLink) {
  FlPeerServer bare(
      [](FlPeerCall, const std::string&, std::span<const std::byte>) { return FlPeerReply{}; },
      nullptr);
  ASSERT_TRUE(bare.Start("127.0.0.1", 0).ok());
  auto r = client_.Call("127.0.0.1:" + std::to_string(bare.port()), FlPeerCall::kSpec, "{}", {}, 5);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(r.status().message().find("has not read the cluster's peer secret"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(bare.refused(), 1u);
}

}  // namespace
}  // namespace shoal::cluster
