// LIFL's hierarchy across nodes, at the coordinators: a job's top (node "a") and a node that
// folds updates for it (node "b"), each with its own shared-memory pool, wired as shoald's
// cluster part wires them (admit on the header, reports, one partial sum per round) but in one
// process. The committed model is the one a single node would commit; a lost node's updates
// are asked for again; the member's update log keeps exactly what the top has not checkpointed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "coordinator_fixture.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/pool/shm_pool.h"
#include "shoal/fl/coordinator/fl_coordinator.h"
#include "shoal/fl/coordinator/fl_members.h"
#include "shoal/fl/kernels/fold.h"
#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/safetensors.h"
#include "shoal/fl/wire/update_format.h"
#include "tests/support/temp_dir.h"
#include "tests/support/update_for_test.h"

namespace shoal {
namespace {

using Json = nlohmann::json;

// Node b's link to the top: direct calls where shoald sends FL peer messages.
class DirectLink final : public FlTopLink {
 public:
  explicit DirectLink(FlCoordinator* top) : top_(top) {}
  Result<Admission> Admit(const std::string& top, const std::string& job, std::string_view bearer,
                          std::span<const std::byte> head, uint64_t key) override {
    EXPECT_EQ(top, "a");
    EXPECT_EQ(bearer, "the-bearer");
    head_bytes = head.size();
    auto a = top_->AdmitRemote(job, "b", head, key);
    if (lose_answer) {
      // The top admitted it, but its answer never reaches b (a timeout, a broken link).
      lose_answer = false;
      return Unavailable("fl peer 10.0.0.1:8082: no reply within 5 s");
    }
    return a;
  }
  void Report(const std::string&, const std::string& job, uint64_t ticket, bool ok) override {
    top_->CompletedRemote(job, ticket, ok);
  }
  size_t head_bytes = 0;
  bool lose_answer = false;

