// What the coordinator's unit tests do in shoald's place: a state directory and a real
// shared-memory pool per test, a client's update written into the pool as the gateway writes it,
// and the job's models and status read back.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shoal/common/payload.h"
#include "shoal/dataplane/pool/shm_pool.h"
#include "shoal/fl/coordinator/fl_coordinator.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"
#include "tests/support/temp_dir.h"

namespace shoal::coordinator_test {

// The state directory (under /tmp, named from `prefix`), the pool ("<prefix>-<pid>", 16 MiB)
// and the coordinator's members the tests share; the job is "rb", an MLP 64-4-10 on digits.
class CoordinatorFixture : public ::testing::Test {
 public:
  // Job "rb": FedAvg over an MLP 64-4-10 on digits, `clients` expected, two rounds.
  static FlJobSpec RbSpec(uint32_t clients) {
    FlJobSpec spec;
    spec.name = "rb";
    spec.algorithm = "fedavg";
    spec.architecture = "mlp";
    spec.hidden = 4;
    spec.dataset = "digits";
    spec.clients = clients;
    spec.rounds = 2;
    return spec;
  }

 protected:
  // Creates the directory and the pool (the coordinator is each fixture's to start).
  void MakeDirAndPool(const std::string& prefix) {
    dir_ = shoal::testing::MakeTempDir(prefix);
    config_.state_dir = dir_;
    auto p = ShmPool::Create(prefix + "-" + std::to_string(getpid()), 16 << 20);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool_ = std::move(*p);
    mspec_ = model::MlpSpec(64, {4}, 10);
  }
  void TearDown() override {
    fl_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Deploys `spec`, joins `clients` clients named <prefix>0, <prefix>1, ... and keeps version 0's
  // weights in w0_.
  void DeployAndJoin(const FlJobSpec& spec, int clients, const std::string& prefix) {
    ASSERT_TRUE(fl_->DeployJob(spec).ok());
    for (int k = 0; k < clients; ++k) {
      auto j = fl_->Join("rb", prefix + std::to_string(k), "");
      ASSERT_TRUE(j.ok()) << j.status().ToString();
      clients_.push_back(*j);
    }
    auto m = fl_->Model("rb", 0);
    ASSERT_TRUE(m.ok());
    w0_ = Values(*m->bytes);
  }
  std::vector<float> Values(const std::string& safetensors) {
    auto m = model::ModelFromSafetensors(
        std::as_bytes(std::span<const char>(safetensors.data(), safetensors.size())), mspec_);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->values : std::vector<float>{};
  }
  // Client k's update of "rb" from version 0: `values` as `dtype`, from 100 * (k + 1) samples.
  Result<std::vector<std::byte>> UpdateBody(int k, std::vector<float> values,
                                            model::DType dtype = model::DType::kF32) {
    model::Model m(mspec_);
    m.values = std::move(values);
    model::UpdateMeta meta;
    meta.job = "rb";
    meta.client_id = clients_[k].client_id;
    meta.token = clients_[k].token;
    meta.base_version = 0;
    meta.num_samples = 100 * (k + 1);
    return model::EncodeUpdate(meta, m, dtype);
  }
  // The body in a pool buffer (held with kShoaldSlot) behind its payload head, as the gateway
  // writes a request: the buffer, and where the body lies in it.
  struct PooledBody {
    uint64_t buffer = 0;
    std::span<const std::byte> body;
  };
  Result<PooledBody> WriteAsGateway(std::span<const std::byte> body) {
    const std::string_view ct = "application/octet-stream";
    const size_t off = PayloadBodyOffset(0, 0, ct.size());
    auto b = pool_->Allocate(off + body.size(), kShoaldSlot);
    if (!b.ok()) return b.status();
    auto span = pool_->Data(*b);
    WritePayloadHead(span, 3, 0, "", "", ct, body.size());
    std::memcpy(span.data() + off, body.data(), body.size());
    return PooledBody{*b, span.subspan(off, body.size())};
  }
  nlohmann::json Status() {
    return nlohmann::json::parse(*fl_->JobStatusJson("rb"), nullptr, false);
  }
  bool WaitVersion(uint64_t v) {
    for (int i = 0; i < 250; ++i) {
      if (Status().value("version", uint64_t{0}) >= v) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::string dir_;
  NodeConfig config_;
  std::unique_ptr<ShmPool> pool_;
  std::unique_ptr<FlCoordinator> fl_;
  model::ModelSpec mspec_;
  std::vector<JoinResult> clients_;
  std::vector<float> w0_;
};

}  // namespace shoal::coordinator_test
