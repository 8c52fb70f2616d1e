// FlCoordinator on its own: updates admitted from a real shared-memory pool, folded by the test
// as a leaf would, answered as the gateway reports a leaf's answers. What a leaf's 502 does to
// its partial sum and its round.
#include "shoal/fl/coordinator/fl_coordinator.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "coordinator_fixture.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/pool/shm_pool.h"
#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"
#include "shoal/interfaces/fl_leaf_env.h"

namespace shoal {
namespace {

using Json = nlohmann::json;

class FlCoordinatorTest : public coordinator_test::CoordinatorFixture {
 protected:
  void SetUp() override {
    MakeDirAndPool("shoal-coord-test");
    if (HasFatalFailure()) return;
    fl_ = std::make_unique<FlCoordinator>(config_);
    fl_->SetOnGpuFallback([this](const std::string& job) { fallbacks_.push_back(job); });
    DeployAndJoin(RbSpec(3), 3, "c");
  }
  // Client k's update: w0 + (k + 1) / 16 everywhere, from `samples` samples.
  std::vector<float> X(int k) {
    std::vector<float> x = w0_;
    for (float& v : x) v += float(k + 1) / 16.0f;
    return x;
  }
  // Version 1 is the FedAvg of the three clients' updates: Σ n_k x_k / Σ n_k with
  // n_k = 100 (k + 1).
  void ExpectVersionOneIsTheFedAvg() {
    auto m = fl_->Model("rb", 1);
    ASSERT_TRUE(m.ok());
    const std::vector<float> v1 = Values(*m->bytes);
    ASSERT_EQ(v1.size(), w0_.size());
    double max_diff = 0;
    for (size_t i = 0; i < v1.size(); ++i) {
      double want = 0;
      for (int k = 0; k < 3; ++k) want += 100.0 * (k + 1) * (double(w0_[i]) + (k + 1) / 16.0);
      max_diff = std::max(max_diff, std::abs(v1[i] - want / 600.0));
    }
    EXPECT_LT(max_diff, 1e-5);
    // The cached bytes (a header, then each tensor copied on the commit's threads) are the file
    // the model writer makes of those weights, byte for byte.
    model::Model v1_model(mspec_);
    v1_model.values = v1;
    const std::vector<std::byte> file =
        model::ModelToSafetensors(v1_model, {{std::string(model::kMetadataJob), "rb"},
                                             {std::string(model::kMetadataVersion), "1"},
                                             {"format", "pt"}});
    ASSERT_EQ(m->bytes->size(), file.size());
    EXPECT_EQ(0, std::memcmp(m->bytes->data(), file.data(), file.size()));
  }
  struct InFlight {
    uint64_t ticket = 0, buffer = 0;
    float coefficient = 0;
    float* partial = nullptr;
  };
  // As the gateway does: the body into a pool buffer, admitted, its partial sum named for leaf
  // instance 7.
  InFlight Send(int k) {
    auto body = UpdateBody(k, X(k));
    EXPECT_TRUE(body.ok());
    InFlight f;
    auto b = WriteAsGateway(*body);
    EXPECT_TRUE(b.ok());
    f.buffer = b->buffer;
    auto adm = fl_->Admit("rb", *pool_, b->body, f.buffer);
    EXPECT_TRUE(adm.ok()) << adm.status().ToString();
    if (!adm.ok()) return f;
    f.ticket = adm->ticket;
    f.coefficient = adm->coefficient;
    auto partial = fl_->PartialFor(f.ticket, 7);
    EXPECT_TRUE(partial.ok()) << partial.status().ToString();
    f.partial = reinterpret_cast<float*>(pool_->Data(*partial).data());
    return f;
  }
  // The leaf folds client k's update into its partial sum (only the first `n` elements when
  // it fails halfway, plus a wrong value, as a GPU error midway could leave it).
  void LeafFold(const InFlight& f, int k, size_t n = SIZE_MAX, bool garbage = false) {
    const std::vector<float> x = X(k);
    aggregator::Fold(f.partial, x.data(), aggregator::DType::kF32, std::min(n, x.size()),
                     f.coefficient);
    if (garbage) f.partial[x.size() - 1] += 1000.0f;
  }
  void Answer(const InFlight& f, int status, bool leaf_answered = true) {
    fl_->Completed(f.ticket, status, leaf_answered);
    (void)pool_->Release(f.buffer, kShoaldSlot);
  }

  std::vector<std::string> fallbacks_;
};

// A job's leaf fold device (spec.aggregation.device) survives a restart: the restored spec and
// the leaves it asks for carry it, and a record written before the field existed reads "auto".
TEST_F(FlCoordinatorTest, TheAggregationDeviceIsKeptAcrossARestart) {
  FlJobSpec cpu = RbSpec(3);
  cpu.name = "on-cpu";
  cpu.aggregation_device = "cpu";
  ASSERT_TRUE(fl_->DeployJob(cpu).ok());
  fl_.reset();
  // "rb"'s record as an older shoald wrote it: no aggregation_device.
  const std::string rb_state = dir_ + "/jobs/rb/state.json";
  Json rb = Json::parse(std::ifstream(rb_state));
  ASSERT_TRUE(rb.contains("spec")) << rb.dump();
  ASSERT_EQ(rb["spec"].value("aggregation_device", ""), "auto");
  rb["spec"].erase("aggregation_device");
  std::ofstream(rb_state) << rb.dump();
  fl_ = std::make_unique<FlCoordinator>(config_);
  ASSERT_TRUE(fl_->Restore().ok());
  auto restored = fl_->Spec("on-cpu");
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->aggregation_device, "cpu");
  auto old = fl_->Spec("rb");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->aggregation_device, "auto");
  std::map<std::string, std::string> devices;
  for (const FunctionSpec& f : fl_->LeafSpecs()) {
    devices[f.tenant + "/" + f.name] = f.handler.env.at(fl_leaf_env::kAggregationDevice);
  }
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices.begin()->second, "cpu");
  EXPECT_EQ(std::next(devices.begin())->second, "auto");
}

