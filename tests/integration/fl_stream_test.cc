// FL updates folded while their bodies arrive, end to end through a real shoald (issue 34): a
// client that leaves mid-body, after its leaf folded the parts that had landed, leaves no trace
// in the committed model (bit for bit the model of a second job that got only the good
// updates), and the job counts the partial sum's rebuild.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "tests/support/hugepages_for_test.h"
#include "tests/support/loopback.h"
#include "tests/support/shoald_fixture.h"
#include "tests/support/update_for_test.h"
#include "tests/support/wait_for.h"

namespace shoal::testing {
namespace {

using Json = nlohmann::json;
// 1.63 M parameters: a 6.5 MB update, past the size from which the gateway streams one.
constexpr uint32_t kHidden = 2048;

struct Client {
  std::string id, token;
};

class FlStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = ShoaldShortOfHugepages(Shoald::Options{}.pool_bytes); !why.empty()) {
      GTEST_SKIP() << why;
    }
    ASSERT_TRUE(shoald_.Start()) << shoald_.Log();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- shoald log ----\n" << shoald_.Log();
  }
  void Deploy(const std::string& job) {
    ASSERT_EQ(shoald_
                  .Deploy("apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + job +
                          "\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, "
                          "hidden: " +
                          std::to_string(kHidden) +
                          "}\n  clients: {expected: 2}\n  stop: {rounds: 1}\n"
                          "  aggregation: {maxFanIn: 4, maxLeaves: 1, device: cpu}\n")
                  .exit_code,
              0);
  }
  Client Join(const std::string& job) {
    auto r =
        shoald_.Api("POST", "/v1/jobs/" + job + "/join", "{}", {"Content-Type: application/json"});
    EXPECT_EQ(r.status, 200) << r.body;
    auto j = Json::parse(r.body, nullptr, false);
    return {j.value("client_id", ""), j.value("token", "")};
  }
  Json Status(const std::string& job) {
    return Json::parse(shoald_.Api("GET", "/v1/jobs/" + job).body, nullptr, false);
  }
  std::vector<float> Download(const std::string& job, uint64_t version) {
    auto r = shoald_.Api("GET", "/v1/jobs/" + job + "/model?version=" + std::to_string(version));
    EXPECT_EQ(r.status, 200) << r.body;
    auto m = model::ModelFromSafetensors(
        std::as_bytes(std::span<const char>(r.body.data(), r.body.size())), spec_);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->values : std::vector<float>{};
  }
  // Pushes `body`; retried while the leaf is not up yet, or while an earlier attempt of the
  // same client is still being answered (409 until its leaf's answer is in).
  HttpResult Push(const std::string& job, const std::string& body) {
    HttpResult r;
    for (int attempt = 0; attempt < 100; ++attempt) {
      r = Http(shoald_.port(), "POST", "/v1/jobs/" + job + "/updates", body,
               {"Content-Type: application/octet-stream", shoald_.AuthHeader()});
      if (r.status != 502 && r.status != 503 && r.status != 404 && r.status != 409) return r;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return r;
  }
  bool WaitVersion(const std::string& job, uint64_t v) {
    for (int i = 0; i < 500; ++i) {
      if (Status(job).value("version", uint64_t{0}) >= v) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Sends the request head and the first `bytes` of `body`, then closes the connection.
  void SendPartOfThenLeave(const std::string& job, const std::string& body, size_t bytes) {
    const int fd = ConnectLoopback(shoald_.port());
    ASSERT_GE(fd, 0);
    std::string out = "POST /v1/jobs/" + job +
                      "/updates HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n" +
                      shoald_.AuthHeader() + "\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\n\r\n";
    out.append(body, 0, bytes);
    for (size_t sent = 0; sent < out.size();) {
      const ssize_t n = write(fd, out.data() + sent, out.size() - sent);
      ASSERT_GT(n, 0);
      sent += static_cast<size_t>(n);
    }
    close(fd);
  }

  Shoald shoald_;
  model::ModelSpec spec_ = model::MlpSpec(784, {kHidden}, 10);
};

TEST_F(FlStreamTest, AClientThatLeavesMidBodyLeavesNoTraceInTheCommittedModel) {
  Deploy("streamed");
  Deploy("clean");
  const Client a0 = Join("streamed"), a1 = Join("streamed");
  const Client b0 = Join("clean"), b1 = Join("clean");
  const std::vector<float> global = Download("streamed", 0);
  ASSERT_EQ(global, Download("clean", 0));
  std::vector<std::vector<float>> trained(2, global);
  for (size_t k = 0; k < 2; ++k) {
    for (size_t i = 0; i < global.size(); ++i) trained[k][i] += float((i * 7 + k) % 13) / 64.0f;
  }
  const auto body = [&](const std::string& job, const Client& c, size_t k) {
    return UpdateBody(spec_, trained[k], job, c.id, c.token, 0, 100 + 10 * k, 150);
  };
  ASSERT_EQ(Push("streamed", body("streamed", a0, 0)).status, 202);
  // a1 sends 5 of its 6.5 MB and leaves: its leaf folded the parts announced to it (one per
  // MiB), then drops them; the client sends its update again.
  const std::string a1_body = body("streamed", a1, 1);
  ASSERT_GT(a1_body.size(), size_t{6} << 20);
  SendPartOfThenLeave("streamed", a1_body, size_t{5} << 20);
  // Admitted on its head, it counted toward closing the round until its leaf's answer reopens
  // it (as for any refused update); sent again before that, it would join the next round.
  ASSERT_TRUE(WaitFor(
      [&] {
        return shoald_.Log().find("refused an update of client " + a1.id +
                                  " after folding part of it") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << "the leaf did not drop the part it had folded";
  const HttpResult again = Push("streamed", a1_body);
  ASSERT_EQ(again.status, 202) << again.body;
  ASSERT_EQ(Push("clean", body("clean", b0, 0)).status, 202);
  ASSERT_EQ(Push("clean", body("clean", b1, 1)).status, 202);
  ASSERT_TRUE(WaitVersion("streamed", 1)) << Status("streamed").dump();
  ASSERT_TRUE(WaitVersion("clean", 1)) << Status("clean").dump();
  const std::vector<float> got = Download("streamed", 1), want = Download("clean", 1);
  ASSERT_EQ(got.size(), global.size());
  ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << "the update whose client left mid-body left a trace in the committed model";
  ASSERT_NE(got, global);
  const Json st = Status("streamed");
  EXPECT_EQ(st.value("updates_total", 0), 2) << st.dump();
  EXPECT_EQ(st.value("partial_rebuilds", -1), 1) << st.dump();
  EXPECT_EQ(Status("clean").value("partial_rebuilds", -1), 0);
}

}  // namespace
}  // namespace shoal::testing
