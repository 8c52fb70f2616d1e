// BehaviourProbes against the real kernel: a child process in a cgroup of its own opens a file,
// connects to a loopback port, burns CPU and execs a shell; the probes count each and send each
// distinct event once, and count nothing for processes outside watched cgroups. Skips (with the
// reason) only where BPF is absent (bpf_capability.h).
#include "shoal/dataplane/bpf/behaviour_probes.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/bpf_capability.h"
#include "tests/support/loopback.h"
#include "tests/support/test_cgroup.h"

namespace shoal {
namespace {

class BehaviourProbesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string absent = bpf_test::BpfCapabilityAbsent(); !absent.empty()) {
      GTEST_SKIP() << "BPF is not available here: " << absent;
    }
  }
  // Loads the probes with sys_enter used as `syscalls` says, for a test cgroup of its own (`name`
  // and this process's id), and reads the cgroup's id; the test watches it.
  void Load(const std::string& name, BehaviourProbes::Syscalls syscalls) {
    cg_.emplace(name + std::to_string(getpid()));
    ASSERT_EQ(cg_->error(), "");
    auto loaded = BehaviourProbes::Load(cg_->mode(), syscalls);
    ASSERT_TRUE(loaded.ok()) << "the behaviour probes failed to load with BPF present: "
                             << loaded.status().ToString();
    probes_ = std::move(*loaded);
    auto id = BehaviourProbes::CgroupIdOf(cg_->dir());
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    id_ = *id;
  }

  std::optional<bpf_test::TestCgroup> cg_;
  std::unique_ptr<BehaviourProbes> probes_;  // destroyed before the cgroup goes
  uint64_t id_ = 0;
};

// The child's part of the first two tests: joins the test cgroup, waits for the parent's go, opens
// /etc/hostname and connects to the loopback port (and sends "hello" when asked). Returns the
// exit code that names the step that failed, 0 when every step went through.
int OpenAndConnect(bpf_test::TestCgroup& cg, int go_fd, uint16_t port, bool send_hello) {
  if (!cg.Join()) return 10;
  char c;
  if (read(go_fd, &c, 1) != 1) return 11;
  int f = open("/etc/hostname", O_RDONLY);
  if (f >= 0) close(f);
  const int s = testing::ConnectLoopback(port);
  if (s < 0) return 12;
  if (send_hello && send(s, "hello", 5, 0) != 5) return 13;
  close(s);
  return 0;
}

