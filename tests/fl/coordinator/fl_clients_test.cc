// A job's client table at scale (issue 28): a join appends one line to clients.log and rewrites
// nothing (state.json holds no client), the status lists a bounded page of the clients beside
// whole counts, and the joins and each client's figures survive a restart, at the version the
// checkpoint names.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "coordinator_fixture.h"
#include "shoal/fl/coordinator/fl_coordinator.h"
#include "shoal/fl/kernels/fold.h"

namespace shoal {
namespace {

using Json = nlohmann::json;

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

class FlClientsTest : public coordinator_test::CoordinatorFixture {
 protected:
  void SetUp() override {
    MakeDirAndPool("shoal-clients-test");
    if (HasFatalFailure()) return;
    fl_ = std::make_unique<FlCoordinator>(config_);
    DeployAndJoin(RbSpec(3), 3, "r");
  }
  std::string JobFile(const std::string& name) { return dir_ + "/jobs/rb/" + name; }
  Json StatusPage(uint64_t from, uint32_t limit) {
    StatusClientsPage page;
    page.from = from;
    page.limit = limit;
    return Json::parse(*fl_->JobStatusJson("rb", page), nullptr, false);
  }
  // Client k's update from version 0, admitted, folded by "leaf" 7 and acknowledged.
  void SendUpdate(int k) {
    std::vector<float> x = w0_;
    for (float& v : x) v += float(k + 1) / 16.0f;
    auto body = UpdateBody(k, x);
    ASSERT_TRUE(body.ok());
    auto b = WriteAsGateway(*body);
    ASSERT_TRUE(b.ok());
    auto adm = fl_->Admit("rb", *pool_, b->body, b->buffer);
    ASSERT_TRUE(adm.ok()) << adm.status().ToString();
    auto partial = fl_->PartialFor(adm->ticket, 7);
    ASSERT_TRUE(partial.ok()) << partial.status().ToString();
    aggregator::Fold(reinterpret_cast<float*>(pool_->Data(*partial).data()), x.data(),
                     aggregator::DType::kF32, x.size(), adm->coefficient);
    fl_->Completed(adm->ticket, 202, true);
    (void)pool_->Release(b->buffer, kShoaldSlot);
  }
  void Restart() {
    fl_.reset();  // its checkpoint writer writes what is queued
    fl_ = std::make_unique<FlCoordinator>(config_);
    ASSERT_TRUE(fl_->Restore().ok());
  }
};

// 2,000 joins: each appends one line to clients.log, of the same length but for its id's digits
// (the line for the 2,000th client is no longer than the 10th's), and state.json is not
// written again. The status counts every client and lists 100 by default, in join order; a page
// from any client number costs the same.
TEST_F(FlClientsTest, AJoinAppendsOneLineWhateverTheNumberOfClients) {
  const std::string state_before = ReadAll(JobFile("state.json"));
  ASSERT_FALSE(state_before.empty());
  EXPECT_FALSE(Json::parse(state_before).contains("clients")) << "no client in state.json";
  constexpr int kJoins = 2000;
  std::vector<uint64_t> per_join;  // bytes appended, less the id's length
  std::vector<JoinResult> joined;
  uint64_t size = std::filesystem::file_size(JobFile("clients.log"));
  for (int k = 0; k < kJoins; ++k) {
    char name[16];
    std::snprintf(name, sizeof name, "n%05d", k);
    auto j = fl_->Join("rb", name, "");
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    ASSERT_EQ(j->client_id, "c" + std::to_string(k + 3));
    const uint64_t now = std::filesystem::file_size(JobFile("clients.log"));
    per_join.push_back(now - size - j->client_id.size());
    size = now;
    joined.push_back(*j);
  }
  for (int k = 0; k < kJoins; ++k) ASSERT_EQ(per_join[k], per_join[0]) << "join " << k;
  // {"join":"c<k>","name":"n00000","token":"<32 hex digits>"} and its newline.
  EXPECT_EQ(per_join[0], 71u);
  EXPECT_EQ(ReadAll(JobFile("state.json")), state_before) << "state.json was rewritten";
  // The last line is the last join, whole.
  const std::string log = ReadAll(JobFile("clients.log"));
  const size_t last = log.rfind('\n', log.size() - 2);
  EXPECT_EQ(Json::parse(log.substr(last + 1)),
            (Json{{"join", "c2002"}, {"name", "n01999"}, {"token", joined.back().token}}));

  Json st = Status();
  EXPECT_EQ(st["clients"].value("joined", 0), kJoins + 3);
  EXPECT_EQ(st["clients"].value("sent_updates", -1), 0);
  ASSERT_EQ(st["clients"]["list"].size(), StatusClientsPage::kDefaultLimit);
  for (size_t k = 0; k < StatusClientsPage::kDefaultLimit; ++k) {
    EXPECT_EQ(st["clients"]["list"][k].value("id", ""), "c" + std::to_string(k));
  }
  EXPECT_EQ(st["clients"]["list"][3].value("name", ""), "n00000");
  EXPECT_EQ(st["clients"]["page"],
            (Json{{"from", 0}, {"limit", StatusClientsPage::kDefaultLimit}, {"next_from", 100}}));
  st = StatusPage(1995, 10);
  ASSERT_EQ(st["clients"]["list"].size(), 8u);  // c1995 .. c2002
  EXPECT_EQ(st["clients"]["list"][0].value("id", ""), "c1995");
  EXPECT_EQ(st["clients"]["list"][7].value("name", ""), "n01999");
  EXPECT_TRUE(st["clients"]["page"]["next_from"].is_null());
  st = StatusPage(5000, 10);
  EXPECT_TRUE(st["clients"]["list"].empty());
  EXPECT_EQ(st["clients"].value("joined", 0), kJoins + 3);
  // The clients' tokens are theirs: a task for the last one, not with another's token.
  EXPECT_TRUE(fl_->Task("rb", joined.back().client_id, joined.back().token).ok());
  EXPECT_EQ(fl_->Task("rb", joined.back().client_id, joined[0].token).status().code(),
            StatusCode::kPermissionDenied);
}

// After a commit, more clients join (in clients.log only). A restart knows every client with
// its token, each client's figures as of the checkpoint's version, and numbers the next join
// after the last one; a figures line tagged with a version whose checkpoint was never written
// (a crash between the commit and its checkpoint) is not applied.
TEST_F(FlClientsTest, JoinsAndFiguresSurviveARestartAtTheCheckpointsVersion) {
  for (int k = 0; k < 3; ++k) ASSERT_NO_FATAL_FAILURE(SendUpdate(k));
  ASSERT_TRUE(WaitVersion(1)) << Status().dump();
  Json st = Status();
  EXPECT_EQ(st["clients"].value("sent_updates", -1), 3);
  std::vector<JoinResult> late;
  for (int k = 0; k < 4; ++k) {
    auto j = fl_->Join("rb", "late" + std::to_string(k), "");
    ASSERT_TRUE(j.ok());
    late.push_back(*j);
  }
  ASSERT_NO_FATAL_FAILURE(Restart());
  // A line a crash could leave: figures for version 2, whose checkpoint never came.
  std::ofstream(JobFile("clients.log"), std::ios::app)
      << R"({"client":"c0","version":2,"updates":50,"samples":1,"last_base_version":1,)"
      << R"("last_staleness":0,"max_staleness":0,"suspect_updates":0,"clipped_updates":0})"
      << "\n";
  ASSERT_NO_FATAL_FAILURE(Restart());
  st = Status();
  EXPECT_EQ(st.value("version", 0), 1);
  EXPECT_EQ(st["clients"].value("joined", 0), 7);
  EXPECT_EQ(st["clients"].value("sent_updates", -1), 3);
  const Json& list = st["clients"]["list"];
  ASSERT_EQ(list.size(), 7u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(list[k].value("id", ""), "c" + std::to_string(k));
    EXPECT_EQ(list[k].value("name", ""), "r" + std::to_string(k));
    EXPECT_EQ(list[k].value("updates", -1), 1) << list[k].dump();
    EXPECT_EQ(list[k].value("base_version", -1), 0);
  }
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(list[3 + k].value("name", ""), "late" + std::to_string(k));
    EXPECT_EQ(list[3 + k].value("updates", -1), 0);
    auto t = fl_->Task("rb", late[k].client_id, late[k].token);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
  }
  auto next = fl_->Join("rb", "after", "");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->client_id, "c7");
  // The restore rewrote the file to the table: one join line per client, one figures line per
  // client with updates, tagged with the checkpoint's version (and the join since).
  const std::string log = ReadAll(JobFile("clients.log"));
  size_t joins = 0, figures = 0;
  for (size_t at = 0; at < log.size();) {
    const size_t nl = log.find('\n', at);
    ASSERT_NE(nl, std::string::npos);
    const Json l = Json::parse(log.substr(at, nl - at));
    if (l.contains("join")) {
      ++joins;
    } else {
      ++figures;
      EXPECT_EQ(l.value("version", 0), 1) << l.dump();
    }
    at = nl + 1;
  }
  EXPECT_EQ(joins, 8u);
  EXPECT_EQ(figures, 3u);
  // It holds the clients' tokens: the rewritten file is the owner's only (the rewrite once passed
  // the file's length where the mode goes).
  namespace fs = std::filesystem;
  EXPECT_EQ(fs::status(JobFile("clients.log")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

}  // namespace
}  // namespace shoal
