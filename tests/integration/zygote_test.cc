// Instances forked from their function's zygote, end to end on a real shoald as root: the
// forked child is an instance in its tenant's sandbox (uid, capabilities, seccomp, its own
// cgroup) and a child of shoald; a zygote killed in the middle of a fork is restarted and the
// start goes on by a full spawn; a handler that fails to load in the zygote is answered with
// 503 and the reason, leaving no buffer behind; two tenants never share a zygote; /metrics
// counts starts by path; instance_start: spawn keeps the old path.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "tenant_shoald_test.h"
#include "tests/support/sandbox_test_util.h"

namespace shoal::testing {
namespace {

namespace fs = std::filesystem;

class ZygoteTest : public TenantShoaldTest {
 protected:
  void SetUp() override {
    MakeHandlerDir("shoal-zygote",
                   "shoald is not root: its zygotes and instances cannot run as a tenant");
  }
  void StartShoald(const std::string& extra = "") {
    ASSERT_TRUE(shoald_.Start(TenantOptions("control_interval_ms: 20\n" + extra))) << shoald_.Log();
  }
  // The pids of `function`'s zygotes, in the order shoald started them (from its log).
  std::vector<int> ZygotePids(const std::string& function) {
    std::vector<int> pids;
    const std::string log = shoald_.Log();
    const std::regex re("function " + function + ": zygote started \\(pid ([0-9]+)");
    for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
         ++it) {
      pids.push_back(std::stoi((*it)[1]));
    }
    return pids;
  }
  bool WaitLog(const std::string& needle, int timeout_ms = 5000) {
    for (int i = 0; i < timeout_ms / 10; ++i) {
      if (shoald_.Log().find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // The pids whose parent is `pid` (from /proc).
  static std::vector<int> ChildrenOf(int pid) {
    std::vector<int> out;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      if (StatusField(ReadAll("/proc/" + name + "/status"), "PPid") == std::to_string(pid)) {
        out.push_back(std::stoi(name));
      }
    }
    return out;
  }
  nlohmann::json Instances(const std::string& function) {
    auto j = nlohmann::json::parse(shoald_.Api("GET", "/v1/functions/" + function).body);
    return j["status"].value("instances", nlohmann::json::array());
  }
};

TEST_F(ZygoteTest, ForkedInstanceRunsAsItsTenantInItsOwnSandbox) {
  StartShoald();
  EXPECT_NE(shoald_.Log().find("instances start forked from their function's zygote"),
            std::string::npos);
  ASSERT_EQ(DeployHttp(Manifest("probe", "team-b", probe_,
                                "  resources: {cpu: 250m, memory: 96Mi}\n"
                                "  scale: {min: 2, max: 2}\n"))
                .status,
            201);
  ASSERT_TRUE(shoald_.WaitReady("probe", 2));
  auto r = Invoke("probe", "status");
  ASSERT_EQ(r.status, 200) << r.body;
  auto inst = Instances("probe");
  ASSERT_EQ(inst.size(), 2u);
  EXPECT_EQ(inst[0].value("start_path", ""), "zygote") << inst.dump();
  EXPECT_EQ(inst[1].value("start_path", ""), "zygote") << inst.dump();
  // The instance that answered (its pid is in the status it read).
  const int pid = std::stoi(StatusField(r.body, "Pid"));
  EXPECT_TRUE(pid == inst[0].value("pid", 0) || pid == inst[1].value("pid", 0)) << pid;
  EXPECT_NE(inst[0].value("pid", 0), inst[1].value("pid", 0));
  EXPECT_NE(inst[0].value("id", 0), inst[1].value("id", 0));
  const auto zygotes = ZygotePids("probe");
  ASSERT_EQ(zygotes.size(), 1u) << shoald_.Log();
  for (int p : {pid, zygotes[0]}) {
    const std::string st = ReadAll("/proc/" + std::to_string(p) + "/status");
    EXPECT_EQ(StatusField(st, "Uid"), "201234 201234 201234 201234") << p;
    EXPECT_EQ(StatusField(st, "Gid"), "201235 201235 201235 201235") << p;
    EXPECT_EQ(StatusField(st, "Groups"), "") << p;
    for (const char* k : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
      EXPECT_EQ(StatusField(st, k), "0000000000000000") << k << " of " << p;
    }
    EXPECT_EQ(StatusField(st, "NoNewPrivs"), "1") << p;
    EXPECT_EQ(StatusField(st, "Seccomp"), "2") << p;
  }
  // The zygote is shoald's child; the instance the zygote's (which reports its exit).
  EXPECT_EQ(StatusField(ReadAll("/proc/" + std::to_string(zygotes[0]) + "/status"), "PPid"),
            std::to_string(shoald_.pid()));
  EXPECT_EQ(StatusField(ReadAll("/proc/" + std::to_string(pid) + "/status"), "PPid"),
            std::to_string(zygotes[0]));
  // From inside: the handler reads its own /proc/self/status.
  EXPECT_EQ(StatusField(r.body, "Uid"), "201234 201234 201234 201234");
  EXPECT_EQ(StatusField(r.body, "Seccomp"), "2");
  // The child was moved out of the zygote's cgroup into its own, with the manifest's limits.
  const std::string cg = ReadAll("/proc/" + std::to_string(pid) + "/cgroup");
  const std::string zcg = ReadAll("/proc/" + std::to_string(zygotes[0]) + "/cgroup");
  if (cg.find("/shoal/" + shoald_.node() + "/probe-") != std::string::npos) {
    EXPECT_EQ(cg.find("zygote"), std::string::npos) << cg;
    EXPECT_NE(zcg.find("/shoal/" + shoald_.node() + "/probe-g"), std::string::npos) << zcg;
    std::smatch m;
    const std::string cpu_re = ":cpu,cpuacct:(/[^\n]*)|:cpu:(/[^\n]*)";
    if (std::regex_search(cg, m, std::regex(cpu_re))) {
      const std::string rel = m[1].matched ? m[1].str() : m[2].str();
      for (const std::string root : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
        if (fs::exists(root + rel + "/cpu.cfs_quota_us")) {
          EXPECT_EQ(ReadAll(root + rel + "/cpu.cfs_quota_us"), "25000\n");
        }
      }
    }
  } else {
    EXPECT_NE(shoald_.Log().find("instances run without cgroups"), std::string::npos) << cg;
  }
  EXPECT_EQ(shoald_.Metric("shoal_instance_starts_total", "function=\"probe\",path=\"zygote\""), 2);
  EXPECT_EQ(shoald_.Metric("shoal_instance_starts_total", "path=\"spawn\""), 0);
  EXPECT_GT(shoald_.Metric("shoal_instance_start_seconds_count", "path=\"zygote\""), 0);
  // describe shows the path.
  auto d = shoald_.Cli({"describe", "probe"});
  EXPECT_NE(d.out.find("START"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("zygote"), std::string::npos) << d.out;
}

TEST_F(ZygoteTest, ZygoteKilledMidForkIsRestartedAndTheStartSpawned) {
  StartShoald("zygote_timeout_ms: 5000\n");
  ASSERT_EQ(DeployHttp(
                Manifest("mid", "team-a", probe_, "  keepAlive: 50ms\n  scale: {min: 0, max: 1}\n"))
                .status,
            201);
  ASSERT_TRUE(WaitLog("function mid: zygote (pid")) << shoald_.Log();
  const auto first = ZygotePids("mid");
  ASSERT_EQ(first.size(), 1u);
  // The zygote keeps one child forked ahead (the spare): wait for it, stop the zygote, and
  // kill the spare, so that the next start must fork, from a zygote that never answers and is
  // killed while shoald waits.
  std::vector<int> spare;
  for (int i = 0; i < 500 && spare.empty(); ++i) {
    spare = ChildrenOf(first[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(spare.size(), 1u);
  ASSERT_EQ(kill(first[0], SIGSTOP), 0);
  ASSERT_EQ(kill(spare[0], SIGKILL), 0);
  for (int i = 0;
       i < 200 && StatusField(ReadAll("/proc/" + std::to_string(spare[0]) + "/status"), "State")
                          .rfind("Z", 0) != 0;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto r = std::async(std::launch::async, [&] { return Invoke("mid", "status"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(kill(first[0], SIGKILL), 0);
  auto res = r.get();
  EXPECT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(StatusField(res.body, "Uid"), "202000 202000 202000 202000");
  auto inst = Instances("mid");
  ASSERT_EQ(inst.size(), 1u);
  EXPECT_EQ(inst[0].value("start_path", ""), "spawn");
  const std::string died =
      "zygote (pid " + std::to_string(first[0]) + ") killed by signal 9 (Killed) during a fork";
  EXPECT_EQ(inst[0].value("start_note", ""), died);
  EXPECT_TRUE(WaitLog("function mid: " + died + "; restarting it")) << shoald_.Log();
  // A new zygote, and the next cold start is forked from it.
  ASSERT_TRUE(WaitLog("function mid: zygote (pid", 5000));
  for (int i = 0; i < 200 && ZygotePids("mid").size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto now = ZygotePids("mid");
  ASSERT_EQ(now.size(), 2u) << shoald_.Log();
  EXPECT_NE(now[1], first[0]);
  ASSERT_TRUE(shoald_.WaitReady("mid", 0, 10000));
  for (int i = 0; i < 1000 && !Instances("mid").empty(); ++i) {  // the spawned one has exited
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto again = Invoke("mid", "status");
  EXPECT_EQ(again.status, 200);
  inst = Instances("mid");
  ASSERT_EQ(inst.size(), 1u);
  EXPECT_EQ(inst[0].value("start_path", ""), "zygote");
  EXPECT_EQ(shoald_.Metric("shoal_instance_starts_total", "function=\"mid\",path=\"spawn\""), 1);
  EXPECT_EQ(shoald_.Metric("shoal_instance_starts_total", "function=\"mid\",path=\"zygote\""), 1);
  // Nothing was left in the pool.
  ASSERT_TRUE(shoald_.WaitReady("mid", 0, 10000));
  EXPECT_EQ(shoald_.Metric("shoal_pool_bytes", "state=\"used\",tenant=\"team-a\""), 0);
}

TEST_F(ZygoteTest, InstancesOutliveTheirZygoteAndTheirExitsAreStillSeen) {
  StartShoald();
  ASSERT_EQ(DeployHttp(Manifest("live", "team-a", probe_, "  scale: {min: 1, max: 1}\n")).status,
            201);
  ASSERT_TRUE(shoald_.WaitReady("live", 1));
  const int first = Instances("live")[0].value("pid", 0);
  // An instance's death is reported by its zygote, with the signal.
  ASSERT_EQ(kill(first, SIGKILL), 0);
  EXPECT_TRUE(WaitLog("function live: instance ")) << shoald_.Log();
  EXPECT_TRUE(WaitLog("(pid " + std::to_string(first) + ") killed by signal 9 with 0 request(s)"))
      << shoald_.Log();
  for (int i = 0; i < 500; ++i) {
    auto inst = Instances("live");
    if (inst.size() == 1 && inst[0].value("pid", 0) != first &&
        inst[0].value("state", "") == "ready") {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto inst = Instances("live");
  ASSERT_EQ(inst.size(), 1u);
  const int second = inst[0].value("pid", 0);
  ASSERT_NE(second, first);
  EXPECT_EQ(inst[0].value("start_path", ""), "zygote");
  // The zygote dies: its instance keeps serving, now a child of shoald.
  const auto zygotes = ZygotePids("live");
  ASSERT_EQ(zygotes.size(), 1u) << shoald_.Log();
  // Once its next spare is forked (the instance and the spare are its children), so that the
  // kill does not land in the middle of that fork (another test's case).
  for (int i = 0; i < 500 && ChildrenOf(zygotes[0]).size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(kill(zygotes[0], SIGKILL), 0);
  EXPECT_TRUE(WaitLog("function live: zygote (pid " + std::to_string(zygotes[0]) +
                      ") killed by signal 9 (Killed)"))
      << shoald_.Log();
  EXPECT_TRUE(WaitLog("; restarting it")) << shoald_.Log();
  auto r = Invoke("live", "status");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(StatusField(r.body, "Pid"), std::to_string(second));
  EXPECT_EQ(StatusField(ReadAll("/proc/" + std::to_string(second) + "/status"), "PPid"),
            std::to_string(shoald_.pid()));
  // ... and its death is still seen (shoald reaps it now), and it is replaced.
  ASSERT_EQ(kill(second, SIGKILL), 0);
  EXPECT_TRUE(WaitLog("(pid " + std::to_string(second) + ") killed by signal 9 with 0 request(s)"))
      << shoald_.Log();
  for (int i = 0; i < 500; ++i) {
    inst = Instances("live");
    if (inst.size() == 1 && inst[0].value("pid", 0) != second &&
        inst[0].value("state", "") == "ready") {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(inst.size(), 1u);
  EXPECT_NE(inst[0].value("pid", 0), second);
  EXPECT_EQ(inst[0].value("state", ""), "ready");
  EXPECT_EQ(Invoke("live", "status").status, 200);
}

TEST_F(ZygoteTest, HandlerThatFailsToLoadInTheZygoteIsAnswered503WithTheReason) {
  StartShoald();
  {
    std::ofstream bad(handlers_ + "/libbad.so");
    bad << "not an ELF file\n";
  }
  chmod((handlers_ + "/libbad.so").c_str(), 0644);
  ASSERT_EQ(DeployHttp(Manifest("bad", "team-a", handlers_ + "/libbad.so")).status, 201);
  ASSERT_TRUE(WaitLog("function bad: the handler failed to load in its zygote: ")) << shoald_.Log();
  const std::string body(64 << 10, 'x');  // a request body large enough to be in the pool
  auto r = Invoke("bad", body);
  EXPECT_EQ(r.status, 503) << r.body;
  const std::string err = Error(r);
  EXPECT_EQ(err.rfind("function 'bad' cannot start an instance: the handler failed to load in "
                      "its zygote: cannot load handler library:" +
                          handlers_ +
                          "/libbad.so:shoal_handle: NOT_FOUND: cannot load handler library: " +
                          handlers_ + "/libbad.so: file too short",
                      0),
            0u)
      << err;
  EXPECT_TRUE(shoald_.InstancePids("bad").empty());
  EXPECT_EQ(shoald_.Log().find("function bad: instance"), std::string::npos) << shoald_.Log();
  EXPECT_EQ(shoald_.Metric("shoal_pool_bytes", "state=\"used\",tenant=\"team-a\""), 0);
  // describe says why.
  auto j = nlohmann::json::parse(shoald_.Api("GET", "/v1/functions/bad").body);
  EXPECT_NE(j["status"].value("unschedulable", "").find("failed to load in its zygote"),
            std::string::npos)
      << j.dump();
}

TEST_F(ZygoteTest, TwoTenantsNeverShareAZygote) {
  StartShoald();
  ASSERT_EQ(DeployHttp(Manifest("pa", "team-a", probe_)).status, 201);
  ASSERT_EQ(DeployHttp(Manifest("pb", "team-b", probe_)).status, 201);
  auto a = Invoke("pa", "status");
  auto b = Invoke("pb", "status");
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(StatusField(a.body, "Uid"), "202000 202000 202000 202000");
  EXPECT_EQ(StatusField(b.body, "Uid"), "201234 201234 201234 201234");
  const auto za = ZygotePids("pa"), zb = ZygotePids("pb");
  ASSERT_EQ(za.size(), 1u);
  ASSERT_EQ(zb.size(), 1u);
  EXPECT_NE(za[0], zb[0]);
  EXPECT_EQ(StatusField(ReadAll("/proc/" + std::to_string(za[0]) + "/status"), "Uid"),
            "202000 202000 202000 202000");
  EXPECT_EQ(StatusField(ReadAll("/proc/" + std::to_string(zb[0]) + "/status"), "Uid"),
            "201234 201234 201234 201234");
  EXPECT_EQ(Instances("pa")[0].value("start_path", ""), "zygote");
  EXPECT_EQ(Instances("pb")[0].value("start_path", ""), "zygote");
  // A deleted function's zygote goes with it.
  ASSERT_EQ(shoald_.Api("DELETE", "/v1/functions/pa").status, 200);
  for (int i = 0; i < 200 && kill(za[0], 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(kill(za[0], 0), 0);
  EXPECT_EQ(kill(zb[0], 0), 0);
}

TEST_F(ZygoteTest, SpawnPathStaysSelectable) {
  StartShoald("instance_start: spawn\n");
  EXPECT_NE(shoald_.Log().find("instances start as new processes (instance_start: spawn)"),
            std::string::npos);
  ASSERT_EQ(DeployHttp(Manifest("sp", "team-a", probe_)).status, 201);
  ASSERT_EQ(Invoke("sp", "status").status, 200);
  EXPECT_TRUE(ZygotePids("sp").empty());
  auto inst = Instances("sp");
  ASSERT_EQ(inst.size(), 1u);
  EXPECT_EQ(inst[0].value("start_path", ""), "spawn");
  EXPECT_EQ(inst[0].value("start_note", ""), "");
  EXPECT_EQ(shoald_.Metric("shoal_instance_starts_total", "function=\"sp\",path=\"spawn\""), 1);
  EXPECT_EQ(shoald_.Metric("shoal_instance_starts_total", "path=\"zygote\""), 0);
}

}  // namespace
}  // namespace shoal::testing
