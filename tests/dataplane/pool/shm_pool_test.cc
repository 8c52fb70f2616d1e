// Both pool backends (ShmPool over /dev/shm, DpdkPool over hugetlbfs) against real files and
// real processes (fork + Attach, kill -9): every test runs once per backend. The DPDK runs
// reserve 2 MiB hugepages when there are too few, or skip saying why they could not.
#include "shoal/dataplane/pool/shm_pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "shoal/dataplane/pool/hugepages.h"
#include "shoal/dataplane/pool/pool_backend.h"
#include "tests/support/hugepages_for_test.h"
#include "tests/support/threads_for_test.h"

namespace shoal {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

std::string UniqueName(const std::string& tag) {
  static int counter = 0;
  return "shoal.test." + tag + "." + std::to_string(getpid()) + "." + std::to_string(counter++);
}

// A byte pattern that depends on the seed and the position, so a misplaced or stale buffer shows.
std::byte PatternByte(uint64_t seed, size_t i) {
  return static_cast<std::byte>((seed * 131 + i * 7 + (i >> 8)) & 0xff);
}
void Fill(std::span<std::byte> data, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) data[i] = PatternByte(seed, i);
}
// The first of the first n bytes of `data` (n at most its size) that is not Fill's; n when none.
size_t FirstWrongByte(std::span<const std::byte> data, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != PatternByte(seed, i)) return i;
  }
  return n;
}
// Hugepages the DPDK runs need at most at once (the largest test pool is 160 MiB).
constexpr uint64_t kTestHugepages = 256;

class PoolTest : public ::testing::TestWithParam<PoolBackend> {
 protected:
  void SetUp() override {
    if (GetParam() != PoolBackend::kDpdk) return;
    const std::string why = testing::ShortOfHugepages(kTestHugepages, "the dpdk pool tests");
    if (!why.empty()) GTEST_SKIP() << why;
  }
  PoolBackend backend() const { return GetParam(); }
  Result<std::unique_ptr<SharedPool>> Create(const std::string& name, uint64_t bytes) const {
    return CreatePool(backend(), name, bytes);
  }
  Result<std::unique_ptr<SharedPool>> Attach(const std::string& name) const {
    return AttachPool(backend(), name);
  }
  void Remove(const std::string& name) const { RemovePool(backend(), name); }
  // Where the backend keeps a pool's file.
  std::string PathOf(const std::string& name) const {
    if (backend() == PoolBackend::kBoost) return "/dev/shm/" + name;
    return HugetlbfsDir().value() + "/" + name;
  }
  // A file at PathOf(name) that is no pool, as a crashed or foreign program leaves it.
  void WriteJunk(const std::string& name, uint64_t bytes, mode_t mode) const {
    const int fd = open(PathOf(name).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, mode);
    ASSERT_GE(fd, 0) << PathOf(name) << ": " << strerror(errno);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    close(fd);
  }
  // The pool's file is its owner's alone (0600) and `bytes` long.
  void ExpectPrivateFile(const std::string& name, uint64_t bytes) const {
    struct stat st {};
    ASSERT_EQ(stat(PathOf(name).c_str(), &st), 0) << PathOf(name) << ": " << strerror(errno);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), bytes);
  }
  // The share of an empty pool's capacity one buffer can take: the Boost heap is all of it, the
  // DPDK heap what the size classes' mempools leave.
  uint64_t LargestBuffer(const PoolStats& s) const {
    return backend() == PoolBackend::kBoost ? s.capacity_bytes * 9 / 10 : s.capacity_bytes * 7 / 10;
  }
  // A new pool `name` of `bytes`. Where it cannot be made this throws, which fails the test
  // with the status (gtest reports the exception), so a test needs no check of its own.
  std::unique_ptr<SharedPool> MustCreate(const std::string& name, uint64_t bytes) const {
    auto pool = Create(name, bytes);
    if (!pool.ok()) throw std::runtime_error("pool " + name + ": " + pool.status().ToString());
    return std::move(pool).value();
  }
  // A new pool `name` of `bytes` holding one buffer of `size` bytes for slot 0, written with
  // Fill's pattern for `seed`; throws as MustCreate where that cannot be.
  struct OneBuffer {
    std::unique_ptr<SharedPool> pool;
    uint64_t off = 0;
    std::span<std::byte> data;
  };
  OneBuffer MustCreateWithOneBuffer(const std::string& name, uint64_t bytes, size_t size,
                                    uint64_t seed) const {
    OneBuffer b{MustCreate(name, bytes), 0, {}};
    auto off = b.pool->Allocate(size, 0);
    if (!off.ok()) throw std::runtime_error("pool " + name + ": " + off.status().ToString());
    b.off = *off;
    b.data = b.pool->Data(*off);
    Fill(b.data, b.data.size(), seed);
    return b;
  }
};

std::string BackendName(const ::testing::TestParamInfo<PoolBackend>& info) {
  return std::string(PoolBackendName(info.param));
}

INSTANTIATE_TEST_SUITE_P(Backends, PoolTest,
                         ::testing::Values(PoolBackend::kBoost, PoolBackend::kDpdk), BackendName);

// Runs `fn` in a forked child; the child exits with fn's return value and never returns here.
pid_t Fork(const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = fn();
    } catch (...) {
      rc = 99;
    }
    _exit(rc);
  }
  return pid;
}

// Runs `body` in a forked child on that process's own mapping of the pool `name` (attached with
// `backend`); the child exits with body's return value, or 2 when it cannot attach.
pid_t ForkAttached(PoolBackend backend, const std::string& name,
                   const std::function<int(SharedPool&)>& body) {
  return Fork([&]() -> int {
    auto p = AttachPool(backend, name);
    if (!p.ok()) return 2;
    return body(**p);
  });
}

int WaitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

bool Check(std::span<const std::byte> data, size_t n, uint64_t seed) {
  return data.size() >= n && FirstWrongByte(data, n, seed) == n;
}

// Every buffer went back: `used` bytes in use (0, or what the test measured before its own
// allocations), none live.
::testing::AssertionResult Empty(const SharedPool& pool, uint64_t used = 0) {
  const PoolStats s = pool.Stats();
  if (s.used_bytes == used && s.live_buffers == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "used_bytes " << s.used_bytes << " (want " << used
                                       << "), live_buffers " << s.live_buffers;
}

// Pipe-based handshake between parent and child.
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { EXPECT_EQ(pipe(fd), 0); }
  ~Pipe() {
    for (int f : fd) {
      if (f >= 0) close(f);
    }
  }
  void Signal() const {
    char c = 'x';
    (void)!write(fd[1], &c, 1);
  }
  bool Wait() const {
    char c = 0;
    return read(fd[0], &c, 1) == 1;
  }
};

