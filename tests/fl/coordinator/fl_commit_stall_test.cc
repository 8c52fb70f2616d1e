// A commit or a checkpoint never stalls the gateway's calls into the coordinator: with the
// commit thread held on purpose inside a commit (TestHooks::commit), or the checkpoint writer
// held inside the update log's compaction (TestHooks::log_compaction), the calls a gateway loop
// makes for an update (Admit, PartialFor, Completed) still return, the update is counted and
// logged, and once released the commit and the compaction finish with it. The held thread is
// released whatever happens, so that a stall fails the test instead of hanging it.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator_fixture.h"
#include "shoal/fl/kernels/fold.h"

namespace shoal {
namespace {

// A latch the hooked thread waits on once armed: Enter marks it reached, Release lets it go on.
class Latch {
 public:
  void Arm() {
    std::lock_guard lock(mu_);
    armed_ = true;
  }
  void Enter() {
    std::unique_lock lock(mu_);
    if (!armed_ || used_) return;  // only the first call after Arm is held
    used_ = true;
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return released_; });
  }
  bool WaitEntered() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [this] { return entered_; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, used_ = false, entered_ = false, released_ = false;
};

class FlCommitStallTest : public coordinator_test::CoordinatorFixture {
 protected:
  void SetUp() override {
    MakeDirAndPool("shoal-stall-test");
    if (HasFatalFailure()) return;
    fl_ = std::make_unique<FlCoordinator>(config_);
    fl_->SetTestHooks({[this](const std::string&) { commit_.Enter(); },
                       [this](const std::string&) { compaction_.Enter(); }});
    // FedBuff with K = 2: two updates close a round; the third goes to the next one.
    FlJobSpec spec = RbSpec(3);
    spec.algorithm = "fedbuff";
    spec.algorithm_params["k"] = 2;
    spec.rounds = 10;
    DeployAndJoin(spec, 3, "c");
  }
  void TearDown() override {
    commit_.Release();
    compaction_.Release();
    CoordinatorFixture::TearDown();
  }
  // What the gateway's loop does for client k's update: the body into the pool, Admit, the
  // leaf's partial sum (PartialFor), the leaf folds it, and its answer (Completed, 202). The
  // admission's error, or "" once the update is acknowledged.
  std::string Update(int k) {
    std::vector<float> x = w0_;
    for (float& v : x) v += float(k + 1) / 16.0f;
    auto body = UpdateBody(k, x);
    if (!body.ok()) return body.status().ToString();
    auto b = WriteAsGateway(*body);
    if (!b.ok()) return b.status().ToString();
    auto adm = fl_->Admit("rb", *pool_, b->body, b->buffer);
    if (!adm.ok()) return adm.status().ToString();
    auto partial = fl_->PartialFor(adm->ticket, 7);
    if (!partial.ok()) return partial.status().ToString();
    auto* acc = reinterpret_cast<float*>(pool_->Data(*partial).data());
    aggregator::Fold(acc, x.data(), aggregator::DType::kF32, x.size(), adm->coefficient);
    fl_->Completed(adm->ticket, 202, true);
    (void)pool_->Release(b->buffer, kShoaldSlot);
    return "";
  }
  // Client k's update on another thread (the loop): its result, or a failure if it does not
  // return while the hooked thread is held (every latch is then released so that it can).
  void ExpectUpdateReturnsWhileHeld(int k) {
    auto f = std::async(std::launch::async, [this, k] { return Update(k); });
    const bool returned = f.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    if (!returned) {
      commit_.Release();
      compaction_.Release();
    }
    ASSERT_TRUE(returned) << "client " << k << "'s update waited for the held thread";
    EXPECT_EQ(f.get(), "");
  }
  // The update log's records: each one's client id.
  std::vector<std::string> LogClients() {
    std::ifstream f(dir_ + "/jobs/rb/updates.log", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<std::string> clients;
    constexpr size_t kRecord = 96, kClientAt = 56;  // update_log.h's LogRecord
    for (size_t at = 0; at + kRecord <= bytes.size(); at += kRecord) {
      clients.emplace_back(bytes.c_str() + at + kClientAt);
    }
    return clients;
  }

  Latch commit_, compaction_;
};

// The commit of round 1 is held after it took the round: the next round's update is admitted,
// folded, acknowledged and logged meanwhile, and the version stays 0 until the commit goes on.
TEST_F(FlCommitStallTest, AHeldCommitDoesNotStallTheUpdatePath) {
  commit_.Arm();
  ASSERT_EQ(Update(0), "");
  ASSERT_EQ(Update(1), "");  // round 1 closes: its commit starts, and is held
  ASSERT_TRUE(commit_.WaitEntered());
  ASSERT_NO_FATAL_FAILURE(ExpectUpdateReturnsWhileHeld(2));
  nlohmann::json st = Status();
  EXPECT_EQ(st.value("version", -1), 0) << st.dump();
  EXPECT_EQ(st.value("updates_total", -1), 3) << st.dump();
  EXPECT_EQ(LogClients(), (std::vector<std::string>{clients_[0].client_id, clients_[1].client_id,
                                                    clients_[2].client_id}));
  commit_.Release();
  ASSERT_TRUE(WaitVersion(1)) << Status().dump();
  st = Status();
  EXPECT_EQ(st["versions"][1].value("updates", 0), 2) << st.dump();
}

// The update log's compaction behind version 1's checkpoint is held before the compacted log
// replaces the old one: an update acknowledged meanwhile is appended and acknowledged at once,
// and the compacted log keeps it (the records of version 1, durable now, are gone).
TEST_F(FlCommitStallTest, AHeldLogCompactionDoesNotStallTheUpdatePath) {
  compaction_.Arm();
  ASSERT_EQ(Update(0), "");
  ASSERT_EQ(Update(1), "");
  ASSERT_TRUE(compaction_.WaitEntered());
  ASSERT_NO_FATAL_FAILURE(ExpectUpdateReturnsWhileHeld(2));
  EXPECT_EQ(Status().value("updates_total", -1), 3);
  compaction_.Release();
  const std::vector<std::string> want = {clients_[2].client_id};
  for (int i = 0; i < 500 && LogClients() != want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(LogClients(), want);
  EXPECT_EQ(Status().value("version", -1), 1);
}

}  // namespace
}  // namespace shoal
