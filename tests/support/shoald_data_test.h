// The fixture of the integration tests that train or serve on a data set through one shoald (FL
// jobs, inference): the data set loaded, or the test skipped naming what is missing; on the dpdk
// backend, skipped when shoald's pool does not fit the free hugepages; shoald started, and its
// log printed when the test failed. And shoal-client run against a server, as a user runs it.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "hugepages_for_test.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/tools/flsim/dataset.h"
#include "shoald_fixture.h"

namespace shoal::testing {

enum class TestData { kDigits, kFashionMnist };

class ShoaldDataTest : public ::testing::Test {
 protected:
  // `check_hugepages`: skip (dpdk backend only) when shoald's pool does not fit the free
  // hugepages, rather than fail to start it.
  explicit ShoaldDataTest(TestData data, bool check_hugepages = true)
      : which_(data), check_hugepages_(check_hugepages) {}
  void SetUp() override {
    auto loaded = which_ == TestData::kDigits ? client::LoadDigits() : client::LoadFashionMnist();
    if (!loaded.ok()) GTEST_SKIP() << loaded.status().message();
    data_ = std::move(*loaded);
    if (check_hugepages_) {
      if (auto why = ShoaldShortOfHugepages(Shoald::Options{}.pool_bytes); !why.empty()) {
        GTEST_SKIP() << why;
      }
    }
    ASSERT_TRUE(shoald_.Start()) << shoald_.Log();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- shoald log ----\n" << shoald_.Log();
  }
  // Deploys `manifest` (an FLJob named `job`) and mints an fl-client token of it into `*token`.
  void DeployFlJob(const std::string& manifest, const std::string& job, std::string* token) {
    ASSERT_EQ(shoald_.Deploy(manifest).exit_code, 0);
    *token = shoald_.CreateToken("fl-client", "", job);
    ASSERT_FALSE(token->empty());
  }
  // shoal-client's four IID digits clients (seed 3, unpaced) trained on `job` with `flags`
  // added, expected to exit 0; its output.
  std::string RunDigitsClients(const std::string& job, const std::string& token,
                               const std::string& flags);
  // Version `version` of `job`'s model read as `spec`; empty (and a failure) if it cannot be.
  std::vector<float> ModelOf(const std::string& job, uint64_t version,
                             const model::ModelSpec& spec) {
    auto r = shoald_.Api("GET", "/v1/jobs/" + job + "/model?version=" + std::to_string(version));
    EXPECT_EQ(r.status, 200) << r.body;
    auto m = model::ModelFromSafetensors(
        std::as_bytes(std::span<const char>(r.body.data(), r.body.size())), spec);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->values : std::vector<float>{};
  }

  client::DatasetSplit data_;
  Shoald shoald_;

 private:
  TestData which_;
  bool check_hugepages_;
};

// Digits, hugepages checked: the fixture of most digits jobs.
class DigitsShoaldTest : public ShoaldDataTest {
 protected:
  DigitsShoaldTest() : ShoaldDataTest(TestData::kDigits) {}
};

// Runs shoal-client against `server` (http://host:port) with `token` as its SHOAL_TOKEN (none
// when empty) and `args` after --server; its output (stderr too), and its exit status in `*rc`.
inline std::string RunShoalClient(const std::string& server, const std::string& token,
                                  const std::string& args, int* rc) {
  const std::string cmd = (token.empty() ? "" : "SHOAL_TOKEN=" + token + " ") + BinDir() +
                          "/shoal-client --server " + server + " " + args + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *rc = -1;
    return "popen failed: " + cmd;
  }
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  *rc = pclose(p);
  return out;
}

// The server URL of a shoald on this machine.
inline std::string ServerOf(const Shoald& shoald) {
  return "http://127.0.0.1:" + std::to_string(shoald.port());
}

inline std::string ShoaldDataTest::RunDigitsClients(const std::string& job,
                                                    const std::string& token,
                                                    const std::string& flags) {
  int rc = -1;
  const std::string out = RunShoalClient(
      ServerOf(shoald_), token,
      "--job " + job + " --data digits --clients 4 --partition iid --seed 3 --time-scale 0 " +
          flags,
      &rc);
  EXPECT_EQ(rc, 0) << out;
  return out;
}

}  // namespace shoal::testing