// Forks the watched child of the first two tests: it runs OpenAndConnect, burns `burn_ms` of
// its own CPU time and execs /bin/sh. The go pipe has it in its cgroup before it starts. Waits for
// it, with its exit status in `*status` (0 when every step went through) and what the kernel
// accounted to it in `*ru`; returns its pid, or -1 when a pipe, the fork or the wait failed.
pid_t RunWatchedChild(bpf_test::TestCgroup& cg, uint16_t port, bool send_hello, int burn_ms,
                      int* status, struct rusage* ru) {
  int go[2];
  if (pipe(go) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(go[1]);
    if (const int rc = OpenAndConnect(cg, go[0], port, send_hello); rc != 0) _exit(rc);
    if (burn_ms > 0) {
      // Its own CPU time, not the wall clock: on a loaded machine a 300 ms wall-clock burn got
      // 43-83 ms of CPU.
      auto cpu_ns = [] {
        timespec ts{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return ts.tv_sec * 1000000000LL + ts.tv_nsec;
      };
      const long long until = cpu_ns() + burn_ms * 1000000LL;
      volatile uint64_t x = 0;
      while (cpu_ns() < until) x = x + 1;
    }
    execl("/bin/sh", "sh", "-c", "exit 0", nullptr);
    _exit(14);
  }
  close(go[0]);
  const bool went = write(go[1], "g", 1) == 1;
  close(go[1]);
  if (wait4(pid, status, 0, ru) != pid || !went) return -1;
  return pid;
}

// Counts an exec event (of /bin/sh) or a connect event (to 127.x.x.1:port), checking its fields;
// false for any other kind of event.
bool CountExecOrConnect(const BehaviourEvent& ev, uint16_t port, int* execs, int* connects) {
  if (ev.kind == SHOAL_BHV_EV_EXEC) {
    ++*execs;
    EXPECT_STREQ(ev.detail, "/bin/sh");
    return true;
  }
  if (ev.kind == SHOAL_BHV_EV_CONNECT) {
    ++*connects;
    EXPECT_EQ(ev.family, AF_INET);
    EXPECT_EQ(ev.port, port);
    EXPECT_EQ(ev.addr[0], 127);
    EXPECT_EQ(ev.addr[3], 1);
    return true;
  }
  return false;
}

TEST_F(BehaviourProbesTest, CountsAndReportsWhatAWatchedProcessDoes) {
  ASSERT_NO_FATAL_FAILURE(Load("shoal-bhv-test-", BehaviourProbes::Syscalls::kAlways));
  ASSERT_TRUE(probes_->Watch(id_).ok());
  EXPECT_EQ(probes_->WatchedEntries(), 1u);

  uint16_t port = 0;
  const int lfd = testing::ListenLoopback(4, &port);
  ASSERT_GE(lfd, 0);
  int status = 0;
  struct rusage ru {};
  const pid_t pid = RunWatchedChild(*cg_, port, /*send_hello=*/true, /*burn_ms=*/300, &status, &ru);
  ASSERT_GT(pid, 0);
  // What the kernel accounted to the child (at least the 300 ms it burnt).
  const uint64_t child_cpu_ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
                                (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // Our own (unwatched) activity meanwhile: another open and connect that must not count.
  int f = open("/etc/hostname", O_RDONLY);
  close(f);
  close(lfd);

  auto c = probes_->Read(id_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->execs, 1u);
  EXPECT_EQ(c->connects, 1u);
  EXPECT_GE(c->opens, 1u);
  EXPECT_GE(c->bytes_sent, 5u);
  // sched_stat_runtime against getrusage: the same CPU time, within the tick granularity.
  EXPECT_GE(child_cpu_ns, 280'000'000u);
  EXPECT_GE(c->cpu_ns, child_cpu_ns * 9 / 10);
  EXPECT_LE(c->cpu_ns, child_cpu_ns * 11 / 10 + 20'000'000u);
  EXPECT_GE(c->syscalls[SHOAL_BHV_CLASS_NET], 3u);      // socket, connect, sendto
  EXPECT_GE(c->syscalls[SHOAL_BHV_CLASS_PROCESS], 1u);  // execve
  EXPECT_EQ(c->events_lost, 0u);

  std::vector<BehaviourEvent> events;
  probes_->Drain([&](const BehaviourEvent& ev) { events.push_back(ev); });
  int execs = 0, connects = 0, hostname_opens = 0;
  for (const auto& ev : events) {
    EXPECT_EQ(ev.cgroup_id, id_);
    EXPECT_EQ(ev.pid, static_cast<uint32_t>(pid));
    if (CountExecOrConnect(ev, port, &execs, &connects)) continue;
    if (ev.kind == SHOAL_BHV_EV_OPEN && std::string(ev.detail) == "/etc/hostname") {
      ++hostname_opens;
    }
  }
  EXPECT_EQ(execs, 1);
  EXPECT_EQ(connects, 1);
  EXPECT_EQ(hostname_opens, 1);  // ours (unwatched) is not reported
  EXPECT_GT(probes_->SeenEntries(), 0u);

  probes_->Unwatch(id_);
  EXPECT_EQ(probes_->WatchedEntries(), 0u);
  EXPECT_FALSE(probes_->Read(id_).ok());
}

// Without the sys_enter hook (no syscall pays for the probes): execs and TCP connects come from
// their own tracepoints, with the same events; syscall classes and opens are not counted.
TEST_F(BehaviourProbesTest, WithoutTheSyscallHookExecAndTcpConnectAreStillSeen) {
  ASSERT_NO_FATAL_FAILURE(Load("shoal-bhv-test-nohook-", BehaviourProbes::Syscalls::kOff));
  ASSERT_TRUE(probes_->Watch(id_).ok());
  uint16_t port = 0;
  const int lfd = testing::ListenLoopback(4, &port);
  ASSERT_GE(lfd, 0);
  int status = 0;
  struct rusage ru {};
  ASSERT_GT(RunWatchedChild(*cg_, port, /*send_hello=*/false, /*burn_ms=*/0, &status, &ru), 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  close(lfd);
  auto c = probes_->Read(id_);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->execs, 1u);
  EXPECT_EQ(c->connects, 1u);
  EXPECT_EQ(c->opens, 0u);
  for (int i = 0; i < SHOAL_BHV_CLASSES; ++i) EXPECT_EQ(c->syscalls[i], 0u) << i;
  int execs = 0, connects = 0, opens = 0;
  probes_->Drain([&](const BehaviourEvent& ev) {
    if (!CountExecOrConnect(ev, port, &execs, &connects)) ++opens;
  });
  EXPECT_EQ(execs, 1);
  EXPECT_EQ(connects, 1);
  EXPECT_EQ(opens, 0);
}

// Sampled (detect_syscalls: sampled): sys_enter counts only between AttachSyscalls and
// DetachSyscalls, and then only syscall classes and open attempts (opens are not counted: the
// monitor counts fanotify's); processes a watched instance forks are known by pid, also after
// they exit, until the instance is unwatched.
TEST_F(BehaviourProbesTest, SampledSyscallsCountOnlyWhileAttachedAndForkedPidsAreKnown) {
  ASSERT_NO_FATAL_FAILURE(Load("shoal-bhv-test-sampled-", BehaviourProbes::Syscalls::kSampled));
  EXPECT_FALSE(probes_->syscalls_attached());
  int go[2], back[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(back), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(go[1]);
    close(back[0]);
    if (!cg_->Join()) _exit(10);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(11);
    // Not sampled: 5000 getppid and an open.
    for (int i = 0; i < 5000; ++i) syscall(SYS_getppid);
    int f = open("/etc/hostname", O_RDONLY);
    if (f >= 0) close(f);
    if (write(back[1], "1", 1) != 1) _exit(12);
    if (read(go[0], &c, 1) != 1) _exit(13);
    // Sampled: 1000 getppid, an open, and a child that opens nothing and exits.
    for (int i = 0; i < 1000; ++i) syscall(SYS_getppid);
    // The path from a buffer the child wrote, as a program builds one: the probe reads it at
    // sys_enter, where a page not yet in the child's page tables cannot be faulted in (after a
    // fork a read-only file-backed page, a string literal's, is mapped on first touch; the
    // kernel's own copy of the path would fault it in only after the probe ran).
    char hosts_path[] = "/etc/hosts";
    f = open(hosts_path, O_RDONLY);
    if (f >= 0) close(f);
    const pid_t grandchild = fork();
    if (grandchild == 0) _exit(0);
    waitpid(grandchild, nullptr, 0);
    const int32_t g = grandchild;
    if (write(back[1], &g, sizeof g) != sizeof g) _exit(14);
    _exit(0);
  }
  close(go[0]);
  close(back[1]);
  ASSERT_TRUE(probes_->Watch(id_, pid).ok());
  EXPECT_EQ(probes_->CgroupOfPid(pid), id_);
  EXPECT_EQ(probes_->CgroupOfPid(getpid()), 0u);
  ASSERT_EQ(write(go[1], "g", 1), 1);
  char c;
  ASSERT_EQ(read(back[0], &c, 1), 1);
  ASSERT_TRUE(probes_->AttachSyscalls().ok());
  EXPECT_TRUE(probes_->syscalls_attached());
  ASSERT_TRUE(probes_->AttachSyscalls().ok());  // idempotent
  ASSERT_EQ(write(go[1], "g", 1), 1);
  int32_t grandchild = 0;
  ASSERT_EQ(read(back[0], &grandchild, sizeof grandchild), static_cast<ssize_t>(sizeof grandchild));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  probes_->DetachSyscalls();
  EXPECT_FALSE(probes_->syscalls_attached());
  for (int i = 0; i < 3000; ++i) syscall(SYS_getppid);  // detached: nobody counts these
  close(go[1]);
  close(back[0]);

  auto counted = probes_->Read(id_);
  ASSERT_TRUE(counted.ok());
  // The sampled 1000 and a few more of the child's; not the 5000 before the slice.
  EXPECT_GE(counted->syscalls[SHOAL_BHV_CLASS_OTHER], 1000u);
  EXPECT_LT(counted->syscalls[SHOAL_BHV_CLASS_OTHER], 2000u);
  EXPECT_GE(counted->syscalls[SHOAL_BHV_CLASS_PROCESS], 1u);  // the fork (clone)
  EXPECT_EQ(counted->opens, 0u);
  EXPECT_EQ(counted->forks, 1u);
  int hosts = 0, hostname = 0;
  probes_->Drain([&](const BehaviourEvent& ev) {
    if (ev.kind != SHOAL_BHV_EV_OPEN) return;
    hosts += std::string(ev.detail) == "/etc/hosts";
    hostname += std::string(ev.detail) == "/etc/hostname";
  });
  EXPECT_EQ(hosts, 1);
  EXPECT_EQ(hostname, 0);
  // The grandchild exited; its pid still names the instance.
  EXPECT_EQ(probes_->CgroupOfPid(grandchild), id_);
  EXPECT_EQ(probes_->PidEntries(), 2u);
  probes_->Unwatch(id_);
  EXPECT_EQ(probes_->PidEntries(), 0u);
  EXPECT_EQ(probes_->CgroupOfPid(grandchild), 0u);
}

TEST_F(BehaviourProbesTest, ClassifiesSyscalls) {
  EXPECT_EQ(BehaviourProbes::SyscallClass(SHOAL_BHV_NR_EXECVE), SHOAL_BHV_CLASS_PROCESS);
  EXPECT_EQ(BehaviourProbes::SyscallClass(SHOAL_BHV_NR_CONNECT), SHOAL_BHV_CLASS_NET);
  EXPECT_EQ(BehaviourProbes::SyscallClass(SHOAL_BHV_NR_OPENAT), SHOAL_BHV_CLASS_FILE);
  EXPECT_EQ(BehaviourProbes::SyscallClass(202 /* futex */), SHOAL_BHV_CLASS_SYNC);
  EXPECT_EQ(BehaviourProbes::SyscallClass(500), SHOAL_BHV_CLASS_OTHER);
  EXPECT_STREQ(BehaviourProbes::ClassName(SHOAL_BHV_CLASS_MEMORY), "memory");
}

}  // namespace
}  // namespace shoal