TEST(PoolNames, SegmentNameFollowsNodeAndTenant) {
  EXPECT_EQ(PoolSegmentName("node-a", "job7"), "shoal.node-a.job7");
}

TEST(PoolBackendChoice, NamesParseAndBoostIsAlwaysBoost) {
  EXPECT_EQ(ParsePoolBackend("boost").value(), PoolBackend::kBoost);
  EXPECT_EQ(ParsePoolBackend("dpdk").value(), PoolBackend::kDpdk);
  EXPECT_EQ(ParsePoolBackend("spdk").status().message(), "pool backend 'spdk': want boost or dpdk");
  auto boost = ChoosePoolBackend("boost", 512 * kMiB);
  ASSERT_TRUE(boost.ok());
  EXPECT_EQ(boost->backend, PoolBackend::kBoost);
  EXPECT_EQ(boost->reason, "configured (pool: boost)");
  auto bad = ChoosePoolBackend("Auto", 512 * kMiB);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "config: pool: 'Auto': want boost, dpdk or auto");
}

// The real probe (hugetlbfs mount, nr/free/resv_hugepages) with a pool one page larger than
// every page the node has reserved: dpdk refuses, auto takes boost, both naming the counts.
TEST(PoolBackendChoice, TooFewHugepagesRefusesDpdkAndAutoFallsBackNamingNeededAndFree) {
  if (!DpdkPoolBuilt()) {
    auto forced = ChoosePoolBackend("dpdk", 512 * kMiB);
    EXPECT_EQ(forced.status().message(),
              "pool: dpdk: this build has no DPDK (libdpdk-dev not found)");
    EXPECT_EQ(ChoosePoolBackend("auto", 512 * kMiB)->backend, PoolBackend::kBoost);
    GTEST_SKIP() << "pool backend dpdk not built: only the no-DPDK answers checked";
  }
  auto dir = HugetlbfsDir();
  if (!dir.ok()) GTEST_SKIP() << "no hugetlbfs: " << dir.status().message();
  const auto counts = ReadHugepageCounts().value();
  const uint64_t need = std::max<uint64_t>(counts.total + 1, 32);
  const uint64_t bytes = need * kHugepageBytes;
  const std::string why = std::to_string(counts.free) + " free 2 MiB hugepages (of " +
                          std::to_string(counts.total) + ") are fewer than one tenant pool of " +
                          std::to_string(bytes / kMiB) + " MiB needs (" + std::to_string(need) +
                          "); reserve them in /sys/kernel/mm/hugepages/hugepages-2048kB/"
                          "nr_hugepages";
  auto forced = ChoosePoolBackend("dpdk", bytes);
  EXPECT_EQ(forced.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(forced.status().message(), "pool: dpdk: " + why);
  auto fallback = ChoosePoolBackend("auto", bytes);
  ASSERT_TRUE(fallback.ok()) << fallback.status().ToString();
  EXPECT_EQ(fallback->backend, PoolBackend::kBoost);
  EXPECT_EQ(fallback->reason, "auto: not dpdk because " + why);
}

TEST(PoolBackendChoice, WithTheHugepagesDpdkAndAutoTakeDpdk) {
  const std::string short_of = testing::ShortOfHugepages(32, "choosing dpdk for 64 MiB pools");
  if (!short_of.empty()) GTEST_SKIP() << short_of;
  const auto counts = ReadHugepageCounts().value();
  const std::string tail = std::to_string(counts.free) + " free 2 MiB hugepages at " +
                           HugetlbfsDir().value() + ", 32 per tenant pool";
  auto forced = ChoosePoolBackend("dpdk", 64 * kMiB);
  ASSERT_TRUE(forced.ok()) << forced.status().ToString();
  EXPECT_EQ(forced->backend, PoolBackend::kDpdk);
  EXPECT_EQ(forced->reason, "configured (pool: dpdk): " + tail);
  auto automatic = ChoosePoolBackend("auto", 64 * kMiB);
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(automatic->backend, PoolBackend::kDpdk);
  EXPECT_EQ(automatic->reason, "auto: hugepages configured: " + tail);
}

// A restarted shoald maps its pools' pages again: those count as free for its own node's
// prefix, and for no other.
TEST(PoolBackendChoice, PagesHeldByThisNodesPoolsCountForItsRestart) {
  const std::string short_of = testing::ShortOfHugepages(32, "a 64 MiB dpdk pool");
  if (!short_of.empty()) GTEST_SKIP() << short_of;
  const std::string prefix = "shoal.choice-" + std::to_string(getpid()) + ".";
  auto pool = CreatePool(PoolBackend::kDpdk, prefix + "t", 64 * kMiB);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const std::string dir = HugetlbfsDir().value();
  EXPECT_EQ(HugepagesHeldBy(dir, prefix), 32u);
  EXPECT_EQ(HugepagesHeldBy(dir, "shoal.choice-none."), 0u);
  EXPECT_EQ(HugepagesHeldBy(dir, ""), 0u);
  const auto counts = ReadHugepageCounts().value();
  const uint64_t bytes = (counts.free + 32) * kHugepageBytes;  // fits only with the held pages
  auto restart = ChoosePoolBackend("dpdk", bytes, prefix);
  ASSERT_TRUE(restart.ok()) << restart.status().ToString();
  EXPECT_EQ(restart->backend, PoolBackend::kDpdk);
  EXPECT_NE(restart->reason.find(" free 2 MiB hugepages + 32 held by this node's pools to take "
                                 "over at "),
            std::string::npos)
      << restart->reason;
  auto other = ChoosePoolBackend("dpdk", bytes, "shoal.choice-none.");
  EXPECT_EQ(other.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(PoolFileExists(PoolBackend::kDpdk, prefix + "t"));
  EXPECT_FALSE(PoolFileExists(PoolBackend::kBoost, prefix + "t"));
  pool->reset();
  RemovePool(PoolBackend::kDpdk, prefix + "t");
  EXPECT_FALSE(PoolFileExists(PoolBackend::kDpdk, prefix + "t"));
}

TEST_P(PoolTest, CreateMakesAPrivateSegmentThatTheCreatorUnlinks) {
  const std::string name = UniqueName("mode");
  auto pool = MustCreate(name, 8 * kMiB);
  ExpectPrivateFile(name, 8 * kMiB);
  EXPECT_EQ(pool->mapped_size(), 8 * kMiB);
  EXPECT_NE(pool->base(), nullptr);
  EXPECT_EQ(pool->Name(), name);
  PoolStats s = pool->Stats();
  EXPECT_GT(s.capacity_bytes, 7 * kMiB);  // less the pool's own header (and DPDK's rings)
  EXPECT_LE(s.capacity_bytes, 8 * kMiB);
  EXPECT_TRUE(Empty(*pool));
  EXPECT_GT(s.free_bytes, 7 * kMiB);

  {  // An attacher's destructor only unmaps.
    auto attached = Attach(name);
    ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  }
  struct stat st {};
  EXPECT_EQ(stat(PathOf(name).c_str(), &st), 0);
  pool.reset();
  EXPECT_NE(stat(PathOf(name).c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
}

// The pages of `bytes` at `base` that are in memory (mincore: the tmpfs or hugetlbfs pages the
// mapping's file holds).
size_t ResidentPages(void* base, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  if (mincore(base, bytes, v.data()) != 0) return 0;
  return static_cast<size_t>(
      std::count_if(v.begin(), v.end(), [](unsigned char c) { return c & 1; }));
}

// pool_prefault: a Boost pool's pages are all allocated by PrefaultPool, whatever they held
// stays; a dpdk pool is populated at creation (nothing to do).
TEST_P(PoolTest, PrefaultAllocatesEveryPageAndKeepsTheContents) {
  const std::string name = UniqueName("prefault");
  auto [pool, off, data] = MustCreateWithOneBuffer(name, 32 * kMiB, 3 * kMiB, 1);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t pages = pool->mapped_size() / page;
  if (backend() == PoolBackend::kBoost) {
    EXPECT_LT(ResidentPages(pool->base(), pool->mapped_size()), pages / 2)
        << "a new Boost pool is sparse until touched";
  }
  ASSERT_TRUE(PrefaultPool(*pool).ok());
  EXPECT_EQ(ResidentPages(pool->base(), pool->mapped_size()), pages);
  ASSERT_EQ(FirstWrongByte(data, data.size(), 1), data.size());
  EXPECT_EQ(pool->Stats().live_buffers, 1u);
  EXPECT_TRUE(pool->Release(off, 0).ok());
}

// The bytes of this process's mapping at `base` that have page-table entries: smaps' Rss, or
// for hugetlbfs its Shared_/Private_Hugetlb lines (hugetlb pages are not counted in Rss).
// Unlike mincore, which reports the file's pages in memory whoever mapped them.
uint64_t MappedBytes(const void* base) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return 0;
  const auto want = reinterpret_cast<uintptr_t>(base);
  char line[512];
  bool in = false;
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && std::strchr(line, ':') != nullptr &&
        std::strchr(line, '-') < std::strchr(line, ' ')) {
      if (in) break;
      in = lo == want;
      continue;
    }
    unsigned long v = 0;
    if (in && (std::sscanf(line, "Rss: %lu kB", &v) == 1 ||
               std::sscanf(line, "Shared_Hugetlb: %lu kB", &v) == 1 ||
               std::sscanf(line, "Private_Hugetlb: %lu kB", &v) == 1)) {
      kb += v;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

// pool_prefault's instances: a process attaching a pre-faulted pool starts without page-table
// entries for it (so would an instance forked from its zygote); PopulatePoolMapping installs
// them all, without touching a byte, and what the pool holds stays.
TEST_P(PoolTest, PopulateMapsTheWholePoolInThisProcessAndKeepsTheContents) {
  const std::string name = UniqueName("populate");
  auto [pool, off, data] = MustCreateWithOneBuffer(name, 32 * kMiB, 3 * kMiB, 2);
  ASSERT_TRUE(PrefaultPool(*pool).ok());

  auto attached = Attach(name);
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  SharedPool& other = **attached;
  const uint64_t size = other.mapped_size();
  ASSERT_EQ(size % (2 * kMiB), 0u);
  EXPECT_LT(MappedBytes(other.base()), size / 2)
      << "a new mapping has entries only for what attaching touched";
  ASSERT_TRUE(PopulatePoolMapping(other).ok());
  EXPECT_EQ(MappedBytes(other.base()), size);
  std::span<std::byte> seen = other.Data(off);
  ASSERT_EQ(seen.size(), data.size());
  ASSERT_EQ(FirstWrongByte(seen, seen.size(), 2), seen.size());
  EXPECT_EQ(pool->Stats().live_buffers, 1u);
  EXPECT_TRUE(pool->Release(off, 0).ok());
}

// The FL leaf maps only what shoald's warm-ahead has allocated (PopulatePoolRange): the range's
// pages get entries in this process, nothing beyond them does, its bytes stay; a range that
// runs past the pool is refused, naming it.
TEST_P(PoolTest, PopulateRangeMapsThatRangeKeepsItsBytesAndRefusesOnePastTheEnd) {
  const std::string name = UniqueName("range");
  auto [pool, off, data] = MustCreateWithOneBuffer(name, 32 * kMiB, 6 * kMiB, 3);

  auto attached = Attach(name);
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  SharedPool& other = **attached;
  const uint64_t size = other.mapped_size();
  const uint64_t before = MappedBytes(other.base());
  // Not page-aligned on purpose: widened to whole pages (2 MiB ones on dpdk).
  const uint64_t at = off + 100, len = 5 * kMiB;
  ASSERT_TRUE(PopulatePoolRange(other, at, len).ok());
  const uint64_t after = MappedBytes(other.base());
  EXPECT_GE(after, before + len - 2 * kMiB) << "the range's pages are mapped";
  EXPECT_LE(after, before + len + 4 * kMiB) << "and little else";
  EXPECT_LT(after, size / 2);
  std::span<std::byte> seen = other.Data(off);
  ASSERT_EQ(seen.size(), data.size());
  ASSERT_EQ(FirstWrongByte(seen, seen.size(), 3), seen.size());
  EXPECT_TRUE(PopulatePoolRange(other, size, 0).ok()) << "an empty range at the end";

  const uint64_t mapped = MappedBytes(other.base());  // the check above read the whole buffer
  const Status past = PopulatePoolRange(other, size - 4096, 8192);
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(past.message(), "populating [" + std::to_string(size - 4096) + ", " +
                                std::to_string(size + 4096) + ") of pool " + name +
                                ": past its end (" + std::to_string(size) + " bytes)");
  const Status beyond = PopulatePoolRange(other, size + 1, 1);
  EXPECT_EQ(beyond.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(beyond.message().find(": past its end ("), std::string::npos) << beyond.message();
  EXPECT_EQ(MappedBytes(other.base()), mapped) << "a refused range maps nothing";
  EXPECT_TRUE(pool->Release(off, 0).ok());
}

// Of the pages that [from, to) of a mapping of the pool touches: {in memory (mincore: whoever
// allocated them), all}.
std::pair<size_t, size_t> ResidentBetween(const SharedPool& pool, uint64_t from, uint64_t to) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t lo = from / page * page, hi = (to + page - 1) / page * page;
  return {ResidentPages(static_cast<char*>(pool.base()) + lo, hi - lo), (hi - lo) / page};
}

// Waits (without a time limit of its own: ctest's) until the pool's warm end reaches `want`,
// the way an instance follows it (WaitWarm on the futex); the end it reached.
uint64_t WaitWarmEnd(const SharedPool& pool, uint64_t want) {
  for (;;) {
    const SharedPool::WarmMark m = pool.Warm();
    if (m.end >= want) return m.end;
    pool.WaitWarm(m.seq);
  }
}

// pool_warm_bytes: shoald's Boost pool keeps a window of never-used memory above its highest
// allocation allocated (not the whole pool), a buffer handed out there is on allocated pages
// before its first write, the window moves up with the allocations, what a writer put in a
// buffer meanwhile stays, and an attached process can follow the warm end through the futex.
TEST_P(PoolTest, WarmAheadKeepsAWindowAboveTheHighestAllocationAllocated) {
  const std::string name = UniqueName("warm");
  auto pool = MustCreate(name, 64 * kMiB);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uint64_t size = pool->mapped_size();
  if (backend() == PoolBackend::kDpdk) {
    ASSERT_TRUE(pool->StartWarmAhead(16 * kMiB).ok());
    EXPECT_EQ(pool->Warm().end, size) << "a dpdk pool is populated whole at creation";
    return;
  }
  auto attached = Attach(name);
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  SharedPool& other = **attached;
  EXPECT_EQ(other.Warm().end, 0u) << "nothing warmed before it is asked";
  const Status refused = other.StartWarmAhead(16 * kMiB);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "pool " + name + ": only the process that created it warms it ahead");

  ASSERT_TRUE(pool->StartWarmAhead(16 * kMiB).ok());
  const uint64_t heap = ShmPool::kPoolHeaderBytes;
  uint64_t end = WaitWarmEnd(other, heap + 16 * kMiB);
  EXPECT_EQ(end, heap + 16 * kMiB) << "a window above the (empty) heap, and no more";
  EXPECT_EQ(ResidentBetween(*pool, 0, end).first, end / page);
  EXPECT_LE(ResidentPages(pool->base(), size), (end + kMiB) / page) << "not the whole pool";

  // Handed out from the warm window: on allocated pages before anything writes them.
  auto a = pool->Allocate(12 * kMiB, 0);
  ASSERT_TRUE(a.ok());
  EXPECT_LE(*a + 12 * kMiB, heap + 16 * kMiB);
  const auto [warm, pages] = ResidentBetween(*pool, *a, *a + 12 * kMiB);
  EXPECT_EQ(warm, pages);
  // The window moves up above it; a buffer written while it does keeps its bytes.
  auto b = pool->Allocate(8 * kMiB, 0);
  ASSERT_TRUE(b.ok());
  EXPECT_GT(*b, *a);
  std::span<std::byte> bytes = pool->Data(*b);
  Fill(bytes, bytes.size(), 4);
  const uint64_t top = *b + 8 * kMiB;
  end = WaitWarmEnd(other, top + 16 * kMiB - page);
  EXPECT_LE(end, top + 16 * kMiB + page);
  EXPECT_EQ(ResidentBetween(*pool, 0, end).first, end / page);
  EXPECT_LE(ResidentPages(pool->base(), size), (end + kMiB) / page) << "not the whole pool";
  ASSERT_EQ(FirstWrongByte(bytes, bytes.size(), 4), bytes.size());
  // The attached process maps what is warm (what an FL leaf does beside its loop).
  ASSERT_TRUE(PopulatePoolRange(other, 0, end).ok());
  EXPECT_GE(MappedBytes(other.base()), end);
  EXPECT_TRUE(pool->Release(*a, 0).ok());
  EXPECT_TRUE(pool->Release(*b, 0).ok());
  ASSERT_TRUE(pool->StartWarmAhead(0).ok()) << "0 stops it";
}

TEST_P(PoolTest, CreateReplacesAStaleSegment) {
  const std::string name = UniqueName("stale");
  WriteJunk(name, backend() == PoolBackend::kBoost ? 12345 : 2 * kMiB, 0644);
  auto pool = MustCreate(name, 4 * kMiB);
  ExpectPrivateFile(name, 4 * kMiB);
}

// A shoald killed with SIGKILL (here: a child that _exits holding the pool lock) leaves its
// pool; CreateOrRecover takes it over: the kept slot's buffers and bytes survive, every other
// slot's holds are reclaimed, the abandoned lock is recovered. Another size starts afresh.
TEST_P(PoolTest, CreateOrRecoverTakesOverADeadOwnersPool) {
  const std::string name = UniqueName("recover");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = Fork([&]() -> int {
    auto pool = Create(name, 8 * kMiB);
    if (!pool.ok()) return 2;
    uint64_t off[3];
    off[0] = (*pool)->Allocate(100000, 63).value();  // the coordinator's: survives
    std::memset((*pool)->Data(off[0]).data(), 0x5a, 100000);
    off[1] = (*pool)->Allocate(1000, 0).value();  // shoald's and an instance's: reclaimed
    (void)(*pool)->Retain(off[1], 5);
    off[2] = (*pool)->Allocate(1000, 3).value();  // an instance's and the coordinator's
    (void)(*pool)->Retain(off[2], 63);
    if (write(fds[1], off, sizeof off) != sizeof off) return 3;
    (*pool)->LockAndAbandonForTest();
    _exit(0);  // no destructor: the segment stays, as after kill -9
  });
  uint64_t off[3] = {};
  ASSERT_EQ(read(fds[0], off, sizeof off), static_cast<ssize_t>(sizeof off));
  ASSERT_EQ(WaitExit(child), 0);
  close(fds[0]);
  close(fds[1]);
  bool recovered = false;
  auto pool = CreateOrRecoverPool(backend(), name, 8 * kMiB, 63, &recovered);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_TRUE(recovered);
  auto held = (*pool)->HeldBy(63);
  std::sort(held.begin(), held.end());
  std::vector<uint64_t> want = {off[0], off[2]};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(held, want);
  EXPECT_EQ((*pool)->Holders(off[1]), 0u);
  EXPECT_EQ((*pool)->Holders(off[2]), uint64_t{1} << 63);
  auto data = (*pool)->Data(off[0]);
  EXPECT_TRUE(std::all_of(data.begin(), data.begin() + 100000,
                          [](std::byte b) { return b == std::byte{0x5a}; }));
  EXPECT_TRUE((*pool)->Allocate(4096, 0).ok()) << "the abandoned lock is recovered";
  EXPECT_EQ((*pool)->Stats().live_buffers, 3u);
  pool->reset();  // the taker-over owns the segment now: it unlinks it
  struct stat st;
  EXPECT_NE(stat(PathOf(name).c_str(), &st), 0);
  // A pool of another size is not taken over: it is recreated at the size asked for.
  pid_t small = Fork([&]() -> int {
    auto p = Create(name, 4 * kMiB);
    if (!p.ok()) return 2;
    _exit(0);
  });
  ASSERT_EQ(WaitExit(small), 0);
  auto fresh = CreateOrRecoverPool(backend(), name, 16 * kMiB, 63, &recovered);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_FALSE(recovered);
  EXPECT_GT((*fresh)->Stats().capacity_bytes, 8 * kMiB);
  EXPECT_EQ((*fresh)->Stats().live_buffers, 0u);
}

TEST_P(PoolTest, AttachErrorsAreClear) {
  auto missing = Attach(UniqueName("missing"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("not found"), std::string::npos);

  const std::string name = UniqueName("garbage");
  WriteJunk(name, 4 * kMiB, 0600);
  auto garbage = Attach(name);
  Remove(name);
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.status().message().find("not a Shoal pool"), std::string::npos);

  EXPECT_EQ(Attach("a/b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Create("", 4 * kMiB).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Create(UniqueName("tiny"), 1024).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(PoolTest, RoundTripsEverySizeClassBoundaryUpTo64MiB) {
  auto pool = MustCreate(UniqueName("sizes"), 160 * kMiB);
  std::vector<size_t> sizes = {0, 1, 63, 64, 65, 255};
  for (size_t c : {256u, 1024u, 4096u, 16384u, 65536u, 262144u, 1048576u}) {
    sizes.push_back(c - 1);
    sizes.push_back(c);
    sizes.push_back(c + 1);
  }
  for (size_t s : {2 * kMiB, 16 * kMiB + 3, 64 * kMiB}) sizes.push_back(s);

  std::vector<std::pair<uint64_t, size_t>> held;
  uint64_t seed = 1;
  for (size_t size : sizes) {
    auto off = pool->Allocate(size, kShoaldSlot);
    ASSERT_TRUE(off.ok()) << size << ": " << off.status().ToString();
    EXPECT_NE(*off, 0u);
    EXPECT_EQ(*off % 64, 0u);
    auto data = pool->Data(*off);
    ASSERT_GE(data.size(), size);
    EXPECT_GE(data.size(), 256u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data.data()) % 64, 0u);
    EXPECT_EQ(data.data(), static_cast<std::byte*>(pool->base()) + *off);
    EXPECT_LE(*off + data.size(), pool->mapped_size());
    if (size <= kMiB) {  // size classes: the capacity is the class
      EXPECT_TRUE(data.size() == 256 || data.size() == 1024 || data.size() == 4096 ||
                  data.size() == 16384 || data.size() == 65536 || data.size() == 262144 ||
                  data.size() == kMiB)
          << data.size();
    } else {
      EXPECT_LT(data.size(), size + 64);
    }
    Fill(data, data.size(), seed);
    held.emplace_back(*off, seed++);
  }
  EXPECT_EQ(pool->Stats().live_buffers, sizes.size());
  // Every buffer still has its own bytes after all the others were written.
  std::set<uint64_t> offsets;
  for (auto [off, s] : held) {
    EXPECT_TRUE(offsets.insert(off).second);
    auto data = pool->Data(off);
    EXPECT_TRUE(Check(data, data.size(), s)) << "offset " << off;
  }
  for (auto [off, s] : held) {
    EXPECT_TRUE(pool->Release(off, kShoaldSlot).ok());
    EXPECT_TRUE(pool->Data(off).empty());
  }
  EXPECT_TRUE(Empty(*pool));
  EXPECT_EQ(pool->Stats().alloc_failures, 0u);
}

TEST_P(PoolTest, SmallBlocksAreReused) {
  auto pool = MustCreate(UniqueName("reuse"), 8 * kMiB);
  auto a = pool->Allocate(3000, 1);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(pool->Release(*a, 1).ok());
  auto b = pool->Allocate(4096, 1);  // (DPDK: from slot 1's cache, as rte_mempool's per lcore)
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(pool->Holders(*b), uint64_t{1} << 1);
}

TEST_P(PoolTest, BytesWrittenInOneProcessAreReadInAnother) {
  const std::string name = UniqueName("xproc");
  auto pool = MustCreate(name, 32 * kMiB);
  const size_t kSize = 3 * kMiB + 17;
  auto off = pool->Allocate(kSize, kShoaldSlot);
  ASSERT_TRUE(off.ok());
  Fill(pool->Data(*off), kSize, 42);
  ASSERT_TRUE(pool->Retain(*off, 3).ok());

  Pipe offset_pipe;
  pid_t child = ForkAttached(backend(), name, [&](SharedPool& p) -> int {
    if (!Check(p.Data(*off), kSize, 42)) return 3;
    // The child writes an answer for the parent into a buffer of its own.
    auto reply = p.Allocate(70000, 3);
    if (!reply.ok()) return 4;
    Fill(p.Data(*reply), 70000, 43);
    if (!p.Transfer(*reply, 3, kShoaldSlot).ok()) return 5;
    if (!p.Release(*off, 3).ok()) return 6;
    uint64_t r = *reply;
    if (write(offset_pipe.fd[1], &r, sizeof r) != sizeof r) return 7;
    return 0;
  });
  ASSERT_EQ(WaitExit(child), 0);
  uint64_t reply = 0;
  ASSERT_EQ(read(offset_pipe.fd[0], &reply, sizeof reply), static_cast<ssize_t>(sizeof reply));
  EXPECT_TRUE(Check(pool->Data(reply), 70000, 43));
  EXPECT_EQ(pool->Holders(reply), uint64_t{1} << kShoaldSlot);
  EXPECT_EQ(pool->Holders(*off), uint64_t{1} << kShoaldSlot);
  EXPECT_TRUE(pool->Release(reply, kShoaldSlot).ok());
  EXPECT_TRUE(pool->Release(*off, kShoaldSlot).ok());
  EXPECT_TRUE(Empty(*pool));
}

TEST_P(PoolTest, TransferToAChildThatReleasesFreesTheBuffer) {
  const std::string name = UniqueName("transfer");
  auto pool = MustCreate(name, 8 * kMiB);
  const uint64_t before = pool->Stats().used_bytes;
  auto off = pool->Allocate(5000, kShoaldSlot);
  ASSERT_TRUE(off.ok());
  Fill(pool->Data(*off), 5000, 7);
  ASSERT_TRUE(pool->Transfer(*off, kShoaldSlot, 9).ok());
  EXPECT_EQ(pool->Holders(*off), uint64_t{1} << 9);
  // The parent no longer holds it: its release is refused.
  EXPECT_EQ(pool->Release(*off, kShoaldSlot).code(), StatusCode::kInvalidArgument);

  pid_t child = ForkAttached(backend(), name, [&](SharedPool& p) -> int {
    if (!Check(p.Data(*off), 5000, 7)) return 3;
    return p.Release(*off, 9).ok() ? 0 : 4;
  });
  ASSERT_EQ(WaitExit(child), 0);
  EXPECT_TRUE(pool->Data(*off).empty());
  EXPECT_EQ(pool->Holders(*off), 0u);
  EXPECT_TRUE(Empty(*pool, before));
}

TEST_P(PoolTest, RetainSharesOwnershipUntilTheLastRelease) {
  auto pool = MustCreate(UniqueName("retain"), 8 * kMiB);
  auto off = pool->Allocate(100, 1);
  ASSERT_TRUE(off.ok());
  ASSERT_TRUE(pool->Retain(*off, 2).ok());
  EXPECT_EQ(pool->Retain(*off, 2).code(), StatusCode::kInvalidArgument);  // at most once
  EXPECT_EQ(pool->Holders(*off), 0b110u);
  ASSERT_TRUE(pool->Release(*off, 1).ok());
  EXPECT_FALSE(pool->Data(*off).empty());
  EXPECT_EQ(pool->Stats().live_buffers, 1u);
  ASSERT_TRUE(pool->Release(*off, 2).ok());
  EXPECT_TRUE(pool->Data(*off).empty());
  EXPECT_TRUE(Empty(*pool));
  EXPECT_EQ(pool->Retain(*off, 3).code(), StatusCode::kInvalidArgument);  // freed
}

TEST_P(PoolTest, ReclaimHolderAfterKill9FreesWhatTheDeadProcessHeld) {
  const std::string name = UniqueName("reclaim");
  auto pool = MustCreate(name, 64 * kMiB);
  auto mine = pool->Allocate(10000, kShoaldSlot);  // held by shoald, shared with the child
  ASSERT_TRUE(mine.ok());
  auto given = pool->Allocate(300, kShoaldSlot);  // handed over to the child
  ASSERT_TRUE(given.ok());
  ASSERT_TRUE(pool->Transfer(*given, kShoaldSlot, 5).ok());
  const uint64_t before = pool->Stats().used_bytes;
  const HolderSlot kChildSlot = 5;
  const int kOwn = 37;

  Pipe ready;
  pid_t child = ForkAttached(backend(), name, [&](SharedPool& p) -> int {
    for (int i = 0; i < kOwn; ++i) {
      auto o = p.Allocate(static_cast<size_t>(i) * 37000, kChildSlot);
      if (!o.ok()) return 3;
    }
    if (!p.Retain(*mine, kChildSlot).ok()) return 4;
    ready.Signal();
    pause();
    return 0;
  });
  ASSERT_TRUE(ready.Wait());
  EXPECT_GT(pool->Stats().used_bytes, before);
  kill(child, SIGKILL);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);

  EXPECT_EQ(pool->ReclaimHolder(kChildSlot), static_cast<uint64_t>(kOwn + 2));
  PoolStats s = pool->Stats();
  EXPECT_EQ(s.used_bytes, before - 1024);  // `given` (a 1 KiB-class block) went back
  EXPECT_EQ(s.live_buffers, 1u);
  EXPECT_EQ(pool->Holders(*mine), uint64_t{1} << kShoaldSlot);
  EXPECT_TRUE(pool->Data(*given).empty());
  EXPECT_EQ(pool->ReclaimHolder(kChildSlot), 0u);
  EXPECT_TRUE(pool->Release(*mine, kShoaldSlot).ok());
  EXPECT_TRUE(Empty(*pool));
}

TEST_P(PoolTest, FullPoolRefusesThenRecoversAfterReleases) {
  const std::string name = UniqueName("full");
  auto pool = MustCreate(name, 4 * kMiB);
  std::vector<uint64_t> held;
  Result<uint64_t> r = uint64_t{0};
  for (int i = 0; i < 1000; ++i) {
    r = pool->Allocate(65536, 1);
    if (!r.ok()) break;
    held.push_back(*r);
  }
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("pool " + name + " full"), std::string::npos)
      << r.status().message();
  EXPECT_GT(held.size(), 40u);  // most of the 4 MiB is usable
  EXPECT_EQ(pool->Allocate(2 * kMiB, 1).status().code(), StatusCode::kResourceExhausted);
  PoolStats s = pool->Stats();
  EXPECT_EQ(s.alloc_failures, 2u);
  EXPECT_EQ(s.live_buffers, held.size());
  EXPECT_EQ(s.used_bytes, held.size() * 65536);

  ASSERT_TRUE(pool->Release(held.back(), 1).ok());
  held.pop_back();
  EXPECT_TRUE(pool->Allocate(65536, 1).ok());  // reuses the freed block
  for (uint64_t o : held) ASSERT_TRUE(pool->Release(o, 1).ok());
  // The freed 64 KiB blocks sit on a free list; a large request takes them back to the heap.
  auto big = pool->Allocate(2 * kMiB, 1);
  EXPECT_TRUE(big.ok()) << big.status().ToString();
  // More than the whole pool can never fit: that is not backpressure.
  EXPECT_EQ(pool->Allocate(5 * kMiB, 1).status().code(), StatusCode::kTooLarge);
}

TEST_P(PoolTest, BadOffsetsAndDoubleReleasesAreRefused) {
  auto pool = MustCreate(UniqueName("bad"), 8 * kMiB);
  auto off = pool->Allocate(1000, 1);
  ASSERT_TRUE(off.ok());
  const PoolStats before = pool->Stats();
  for (uint64_t bad :
       {uint64_t{0}, uint64_t{1}, uint64_t{64}, uint64_t{4096}, *off + 64, *off - 64, *off + 1,
        uint64_t{pool->mapped_size()}, uint64_t{pool->mapped_size()} - 64, ~uint64_t{0}}) {
    EXPECT_TRUE(pool->Data(bad).empty()) << bad;
    EXPECT_EQ(pool->Release(bad, 1).code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(pool->Retain(bad, 2).code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(pool->Transfer(bad, 1, 2).code(), StatusCode::kInvalidArgument) << bad;
  }
  // Random garbage offsets, as a confused or hostile peer would send.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100000; ++i) {
    uint64_t bad = rng() % (pool->mapped_size() + 4096);
    if (i % 2) bad &= ~uint64_t{63};
    if (bad == *off) continue;
    ASSERT_TRUE(pool->Data(bad).empty()) << bad;
    ASSERT_FALSE(pool->Release(bad, 1).ok()) << bad;
  }
  EXPECT_EQ(pool->Release(*off, 2).code(), StatusCode::kInvalidArgument);  // not a holder
  EXPECT_EQ(pool->Transfer(*off, 2, 3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Release(*off, 64).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Retain(*off, 64).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Transfer(*off, 1, 64).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Allocate(10, 64).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->ReclaimHolder(64), 0u);
  EXPECT_EQ(pool->Holders(*off), 0b10u);
  EXPECT_EQ(pool->Stats().used_bytes, before.used_bytes);

  ASSERT_TRUE(pool->Release(*off, 1).ok());
  Status again = pool->Release(*off, 1);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(again.message().empty());
  EXPECT_TRUE(Empty(*pool));
  // The block went back to its free list exactly once: two allocations get two blocks.
  auto a = pool->Allocate(1000, 1);
  auto b = pool->Allocate(1000, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

TEST_P(PoolTest, ALockHolderKilledWithSigkillDoesNotDeadlockTheNode) {
  const std::string name = UniqueName("robust");
  auto pool = MustCreate(name, 8 * kMiB);
  Pipe locked;
  pid_t child = ForkAttached(backend(), name, [&](SharedPool& p) -> int {
    p.LockAndAbandonForTest();
    locked.Signal();
    pause();
    return 0;
  });
  ASSERT_TRUE(locked.Wait());
  kill(child, SIGKILL);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  alarm(30);  // a deadlock fails the test instead of hanging it
  // A large buffer: DPDK takes its heap lock for those only (class sizes are lock-free).
  auto off = pool->Allocate(2 * kMiB, kShoaldSlot);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_TRUE(pool->Release(*off, kShoaldSlot).ok());
  EXPECT_EQ(pool->LockRecoveries(), 1u);
  // The lock is healthy again: another process can take it too.
  pid_t second = ForkAttached(backend(), name, [&](SharedPool& p) -> int {
    auto o = p.Allocate(2 * kMiB, 4);
    return o.ok() && p.Release(*o, 4).ok() ? 0 : 3;
  });
  EXPECT_EQ(WaitExit(second), 0);
  alarm(0);
  EXPECT_TRUE(Empty(*pool));
}

// `threads` threads on the pool at once, thread t (1..threads) for slot_of(t) with its own
// random stream (seed t), 20000 steps each: `each_step(t, rng)` (its errors), then on a coin
// toss, while it holds fewer than `most_held`, a buffer of min_size..max_size bytes whose first
// 64 bytes it marks with t, or else its last buffer's release after checking the mark (a buffer
// handed to two threads at once shows); at the end it releases what it holds. Every thread's
// errors, added up.
int ChurnOnThreads(SharedPool& pool, int threads, const std::function<HolderSlot(int)>& slot_of,
                   size_t most_held, uint64_t min_size, uint64_t max_size,
                   const std::function<int(int, std::mt19937_64&)>& each_step = {}) {
  std::atomic<int> errors{0};
  testing::Threads(threads, [&](int i) {
    const int t = i + 1;
    const HolderSlot slot = slot_of(t);
    const std::byte mark = static_cast<std::byte>(t);
    std::mt19937_64 rng(t);
    std::vector<uint64_t> mine;
    for (int i = 0; i < 20000; ++i) {
      if (each_step) errors += each_step(t, rng);
      if (mine.size() < most_held && rng() % 2) {
        auto o = pool.Allocate(min_size + rng() % (max_size - min_size + 1), slot);
        if (!o.ok()) {
          ADD_FAILURE() << o.status().ToString();
          ++errors;
          continue;
        }
        std::fill_n(pool.Data(*o).begin(), 64, mark);
        mine.push_back(*o);
      } else if (!mine.empty()) {
        const uint64_t o = mine.back();
        mine.pop_back();
        const auto d = pool.Data(o);
        errors += static_cast<int>(64 - std::count(d.begin(), d.begin() + 64, mark));
        if (!pool.Release(o, slot).ok()) ++errors;
      }
    }
    for (uint64_t o : mine) {
      if (!pool.Release(o, slot).ok()) ++errors;
    }
  }).Join();
  return errors.load();
}

// More threads on one slot than the DPDK pool has cache lanes per slot (3 of them get a lane of
// their own, the rest share the locked one): no buffer is ever handed to two threads at once,
// and every count comes back to zero.
TEST_P(PoolTest, ThreadsSharingOneSlotNeverGetTheSameBuffer) {
  // 7 threads x 40 buffers of up to 100 KB, each taking its size class's capacity (256 KiB
  // above 64 KiB): 70 MiB at worst, which a 96 MiB pool holds on both backends (the dpdk
  // one keeps 1/32 of it per class for the class objects). At 32 MiB the dpdk pool was
  // sometimes full, depending on how the threads interleaved.
  auto pool = MustCreate(UniqueName("lanes"), 96 * kMiB);
  // Up to 100 KB: every class and the heap; 7 x 40 of them fit in the pool.
  EXPECT_EQ(ChurnOnThreads(
                *pool, 7, [](int) { return kShoaldSlot; }, 40, 1, 100000),
            0);
  EXPECT_TRUE(Empty(*pool));
  EXPECT_TRUE(pool->HeldBy(kShoaldSlot).empty());
}

TEST_P(PoolTest, ThreadsOfOneProcessShareThePoolSafely) {
  auto pool = MustCreate(UniqueName("threads"), 32 * kMiB);
  // A few hot buffers held by slot 0 that every thread retains and releases concurrently.
  std::vector<uint64_t> hot;
  for (int i = 0; i < 4; ++i) {
    auto o = pool->Allocate(4096, kShoaldSlot);
    ASSERT_TRUE(o.ok());
    hot.push_back(*o);
  }
  // Four threads, each its own slot (1-4).
  const int errors = ChurnOnThreads(
      *pool, 4, [](int t) { return static_cast<HolderSlot>(t); }, 50, 0, 69999,
      [&](int t, std::mt19937_64& rng) {
        const uint64_t h = hot[rng() % hot.size()];
        const auto slot = static_cast<HolderSlot>(t);
        return pool->Retain(h, slot).ok() && pool->Release(h, slot).ok() ? 0 : 1;
      });
  EXPECT_EQ(errors, 0);
  for (uint64_t h : hot) {
    EXPECT_EQ(pool->Holders(h), 1u);
    EXPECT_TRUE(pool->Release(h, kShoaldSlot).ok());
  }
  EXPECT_TRUE(Empty(*pool));
}

// Two processes allocate, hand buffers to each other (Transfer, or Retain+Release), verify every
// byte they receive and release, 100k operations each.
struct Handoff {
  uint64_t offset;
  uint64_t seed;
  uint64_t size;
};

class StressWorker {
 public:
  StressWorker(SharedPool* pool, int fd, HolderSlot me, HolderSlot peer, uint64_t seed)
      : pool_(pool), fd_(fd), me_(me), peer_(peer), rng_(seed), next_seed_(seed << 32) {}

  // Returns 0 when every check passed; otherwise the first failure's code.
  int Run(int ops) {
    for (int i = 0; i < ops && error_ == 0; ++i) {
      Drain();
      const int dice = static_cast<int>(rng_() % 100);
      if (dice < 40 || held_.empty()) {
        AllocateOne();
      } else if (dice < 65) {
        ReleaseOne(PickHeld());
      } else if (dice < 90) {
        Handoff h = PickHeld();
        if (!pool_->Transfer(h.offset, me_, peer_).ok()) Fail(10);
        Send(h);
      } else {
        // Shared for a moment, then ours is dropped before the peer hears of it: once the
        // peer has the buffer it may hand it straight back, and a slot holds a buffer once.
        Handoff h = PickHeld();
        if (!pool_->Retain(h.offset, peer_).ok()) Fail(11);
        if (!pool_->Release(h.offset, me_).ok()) Fail(12);
        Send(h);
      }
    }
    Send(Handoff{0, 0, 0});  // done
    while (!peer_done_ && error_ == 0) {
      pollfd p{fd_, POLLIN, 0};
      poll(&p, 1, 1000);
      Drain();
    }
    while (!held_.empty()) ReleaseOne(PickHeld());
    // The run must really have exchanged buffers, not only allocated and released locally.
    if (received_ < static_cast<uint64_t>(ops) / 10) Fail(60);
    return error_;
  }

 private:
  void Fail(int code) {
    if (error_ == 0) error_ = code;
  }

  Handoff PickHeld() {
    size_t i = rng_() % held_.size();
    Handoff h = held_[i];
    held_[i] = held_.back();
    held_.pop_back();
    return h;
  }

  void AllocateOne() {
    // Log-uniform sizes up to 256 KiB, and now and then a large (heap) buffer.
    uint64_t size = (uint64_t{1} << (rng_() % 18)) + rng_() % 1024;
    if (rng_() % 100 == 0) size = kMiB + rng_() % (2 * kMiB);
    auto off = pool_->Allocate(size, me_);
    if (!off.ok()) {
      if (off.status().code() != StatusCode::kResourceExhausted) return Fail(20);
      for (int k = 0; k < 8 && !held_.empty(); ++k) ReleaseOne(PickHeld());
      return;
    }
    auto data = pool_->Data(*off);
    if (data.size() < size) return Fail(21);
    Handoff h{*off, next_seed_++, size};
    FillQuick(data, h);
    held_.push_back(h);
  }

  void ReleaseOne(const Handoff& h) {
    if (!CheckQuick(pool_->Data(h.offset), h)) Fail(30);
    if (!pool_->Release(h.offset, me_).ok()) Fail(31);
  }

  // Whole-buffer pattern in 8-byte words (fast enough for 100k buffers).
  static void FillQuick(std::span<std::byte> data, const Handoff& h) {
    auto* w = reinterpret_cast<uint64_t*>(data.data());
    for (size_t i = 0; i < h.size / 8; ++i) w[i] = h.seed * 0x9e3779b97f4a7c15ULL + i;
  }
  static bool CheckQuick(std::span<const std::byte> data, const Handoff& h) {
    if (data.size() < h.size) return false;
    const auto* w = reinterpret_cast<const uint64_t*>(data.data());
    for (size_t i = 0; i < h.size / 8; ++i) {
      if (w[i] != h.seed * 0x9e3779b97f4a7c15ULL + i) return false;
    }
    return true;
  }

  void Drain() {
    Handoff h{};
    for (;;) {
      ssize_t n = recv(fd_, &h, sizeof h, MSG_DONTWAIT);
      if (n != static_cast<ssize_t>(sizeof h)) {
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) Fail(40);
        if (n == 0) peer_done_ = true;  // peer exited
        return;
      }
      if (h.offset == 0) {
        peer_done_ = true;
        continue;
      }
      if ((pool_->Holders(h.offset) & (uint64_t{1} << me_)) == 0) Fail(41);
      if (!CheckQuick(pool_->Data(h.offset), h)) Fail(42);
      held_.push_back(h);
      ++received_;
    }
  }

  void Send(const Handoff& h) {
    for (;;) {
      ssize_t n = send(fd_, &h, sizeof h, MSG_DONTWAIT);
      if (n == static_cast<ssize_t>(sizeof h)) return;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Fail(50);
      Drain();  // the peer may be blocked sending to us
      pollfd p{fd_, POLLOUT | POLLIN, 0};
      poll(&p, 1, 100);
    }
  }

  SharedPool* pool_;
  int fd_;
  HolderSlot me_, peer_;
  std::mt19937_64 rng_;
  uint64_t next_seed_;
  std::vector<Handoff> held_;
  uint64_t received_ = 0;
  bool peer_done_ = false;
  int error_ = 0;
};

TEST_P(PoolTest, TwoProcessStressEndsEmptyAndUncorrupted) {
  const std::string name = UniqueName("stress");
  auto pool = MustCreate(name, 64 * kMiB);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  const int kOps = 100000;
  pid_t child = ForkAttached(backend(), name, [&](SharedPool& p) -> int {
    // p: the child's own mapping, at another address than the parent's
    close(sv[0]);
    return StressWorker(&p, sv[1], 2, 1, 2).Run(kOps);
  });
  close(sv[1]);
  int parent_rc = StressWorker(pool.get(), sv[0], 1, 2, 1).Run(kOps);
  close(sv[0]);
  EXPECT_EQ(parent_rc, 0);
  EXPECT_EQ(WaitExit(child), 0);
  EXPECT_TRUE(Empty(*pool));
  EXPECT_EQ(pool->ReclaimHolder(1), 0u);
  EXPECT_EQ(pool->ReclaimHolder(2), 0u);
  // The heap is whole again: one buffer of most of the pool fits.
  auto big = pool->Allocate(LargestBuffer(pool->Stats()), kShoaldSlot);
  EXPECT_TRUE(big.ok()) << big.status().ToString();
}

}  // namespace
}  // namespace shoal