 private:
  FlCoordinator* top_;
};

class FlClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int n = 0; n < 2; ++n) {
      dirs_[n] = shoal::testing::MakeTempDir("shoal-flcluster-test");
      configs_[n].state_dir = dirs_[n];
      configs_[n].node_name = n == 0 ? "a" : "b";
      // One checkpoint store for both (a directory every node mounts).
      configs_[n].checkpoint_dir = dirs_[0] + "/shared";
      auto p = ShmPool::Create(
          "shoal-flcluster-" + std::to_string(getpid()) + "-" + std::to_string(n), 16 << 20);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      pools_[n] = std::move(*p);
    }
    top_ = std::make_unique<FlCoordinator>(configs_[0]);
    member_ = std::make_unique<FlCoordinator>(configs_[1]);
    FlJobSpec spec = coordinator_test::CoordinatorFixture::RbSpec(3);
    spec.rounds = 3;
    ASSERT_TRUE(top_->DeployJob(spec).ok());
    ASSERT_TRUE(top_->FoldsElsewhere("rb"));
    mspec_ = model::MlpSpec(64, {4}, 10);
    for (int k = 0; k < 3; ++k) {
      auto j = top_->Join("rb", "c" + std::to_string(k), "");
      ASSERT_TRUE(j.ok()) << j.status().ToString();
      clients_.push_back(*j);
    }
    link_ = std::make_unique<DirectLink>(top_.get());
    member_->SetTopLink(link_.get());
    top_->SetPartialFetch([this](const std::string& node, const std::string& job, uint64_t round,
                                 const std::vector<uint64_t>& tickets, std::vector<float>* sum) {
      EXPECT_EQ(node, "b");
      ++fetches_;
      auto p = member_->members().PartialOf(job, round, tickets);
      if (!p.ok()) return p.status();
      sum->assign(p->sum.begin(), p->sum.end());
      return Status::Ok();
    });
    top_->SetAdmissionProbe(
        [this](const std::string& node, const std::string& job, const std::vector<uint64_t>& keys) {
          EXPECT_EQ(node, "b");
          ++probes_;
          return member_->members().Unknown(job, keys);
        });
    auto s = top_->Spec("rb");
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(member_->FoldFor(*s, "a").ok());
    auto m = top_->Model("rb", 0);
    ASSERT_TRUE(m.ok());
    w0_ = Values(*m->bytes);
  }
  void TearDown() override {
    // The top first: its commit thread asks the member (probes, partial sums) until it is gone.
    top_.reset();
    member_.reset();
    for (const auto& d : dirs_) std::filesystem::remove_all(d);
  }
  std::vector<float> Values(const std::string& safetensors) {
    auto m = model::ModelFromSafetensors(
        std::as_bytes(std::span<const char>(safetensors.data(), safetensors.size())), mspec_);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->values : std::vector<float>{};
  }
  std::vector<float> X(int k, const std::vector<float>& base) {
    std::vector<float> x = base;
    for (size_t i = 0; i < x.size(); ++i) x[i] += float(k + 1) / 16.0f + float(i % 7) / 64.0f;
    return x;
  }
  // Client k's update from `base` (version `v`), sent to node `n` (0: the top, 1: b), folded by
  // that node's leaf (instance 7) and answered `status`. The ticket's admission status.
  shoal::Status Send(int n, int k, uint64_t v, const std::vector<float>& base, int status = 200) {
    const uint64_t samples = 100 * (k + 1);
    const std::string body = testing::UpdateBody(mspec_, X(k, base), "rb", clients_[k].client_id,
                                                 clients_[k].token, v, samples);
    const std::string_view ct = "application/octet-stream";
    const size_t off = PayloadBodyOffset(0, 0, ct.size());
    ShmPool& pool = *pools_[n];
    FlCoordinator& fl = n == 0 ? *top_ : *member_;
    Result<FlAdmission> adm = Internal("not admitted");
    const bool member = n == 1 && fl.FoldsForOtherNode("rb");  // (b took the job over: local)
    if (member) {
      // As the gateway does: the top admits the update on its header (prefix + UpdateHeader,
      // no pool memory), then its body is read into a buffer that the member holds.
      uint32_t hlen;
      std::memcpy(&hlen, body.data() + 4, 4);
      const auto all = std::as_bytes(std::span(body.data(), body.size()));
      std::promise<Result<FlAdmission>> answer;
      fl.AdmitForTopAsync("rb", pool, all.first(8 + hlen), 0, "the-bearer",
                          [&](Result<FlAdmission> a) { answer.set_value(std::move(a)); });
      adm = answer.get_future().get();
      if (!adm.ok()) return adm.status();
    }
    auto b = pool.Allocate(off + body.size(), kShoaldSlot);
    EXPECT_TRUE(b.ok());
    auto span = pool.Data(*b);
    WritePayloadHead(span, 3, 0, "", "", ct, body.size());
    std::memcpy(span.data() + off, body.data(), body.size());
    if (!member) {
      adm = fl.Admit("rb", pool, span.subspan(off, body.size()), *b);
    } else if (Status st = fl.HoldUpdate(adm->ticket, pool, *b); !st.ok()) {
      adm = st;
    }
    if (!adm.ok()) {
      (void)pool.Release(*b, kShoaldSlot);
      return adm.status();
    }
    auto partial = fl.PartialFor(adm->ticket, 7);
    EXPECT_TRUE(partial.ok()) << partial.status().ToString();
    const std::vector<float> x = X(k, base);
    aggregator::Fold(reinterpret_cast<float*>(pool.Data(*partial).data()), x.data(),
                     aggregator::DType::kF32, x.size(), adm->coefficient);
    fl.Completed(adm->ticket, status, true);
    (void)pool.Release(*b, kShoaldSlot);
    return {};
  }
  Json JobStatus() { return Json::parse(*top_->JobStatusJson("rb"), nullptr, false); }
  bool WaitVersion(uint64_t v) {
    for (int i = 0; i < 250; ++i) {
      if (JobStatus().value("version", uint64_t{0}) >= v) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Version v of "rb" at `node` is the FedAvg of the three clients' updates from `base`; `model`
  // (when given) gets its values.
  void ExpectFedAvgOfAll(FlCoordinator& node, uint64_t v, const std::vector<float>& base,
                         std::vector<float>* model = nullptr) {
    auto m = node.Model("rb", v);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const std::vector<float> got = Values(*m->bytes);
    if (model != nullptr) *model = got;
    const std::vector<float> want = FedAvg({0, 1, 2}, base);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;
  }
  std::vector<float> FedAvg(const std::vector<int>& ks, const std::vector<float>& base) {
    std::vector<double> acc(base.size(), 0.0);
    double n = 0;
    for (int k : ks) {
      const std::vector<float> x = X(k, base);
      for (size_t i = 0; i < x.size(); ++i) acc[i] += 100.0 * (k + 1) * x[i];
      n += 100.0 * (k + 1);
    }
    std::vector<float> out(base.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(acc[i] / n);
    return out;
  }
  uintmax_t MemberLogBytes() {
    std::error_code ec;
    return std::filesystem::file_size(dirs_[1] + "/members/rb/updates.log", ec);
  }

  std::string dirs_[2];
  NodeConfig configs_[2];
  std::unique_ptr<ShmPool> pools_[2];
  std::unique_ptr<FlCoordinator> top_, member_;
  std::unique_ptr<DirectLink> link_;
  model::ModelSpec mspec_;
  std::vector<JoinResult> clients_;
  std::vector<float> w0_;
  std::atomic<int> fetches_{0};
  std::atomic<int> probes_{0};
};

TEST_F(FlClusterTest,
       ARoundFoldedOnTwoNodesCommitsTheModelOneNodeWouldAndTheMemberLogsUntilDurable) {
  const size_t used_b = pools_[1]->Stats().used_bytes;
  ASSERT_TRUE(Send(0, 0, 0, w0_).ok());  // at the top
  ASSERT_TRUE(Send(1, 1, 0, w0_).ok());  // at b: admitted by the top on its header alone
  EXPECT_GT(link_->head_bytes, 8u);
  EXPECT_LT(link_->head_bytes, 1024u);  // never the tensors (4810 floats)
  ASSERT_TRUE(Send(1, 2, 0, w0_).ok());
  // Both of b's updates are durable there: two records in its log, their buffers held.
  EXPECT_EQ(MemberLogBytes(), 2 * 96u);
  ASSERT_TRUE(WaitVersion(1)) << JobStatus().dump();
  EXPECT_EQ(fetches_.load(), 1);  // one partial sum from b for the round, not two updates
  const Json st = JobStatus();
  EXPECT_EQ(st["versions"].back()["updates"], 3) << st.dump();
  EXPECT_EQ(st["updates_total"], 3);
  EXPECT_EQ(st["folded_elsewhere"]["b"]["updates"], 2) << st.dump();
  EXPECT_EQ(st["folded_elsewhere"]["b"]["partial_sums"], 1);
  EXPECT_EQ(st["folded_elsewhere"]["b"]["partial_sum_bytes"], 310 * 4);
  std::vector<float> got;
  ASSERT_NO_FATAL_FAILURE(ExpectFedAvgOfAll(*top_, 1, w0_, &got));
  // The next admission through b tells it version 1 is checkpointed: round 1's two updates
  // leave its log and its pool; only the new update is held.
  // (A join's answer waits for its own checkpoint, so for version 1's, written before it.)
  ASSERT_TRUE(top_->Join("rb", "late", "").ok());
  ASSERT_TRUE(Send(1, 1, 1, got).ok());
  EXPECT_EQ(MemberLogBytes(), 96u);
  EXPECT_GT(pools_[1]->Stats().used_bytes, used_b);  // the round-2 update and its partial
  // A token the top does not know is refused there; b holds nothing for it.
  clients_[2].token = "wrong";
  const uint64_t used = pools_[1]->Stats().used_bytes;
  shoal::Status bad = Send(1, 2, 1, got);
  EXPECT_EQ(bad.code(), StatusCode::kPermissionDenied) << bad.ToString();
  EXPECT_EQ(pools_[1]->Stats().used_bytes, used);
}

TEST_F(FlClusterTest, ALostNodesAcknowledgedUpdatesAreAskedForAgainAndTheRoundCommits) {
  ASSERT_TRUE(Send(1, 1, 0, w0_).ok());
  ASSERT_TRUE(Send(1, 2, 0, w0_).ok());
  EXPECT_EQ(JobStatus()["updates_total"], 2);
  // b's lease expires before the round is due: its two acknowledged updates never reached the
  // top as a partial sum.
  top_->NodeLost("b");
  EXPECT_EQ(JobStatus()["updates_total"], 0) << JobStatus().dump();
  EXPECT_EQ(JobStatus()["folded_elsewhere"]["b"]["lost_updates"], 2);
  // Their clients are told to train and send again (not to wait for the round).
  for (int k : {1, 2}) {
    auto t = top_->Task("rb", clients_[k].client_id, clients_[k].token);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->kind, TaskResult::Kind::kTrain) << k;
  }
  ASSERT_TRUE(Send(0, 0, 0, w0_).ok());
  EXPECT_EQ(JobStatus()["version"], 0);  // one of three
  ASSERT_TRUE(Send(0, 1, 0, w0_).ok());
  ASSERT_TRUE(Send(0, 2, 0, w0_).ok());
  ASSERT_TRUE(WaitVersion(1)) << JobStatus().dump();
  EXPECT_EQ(fetches_.load(), 0);
  ASSERT_NO_FATAL_FAILURE(ExpectFedAvgOfAll(*top_, 1, w0_));
}

TEST_F(FlClusterTest, AFoldThatFailedOnTheMemberIsNotCountedAndItsClientMaySendAgain) {
  ASSERT_TRUE(Send(1, 1, 0, w0_, 502).ok());  // the leaf died halfway through
  EXPECT_EQ(JobStatus()["updates_total"], 0);
  ASSERT_TRUE(Send(1, 1, 0, w0_).ok());  // sent again: admitted (not "already sent")
  ASSERT_TRUE(Send(0, 0, 0, w0_).ok());
  ASSERT_TRUE(Send(1, 2, 0, w0_).ok());
  ASSERT_TRUE(WaitVersion(1)) << JobStatus().dump();
  // b's partial was rebuilt from its acknowledged updates (the failed fold left half of one).
  ASSERT_NO_FATAL_FAILURE(ExpectFedAvgOfAll(*top_, 1, w0_));
}

TEST_F(FlClusterTest, AMemberThatNoLongerHasARoundsUpdatesHasThemAskedForAgain) {
  ASSERT_TRUE(Send(1, 1, 0, w0_).ok());
  ASSERT_TRUE(Send(1, 2, 0, w0_).ok());
  // b restarts (its state for the job is gone) while its lease holds.
  member_->StopFolding("rb");
  ASSERT_TRUE(member_->FoldFor(*top_->Spec("rb"), "a").ok());
  ASSERT_TRUE(Send(0, 0, 0, w0_).ok());  // the round is due: the top asks b for its sum
  for (int i = 0; i < 250 && JobStatus()["folded_elsewhere"]["b"]["lost_updates"] != 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(JobStatus()["folded_elsewhere"]["b"]["lost_updates"], 2) << JobStatus().dump();
  EXPECT_EQ(JobStatus()["version"], 0);
  for (int k : {1, 2}) {
    auto t = top_->Task("rb", clients_[k].client_id, clients_[k].token);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->kind, TaskResult::Kind::kTrain) << k;
  }
  ASSERT_TRUE(Send(1, 1, 0, w0_).ok());
  ASSERT_TRUE(Send(1, 2, 0, w0_).ok());
  ASSERT_TRUE(WaitVersion(1)) << JobStatus().dump();
  ASSERT_NO_FATAL_FAILURE(ExpectFedAvgOfAll(*top_, 1, w0_));
}

// The hang of issue 14: b's admission of an update times out after the top admitted it. b
// never folds or reports it, its client (told 502) sends it again and is told it already sent
// one for the round, and the round, closed with that admission in flight, never committed.
// The top asks b about its admissions still unanswered in a closed round; b holds none under
// that key, so it no longer counts and its client sends it again.
TEST_F(FlClusterTest, AnAdmissionWhoseAnswerNeverReachedTheMemberIsDroppedAndTheRoundCommits) {
  link_->lose_answer = true;
  shoal::Status lost = Send(1, 1, 0, w0_);
  EXPECT_EQ(lost.code(), StatusCode::kUnavailable) << lost.ToString();
  // The top holds it: the client's second try is refused as a duplicate (409).
  shoal::Status again = Send(1, 1, 0, w0_);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again.ToString();
  EXPECT_EQ(again.message(),
            "client '" + clients_[1].client_id + "' already sent an update for this round");
  ASSERT_TRUE(Send(0, 0, 0, w0_).ok());
  ASSERT_TRUE(Send(1, 2, 0, w0_).ok());  // three admitted: the round is closed
  // The lost admission no longer counts: the round is open again, client 1 is told to train.
  TaskResult t;
  for (int i = 0; i < 500; ++i) {
    auto r = top_->Task("rb", clients_[1].client_id, clients_[1].token);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    t = *r;
    if (t.kind == TaskResult::Kind::kTrain) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(t.kind, TaskResult::Kind::kTrain) << JobStatus().dump();
  EXPECT_GE(probes_.load(), 1);
  EXPECT_EQ(JobStatus()["version"], 0);
  ASSERT_TRUE(Send(1, 1, 0, w0_).ok());
  ASSERT_TRUE(WaitVersion(1)) << JobStatus().dump();
  const Json st = JobStatus();
  EXPECT_EQ(st["versions"].back()["updates"], 3) << st.dump();
  EXPECT_EQ(st["folded_elsewhere"]["b"]["updates"], 2) << st.dump();
  ASSERT_NO_FATAL_FAILURE(ExpectFedAvgOfAll(*top_, 1, w0_));
}

TEST_F(FlClusterTest, ANodeTakesALostTopsJobOverFromTheSharedCheckpointStore) {
  ASSERT_TRUE(Send(0, 0, 0, w0_).ok());
  ASSERT_TRUE(Send(1, 1, 0, w0_).ok());
  ASSERT_TRUE(Send(1, 2, 0, w0_).ok());
  ASSERT_TRUE(WaitVersion(1)) << JobStatus().dump();
  ASSERT_TRUE(top_->Join("rb", "late", "").ok());  // version 1's checkpoint is written
  const std::string v1 = *top_->Model("rb", 1)->bytes;
  const std::vector<float> w1 = Values(v1);
  // Round 2 has one update, acknowledged by b, when the top's node is lost.
  ASSERT_TRUE(Send(1, 1, 1, w1).ok());
  EXPECT_TRUE(std::filesystem::exists(dirs_[0] + "/shared/rb/state.json"));
  top_.reset();
  // A node whose checkpoint_dir is the same store does not restore another node's job.
  {
    NodeConfig c = configs_[0];
    c.node_name = "c";
    const shoal::testing::TempDir dir("shoal-flcluster-test");
    c.state_dir = dir.path();
    FlCoordinator other(c);
    ASSERT_TRUE(other.Restore().ok());
    EXPECT_TRUE(other.ListJobs().empty());
  }
  ASSERT_TRUE(member_->TakeOver("rb").ok());
  EXPECT_FALSE(member_->FoldsForOtherNode("rb"));
  EXPECT_EQ(member_->TakeOver("rb").code(), StatusCode::kAlreadyExists);
  auto st = Json::parse(*member_->JobStatusJson("rb"));
  EXPECT_EQ(st["version"], 1) << st.dump();
  EXPECT_EQ(st["clients"]["joined"], 4);  // the clients (and their tokens) came along
  auto m = member_->Model("rb", 1);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(*m->bytes == v1);
  auto state = Json::parse(std::ifstream(dirs_[0] + "/shared/rb/state.json"), nullptr, false);
  EXPECT_EQ(state.value("top", ""), "b");
  // The update b had acknowledged for the lost top is not in any checkpoint: its client trains
  // again, and round 2 commits at the new top from all three.
  auto t = member_->Task("rb", clients_[1].client_id, clients_[1].token);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->kind, TaskResult::Kind::kTrain);
  ASSERT_TRUE(Send(1, 0, 1, w1).ok());
  ASSERT_TRUE(Send(1, 1, 1, w1).ok());
  ASSERT_TRUE(Send(1, 2, 1, w1).ok());
  for (int i = 0; i < 250; ++i) {
    if (Json::parse(*member_->JobStatusJson("rb")).value("version", 0) >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectFedAvgOfAll(*member_, 2, w1));
}

// The coordinator's and the member's locks taken from three threads at once, as shoald's do:
// a re-deploy of the running job at its top (DeployJob), updates entering node b admitted by the
// top on their headers (b's Exchange, then the top's AdmitRemote) and b's cluster watch listing
// the jobs it folds (Tops). Each pair of paths once took two locks in opposite orders and hung
// (the top's jobs lock and a job's lock; b's jobs lock and its job's lock): bounded loops, and a
// watchdog that fails the test where a deadlock would hang it.
TEST_F(FlClusterTest, AReDeployAtTheTopWhileBAdmitsUpdatesAndListsItsJobsDoesNotDeadlock) {
  // The admitter and the lister go on while the deployer runs (at least kAtLeast times, at most
  // kAdmitsAtMost and kListsAtMost: each admission stays in flight, held by both nodes).
  constexpr int kDeploys = 1000, kAtLeast = 200, kAdmitsAtMost = 20000, kListsAtMost = 200000;
  auto spec = top_->Spec("rb");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  std::vector<std::string> heads;  // prefix + UpdateHeader of each client's update
  for (int k = 0; k < 3; ++k) {
    const std::string body = testing::UpdateBody(mspec_, X(k, w0_), "rb", clients_[k].client_id,
                                                 clients_[k].token, 0, 100);
    uint32_t hlen;
    std::memcpy(&hlen, body.data() + 4, 4);
    heads.push_back(body.substr(0, 8 + hlen));
  }
  std::atomic<bool> deploying{true};
  std::atomic<int> deployed{0}, admitted{0}, listed{0};
  std::vector<uint64_t> tickets;  // the admitter's
  auto deployer = std::async(std::launch::async, [&] {
    for (int i = 0; i < kDeploys; ++i) {
      if (Status st = top_->DeployJob(*spec); !st.ok()) {
        ADD_FAILURE() << st.ToString();
        break;
      }
      ++deployed;
    }
    deploying = false;
  });
  auto admitter = std::async(std::launch::async, [&] {
    for (int i = 0; i < kAdmitsAtMost && (deploying || i < kAtLeast); ++i) {
      const std::string& head = heads[i % 3];
      auto a =
          member_->AdmitForTop("rb", *pools_[1], std::as_bytes(std::span(head)), 0, "the-bearer");
      if (!a.ok()) {
        ADD_FAILURE() << "admission " << i << ": " << a.status().ToString();
        return;
      }
      tickets.push_back(a->ticket);
      ++admitted;
    }
  });
  auto lister = std::async(std::launch::async, [&] {
    for (int i = 0; i < kListsAtMost && (deploying || i < kAtLeast); ++i) {
      if (member_->members().Tops() != std::map<std::string, std::string>{{"rb", "a"}}) {
        ADD_FAILURE() << "Tops() lost the job";
        return;
      }
      ++listed;
    }
  });
  for (auto* f : {&deployer, &admitter, &lister}) {
    if (f->wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
      // Deadlocked threads cannot be joined (the futures' destructors would wait for them).
      std::fprintf(stderr, "deadlock: %d of %d re-deploys, %d admissions, %d lists\n",
                   deployed.load(), kDeploys, admitted.load(), listed.load());
      std::_Exit(1);
    }
  }
  EXPECT_EQ(deployed.load(), kDeploys);
  EXPECT_GE(admitted.load(), kAtLeast);
  EXPECT_GE(listed.load(), kAtLeast);
  EXPECT_EQ(std::set<uint64_t>(tickets.begin(), tickets.end()).size(), tickets.size());
  EXPECT_EQ(tickets.size(), static_cast<size_t>(admitted.load()));
  auto after = top_->Spec("rb");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->generation, spec->generation + kDeploys);
}

}  // namespace
}  // namespace shoal