// A leaf's GPU fold fails halfway through client 1's update (the leaf answers 502 itself) while
// client 2's update, already sent to the same leaf, is folded into the same partial sum by the
// CPU before the coordinator hears of the failure. The partial is rebuilt at commit from every
// acknowledged update (a rebuild at the 502 would have wiped client 2's fold, which is then
// acknowledged), the failed update does not count toward closing the round (its resend joins
// it), and the fallback is counted once.
TEST_F(FlCoordinatorTest, LeafGpuFailureRebuildsThePartialAtCommitAndCountsTheFallback) {
  const InFlight a = Send(0);
  LeafFold(a, 0);
  Answer(a, 202);
  const InFlight b = Send(1);
  LeafFold(b, 1, 100, /*garbage=*/true);
  const InFlight c = Send(2);  // the third admission: the round is full for now
  LeafFold(c, 2);              // the leaf, on the CPU now, folds it before the 502 is heard
  Answer(b, 502);
  EXPECT_EQ(fallbacks_, std::vector<std::string>{"rb"});
  EXPECT_EQ(Status().value("gpu_fallbacks", 0), 1);
  Answer(c, 202);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Status().value("version", -1), 0) << "the round waits for client 1 again";
  const InFlight b2 = Send(1);  // the client sends it again
  LeafFold(b2, 1);
  Answer(b2, 202);
  ASSERT_TRUE(WaitVersion(1)) << Status().dump();
  const Json st = Status();
  EXPECT_EQ(st["versions"][1].value("updates", 0), 3);
  EXPECT_EQ(st.value("updates_total", 0), 3);
  ASSERT_NO_FATAL_FAILURE(ExpectVersionOneIsTheFedAvg());
  EXPECT_EQ(fallbacks_.size(), 1u);
}

// The gateway's 502 (the leaf died) rebuilds the partial sum too, but is not a GPU fallback.
TEST_F(FlCoordinatorTest, ADeadLeafIsRebuiltButNotCountedAsAFallback) {
  const InFlight a = Send(0);
  LeafFold(a, 0, 10, /*garbage=*/true);
  Answer(a, 502, /*leaf_answered=*/false);
  EXPECT_TRUE(fallbacks_.empty());
  EXPECT_EQ(Status().value("gpu_fallbacks", -1), 0);
  for (int k = 0; k < 3; ++k) {
    const InFlight f = Send(k);
    LeafFold(f, k);
    Answer(f, 202);
  }
  ASSERT_TRUE(WaitVersion(1)) << Status().dump();
  ASSERT_NO_FATAL_FAILURE(ExpectVersionOneIsTheFedAvg());
}

// A leaf that checks and folds in one pass refuses client 1's update (a NaN past its first
// block) after folding part of it: the client's 400 stands, the gateway passes the reply's mark
// on (PartialChanged, then Completed), and the partial sum, which client 2's update then joins,
// is rebuilt at commit from the acknowledged updates; the resent update joins the round. Not a
// GPU fallback; the status counts the rebuild. Without the mark, nothing is rebuilt.
TEST_F(FlCoordinatorTest, ARefusalThatChangedThePartialRebuildsItAtCommit) {
  const InFlight a = Send(0);
  LeafFold(a, 0);
  Answer(a, 202);
  const InFlight b = Send(1);
  LeafFold(b, 1, 1024);  // the blocks before the NaN
  fl_->PartialChanged(b.ticket);
  Answer(b, 400);
  const InFlight c = Send(2);
  LeafFold(c, 2);
  Answer(c, 202);
  EXPECT_EQ(Status().value("partial_rebuilds", -1), 0) << "rebuilt at commit, not before";
  const InFlight b2 = Send(1);
  LeafFold(b2, 1);
  Answer(b2, 202);
  ASSERT_TRUE(WaitVersion(1)) << Status().dump();
  ASSERT_NO_FATAL_FAILURE(ExpectVersionOneIsTheFedAvg());
  const Json st = Status();
  EXPECT_EQ(st.value("partial_rebuilds", -1), 1);
  EXPECT_EQ(st.value("gpu_fallbacks", -1), 0);
  EXPECT_TRUE(fallbacks_.empty());
  EXPECT_EQ(st["versions"][1].value("updates", 0), 3);
}

// The same refusal without the mark (PartialChanged not called) leaves the partial sum as the
// leaf left it: the half-folded update is in version 1, which is why the leaf must mark it.
TEST_F(FlCoordinatorTest, ARefusalWithoutTheMarkIsNotRebuilt) {
  const InFlight a = Send(0);
  LeafFold(a, 0);
  Answer(a, 202);
  const InFlight b = Send(1);
  LeafFold(b, 1, 1024);
  Answer(b, 400);
  for (int k : {1, 2}) {
    const InFlight f = Send(k);
    LeafFold(f, k);
    Answer(f, 202);
  }
  ASSERT_TRUE(WaitVersion(1)) << Status().dump();
  EXPECT_EQ(Status().value("partial_rebuilds", -1), 0);
  auto m = fl_->Model("rb", 1);
  ASSERT_TRUE(m.ok());
  const std::vector<float> v1 = Values(*m->bytes);
  double want = 0;
  for (int k = 0; k < 3; ++k) want += 100.0 * (k + 1) * (double(w0_[0]) + (k + 1) / 16.0);
  EXPECT_GT(std::abs(v1[0] - want / 600.0), 1e-3) << "the refused update's first values count";
}

}  // namespace
}  // namespace shoal
