// What the cluster tests (cluster_test, cluster_forward_test, cluster_fl_test) share (polling
// is tests/support/wait_for.h's WaitFor): a Prometheus sample's value, a node's fl-client token,
// and a fixture that owns the TestCluster and prints every process's log when a test fails.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "tests/support/netns_cluster.h"
#include "tests/support/wait_for.h"

namespace shoal::testing {

// The value of `family{labels...}` in a Prometheus text page (-1 when absent); `labels` is the
// exact label set as the page prints it.
inline double Metric(const std::string& page, const std::string& family,
                     const std::string& labels) {
  const std::string key = family + "{" + labels + "} ";
  const size_t at = page.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + key.size()));
}

// POST /v1/tokens on node i's control API for an fl-client token of `job` (answered 201 with
// the token in its body).
inline HttpResult MintFlClientToken(const TestCluster& cluster, int i, const std::string& job) {
  return HttpAt(
      cluster.node_ip(i), TestCluster::kControlPort, "POST", "/v1/tokens",
      R"({"role": "fl-client", "job": ")" + job + R"("})",
      {"Authorization: Bearer " + cluster.node_token(i), "Content-Type: application/json"}, 0,
      10000);
}

class ClusterFixture : public ::testing::Test {
 protected:
  // Starts a cluster of `o`, or skips the test naming what this machine lacks; callers go on
  // only unless IsSkipped() || HasFatalFailure().
  void StartCluster(const TestCluster::Options& o) {
    if (auto why = NetnsMissing(); !why.empty()) GTEST_SKIP() << why;
    cluster_ = std::make_unique<TestCluster>(o);
    std::string why;
    ASSERT_TRUE(cluster_->Start(&why)) << why;
  }
  void TearDown() override {
    if (HasFailure() && cluster_) {
      for (int i = 0; i < cluster_->nodes(); ++i) {
        std::cerr << "---- " << cluster_->node_name(i) << " ----\n" << cluster_->NodeLog(i);
      }
      for (int j = 0; j < cluster_->controllers(); ++j) {
        std::cerr << "---- controller " << j << " ----\n" << cluster_->ControllerLog(j);
      }
    }
  }
  // Whether node i's log holds `text` within `d`; the failure carries the log.
  ::testing::AssertionResult NodeLogHas(int i, const std::string& text,
                                        std::chrono::milliseconds d) {
    if (WaitFor([&] { return cluster_->NodeLog(i).find(text) != std::string::npos; }, d)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << cluster_->NodeLog(i);
  }

  std::unique_ptr<TestCluster> cluster_;
};

}  // namespace shoal::testing
