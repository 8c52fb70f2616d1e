// The instance sandbox end to end, on a real shoald as root: which handler libraries a deploy
// and an instance start accept, what an instance is (uid, gid, capabilities, no_new_privs,
// seccomp, cgroup limits) read back from the kernel, what one tenant's instance can do to
// another's pool and processes, and what happens to an instance that makes a denied syscall.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tenant_shoald_test.h"
#include "tests/support/hugepages_for_test.h"
#include "tests/support/sandbox_test_util.h"

namespace shoal::testing {
namespace {

namespace fs = std::filesystem;

// The directory of `pid`'s cgroup that holds `file` (v1: the hierarchy of `controller`;
// v2: the unified one), from /proc/PID/cgroup.
std::string CgroupDir(int pid, const std::string& controller, const std::string& file) {
  std::istringstream in(ReadAll("/proc/" + std::to_string(pid) + "/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    const std::string ctrls = "," + line.substr(a + 1, b - a - 1) + ",";
    const std::string path = line.substr(b + 1);
    std::vector<std::string> candidates;
    if (ctrls.find("," + controller + ",") != std::string::npos) {
      candidates.push_back("/sys/fs/cgroup/" + controller + path);
    } else if (ctrls == ",,") {
      candidates = {"/sys/fs/cgroup/unified" + path, "/sys/fs/cgroup" + path};
    }
    for (const auto& d : candidates) {
      if (fs::exists(d + "/" + file)) return d;
    }
  }
  return "";
}

class SandboxTest : public TenantShoaldTest {
 protected:
  void SetUp() override {
    MakeHandlerDir("shoal-handlers",
                   "shoald is not root: it cannot drop instances to a tenant's uid (it runs them "
                   "as its own uid and says so at start)");
    if (IsSkipped() || HasFatalFailure()) return;
    if (auto why = ShoaldShortOfHugepages(64ull << 20, 3); !why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(shoald_.Start(TenantOptions())) << shoald_.Log();
  }
};

TEST_F(SandboxTest, DeployRefusesLibrariesOutsideOrUnsafe) {
  // Outside every handler directory (a real library of the node).
  auto out = DeployHttp(Manifest("outside", "team-a", "/usr/lib/x86_64-linux-gnu/libc.so.6"));
  EXPECT_EQ(out.status, 400) << out.body;
  EXPECT_EQ(Error(out),
            "spec.handler.library: /usr/lib/x86_64-linux-gnu/libc.so.6 is outside the handler "
            "directories (allowed: " +
                handlers_ + ") (line 6)");
  // In an allowed directory but writable by anyone.
  CopyFile(probe_, handlers_ + "/ww.so", 0666);
  chmod((handlers_ + "/ww.so").c_str(), 0666);
  auto ww = DeployHttp(Manifest("ww", "team-a", handlers_ + "/ww.so"));
  EXPECT_EQ(ww.status, 400) << ww.body;
  EXPECT_EQ(Error(ww), "spec.handler.library: " + handlers_ +
                           "/ww.so is writable by group or others (mode 0666) (line 6)");
  // A symlink in an allowed directory to a library elsewhere.
  ASSERT_EQ(symlink("/usr/lib/x86_64-linux-gnu/libc.so.6", (handlers_ + "/link.so").c_str()), 0);
  auto link = DeployHttp(Manifest("link", "team-a", handlers_ + "/link.so"));
  EXPECT_EQ(link.status, 400) << link.body;
  EXPECT_EQ(Error(link), "spec.handler.library: " + handlers_ +
                             "/link.so is a symbolic link (not followed below a handler "
                             "directory) (line 6)");
  // Environment that loads code.
  auto env = DeployHttp(
      Manifest("env", "team-a", probe_, "    env: {LD_PRELOAD: " + handlers_ + "/libprobe.so}\n"));
  EXPECT_EQ(env.status, 400) << env.body;
  EXPECT_EQ(Error(env),
            "spec.handler.env.LD_PRELOAD: not allowed: the dynamic loader reads LD_* variables "
            "(preloads code) (line 7)");
  // None of them exists, so nothing can start.
  for (const char* fn : {"outside", "ww", "link", "env"}) {
    EXPECT_EQ(shoald_.Api("GET", "/v1/functions/" + std::string(fn)).status, 404) << fn;
  }
  EXPECT_EQ(shoald_.Log().find("started instance"), std::string::npos);
}

TEST_F(SandboxTest, LibrarySwappedAfterDeployNeverStarts) {
  fs::create_directory(handlers_ + "/team");
  chmod((handlers_ + "/team").c_str(), 0755);
  CopyFile(probe_, handlers_ + "/team/lib.so", 0644);
  auto d = DeployHttp(Manifest("swapped", "team-a", handlers_ + "/team/lib.so"));
  ASSERT_EQ(d.status, 201) << d.body;
  // After the deploy: the directory becomes a symlink to a look-alike elsewhere.
  const std::string elsewhere = handlers_ + "-evil";
  fs::create_directory(elsewhere);
  CopyFile(probe_, elsewhere + "/lib.so", 0644);
  fs::rename(handlers_ + "/team", handlers_ + "/team.old");
  ASSERT_EQ(symlink(elsewhere.c_str(), (handlers_ + "/team").c_str()), 0);

  auto r = Invoke("swapped", "status");
  (void)!system(("rm -rf '" + elsewhere + "'").c_str());
  EXPECT_EQ(r.status, 503) << r.body;
  const std::string reason = "spec.handler.library: " + handlers_ +
                             "/team is a symbolic link (not followed below a handler directory)";
  EXPECT_EQ(Error(r), "function 'swapped' cannot start an instance: " + reason);
  EXPECT_TRUE(shoald_.InstancePids("swapped").empty());
  EXPECT_NE(shoald_.Log().find("function swapped: cannot start an instance: PERMISSION_DENIED: " +
                               reason),
            std::string::npos)
      << shoald_.Log();
  auto j = nlohmann::json::parse(shoald_.Api("GET", "/v1/functions/swapped").body);
  EXPECT_EQ(j["status"].value("unschedulable", ""), reason);
  EXPECT_EQ(shoald_.Log().find("started instance"), std::string::npos);
}

TEST_F(SandboxTest, InstanceRunsAsItsTenantWithTheManifestsLimits) {
  auto d =
      DeployHttp(Manifest("probe", "team-b", probe_, "  resources: {cpu: 250m, memory: 96Mi}\n"));
  ASSERT_EQ(d.status, 201) << d.body;
  auto r = Invoke("probe", "status");
  ASSERT_EQ(r.status, 200) << r.body;
  auto pids = shoald_.InstancePids("probe");
  ASSERT_EQ(pids.size(), 1u);
  const int pid = pids[0];
  // From outside, as the kernel has it.
  const std::string st = ReadAll("/proc/" + std::to_string(pid) + "/status");
  EXPECT_EQ(StatusField(st, "Uid"), "201234 201234 201234 201234");
  EXPECT_EQ(StatusField(st, "Gid"), "201235 201235 201235 201235");
  EXPECT_EQ(StatusField(st, "Groups"), "");
  for (const char* k : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_EQ(StatusField(st, k), "0000000000000000") << k;
  }
  EXPECT_EQ(StatusField(st, "NoNewPrivs"), "1");
  EXPECT_EQ(StatusField(st, "Seccomp"), "2");
  // ... and from inside (the handler reads its own /proc/self/status).
  EXPECT_EQ(StatusField(r.body, "Uid"), "201234 201234 201234 201234");
  EXPECT_EQ(StatusField(r.body, "Seccomp"), "2");

  // Its cgroup, read back through /proc/PID/cgroup.
  std::vector<std::string> dirs;
  if (std::string cpu = CgroupDir(pid, "cpu", "cpu.cfs_quota_us"); !cpu.empty()) {
    EXPECT_EQ(ReadAll(cpu + "/cpu.cfs_quota_us"), "25000\n");
    EXPECT_EQ(ReadAll(cpu + "/cpu.cfs_period_us"), "100000\n");
    EXPECT_NE(cpu.find("/shoal/" + shoald_.node() + "/probe-"), std::string::npos) << cpu;
    dirs.push_back(cpu);
  } else if (std::string v2 = CgroupDir(pid, "", "cpu.max"); !v2.empty()) {
    EXPECT_EQ(ReadAll(v2 + "/cpu.max"), "25000 100000\n");
    EXPECT_EQ(ReadAll(v2 + "/memory.max"), "100663296\n");
    dirs.push_back(v2);
  } else {
    EXPECT_NE(shoald_.Log().find("instances run without cgroups"), std::string::npos);
    GTEST_SKIP() << "no cgroup controller is writable here: " << shoald_.Log();
  }
  if (std::string mem = CgroupDir(pid, "memory", "memory.limit_in_bytes"); !mem.empty()) {
    EXPECT_EQ(ReadAll(mem + "/memory.limit_in_bytes"), "100663296\n");
    dirs.push_back(mem);
  }
  if (std::string p = CgroupDir(pid, "pids", "pids.max"); !p.empty()) {
    EXPECT_EQ(ReadAll(p + "/pids.max"), "4096\n");
    dirs.push_back(p);
  }
  // The tenant's pool is the tenant's.
  struct stat ps {};
  ASSERT_EQ(stat(("/dev/shm/shoal." + shoald_.node() + ".team-b").c_str(), &ps), 0);
  EXPECT_EQ(ps.st_uid, 201234u);
  EXPECT_EQ(ps.st_gid, 201235u);
  EXPECT_EQ(ps.st_mode & 07777, 0600u);

  // Gone with the instance.
  ASSERT_EQ(shoald_.Api("DELETE", "/v1/functions/probe").status, 200);
  for (int i = 0; i < 250 && kill(pid, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (const auto& dir : dirs) EXPECT_FALSE(fs::exists(dir)) << dir;
}

TEST_F(SandboxTest, TenantsCannotReachEachOther) {
  ASSERT_EQ(DeployHttp(Manifest("pa", "team-a", probe_)).status, 201);
  ASSERT_EQ(DeployHttp(Manifest("pb", "team-b", probe_)).status, 201);
  ASSERT_EQ(Invoke("pb", "status").status, 200);
  auto a = Invoke("pa", "status");
  ASSERT_EQ(a.status, 200);
  // team-a was given the first id of the range, recorded for the next start.
  EXPECT_EQ(StatusField(a.body, "Uid"), "202000 202000 202000 202000");
  EXPECT_NE(ReadAll(shoald_.state_dir() + "/state/tenants.yaml").find("team-a: {uid: 202000"),
            std::string::npos);
  const auto pa = shoald_.InstancePids("pa");
  const auto pb = shoald_.InstancePids("pb");
  ASSERT_EQ(pa.size(), 1u);
  ASSERT_EQ(pb.size(), 1u);
  const std::string b_pool = "shoal." + shoald_.node() + ".team-b";
  const std::string a_pool = "shoal." + shoald_.node() + ".team-a";
  // The real kernel's answers, from inside team-a's instance. The pools are files in /dev/shm
  // (boost) or in hugetlbfs (dpdk), each the tenant's own, mode 0600.
  const bool dpdk = TestPoolBackend() == "dpdk";
  const std::string pool_dir = dpdk ? HugetlbfsDir().value() : std::string("/dev/shm");
  EXPECT_EQ(Invoke("pa", "open " + pool_dir + "/" + b_pool).body, "EACCES");
  if (!dpdk) {
    EXPECT_EQ(Invoke("pa", "shm /" + b_pool).body, "EACCES");
  }
  EXPECT_EQ(Invoke("pa", "kill " + std::to_string(pb[0])).body, "EPERM");
  EXPECT_EQ(Invoke("pa", "kill " + std::to_string(shoald_.pid())).body, "EPERM");
  // Its own pool and itself it can.
  EXPECT_EQ(Invoke("pa", "open " + pool_dir + "/" + a_pool).body, "ok");
  if (!dpdk) {
    EXPECT_EQ(Invoke("pa", "shm /" + a_pool).body, "ok");
  }
  EXPECT_EQ(Invoke("pa", "kill " + std::to_string(pa[0])).body, "ok");
}

TEST_F(SandboxTest, DeniedSyscallKillsTheInstanceWhichIsRestarted) {
  ASSERT_EQ(DeployHttp(Manifest("bad", "team-a", probe_, "  scale: {min: 1}\n")).status, 201);
  ASSERT_TRUE(shoald_.WaitReady("bad", 1));
  const auto before = shoald_.InstancePids("bad");
  ASSERT_EQ(before.size(), 1u);
  auto r = Invoke("bad", "unshare");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_EQ(Error(r),
            "instance of function 'bad' crashed (killed by signal 31 (SIGSYS: a "
            "syscall the seccomp filter denies)) while running the request");
  ASSERT_TRUE(shoald_.WaitReady("bad", 1));
  const auto after = shoald_.InstancePids("bad");
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(after[0], before[0]);
  EXPECT_EQ(Invoke("bad", "status").status, 200);
  auto j = nlohmann::json::parse(shoald_.Api("GET", "/v1/functions/bad").body);
  EXPECT_EQ(j["status"]["instances"][0].value("restarts", 0), 1);
  // The syscall, from the kernel's audit record (where the kernel log has one).
  std::string log;
  for (int i = 0; i < 100; ++i) {
    log = shoald_.Log();
    if (log.find("was killed by the seccomp filter") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string prefix = "function bad: instance ";
  EXPECT_NE(log.find("(pid " + std::to_string(before[0]) + ") was killed by the seccomp filter"),
            std::string::npos)
      << log;
  if (log.find("no audit record in the kernel log") == std::string::npos) {
    EXPECT_NE(log.find("was killed by the seccomp filter for syscall unshare ("), std::string::npos)
        << log;
  }
}

TEST_F(SandboxTest, AFunctionMayAllowADeniedSyscall) {
  auto bad = DeployHttp(
      Manifest("ok", "team-a", probe_, "  security: {seccomp: {allow: [unshare, nosuch]}}\n"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Error(bad), "spec.security.seccomp.allow[1]: unknown syscall \"nosuch\" (line 7)");
  ASSERT_EQ(
      DeployHttp(Manifest("ok", "team-a", probe_, "  security: {seccomp: {allow: [unshare]}}\n"))
          .status,
      201);
  auto r = Invoke("ok", "unshare");
  EXPECT_EQ(r.status, 200) << r.body;  // the kernel's own answer, not a kill
  EXPECT_EQ(shoald_.Log().find("SIGSYS"), std::string::npos);
}

}  // namespace
}  // namespace shoal::testing
