// shoald's `pool: boost|dpdk|auto` against the node's real hugepages: a shortage at start makes
// `pool: dpdk` refuse (naming the pages needed and free) and `pool: auto` fall back to Boost
// with the reason in the log and on /metrics; with the pages there, auto takes DPDK.
//
// The shortage is real, not simulated: the pool is made one 2 MiB page larger than every
// hugepage the node has reserved, so no other test's pages can make it fit.
#include "shoal/dataplane/pool/pool_backend.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "shoal/dataplane/pool/hugepages.h"
#include "tests/support/hugepages_for_test.h"
#include "tests/support/shoald_fixture.h"

namespace shoal::testing {
namespace {

// The /metrics line of shoal_pool_backend for `tenant` ("" when there is none).
std::string BackendSeries(uint16_t port, const std::string& tenant) {
  std::istringstream lines(Http(port, "GET", "/metrics").body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("shoal_pool_backend{", 0) == 0 &&
        line.find("tenant=\"" + tenant + "\"") != std::string::npos) {
      return line;
    }
  }
  return {};
}

class PoolBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DpdkPoolBuilt()) GTEST_SKIP() << "pool backend dpdk is not built (no libdpdk-dev)";
    auto dir = HugetlbfsDir();
    if (!dir.ok()) GTEST_SKIP() << "no hugetlbfs: " << dir.status().message();
    auto counts = ReadHugepageCounts();
    if (!counts.ok()) GTEST_SKIP() << counts.status().message();
    total_ = counts->total;
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- shoald log ----\n" << shoald_.Log();
  }
  // shoald on backend `pool` with a pool of ShortPoolBytes() and 16 MiB bodies.
  Shoald::Options ShortPool(const std::string& pool) const {
    Shoald::Options o;
    o.pool = pool;
    o.pool_bytes = ShortPoolBytes();
    o.max_body_bytes = 16ull << 20;
    return o;
  }
  // A pool that needs one page more than the node has reserved (and at least 64 MiB).
  uint64_t ShortPoolBytes() const { return std::max<uint64_t>(total_ + 1, 32) * kHugepageBytes; }
  // Deploys `echo` in the default tenant (its pool is made on first use) and checks a request.
  void DeployEcho() {
    auto d = shoald_.Deploy(
        "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: echo\n"
        "spec:\n  handler:\n    builtin: echo\n");
    ASSERT_EQ(d.exit_code, 0) << d.err;
    auto r = Http(shoald_.port(), "POST", "/fn/echo", "through the pool");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "through the pool");
  }
  uint64_t total_ = 0;
  Shoald shoald_;
};

TEST_F(PoolBackendTest, DpdkWithTooFewHugepagesRefusesToStartNamingNeededAndFree) {
  const Shoald::Options o = ShortPool("dpdk");
  const uint64_t need = o.pool_bytes / kHugepageBytes;
  EXPECT_FALSE(shoald_.Start(o)) << "shoald started on pool: dpdk without the hugepages";
  const std::string log = shoald_.Log();
  // "<free> free 2 MiB hugepages (of <total>) are fewer than one tenant pool of <MiB> MiB
  // needs (<need>)": the free count is whatever the node has now, the rest is fixed.
  EXPECT_NE(log.find("instance manager: UNAVAILABLE: pool: dpdk: "), std::string::npos) << log;
  EXPECT_NE(log.find(" free 2 MiB hugepages (of "), std::string::npos) << log;
  EXPECT_NE(log.find(" are fewer than one tenant pool of " + std::to_string(o.pool_bytes >> 20) +
                     " MiB needs (" + std::to_string(need) +
                     "); reserve them in /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("shoald ready on"), std::string::npos);
}

TEST_F(PoolBackendTest, AutoWithTooFewHugepagesFallsBackToBoostAndSaysWhy) {
  const Shoald::Options o = ShortPool("auto");
  const uint64_t need = o.pool_bytes / kHugepageBytes;
  ASSERT_TRUE(shoald_.Start(o)) << shoald_.Log();
  const std::string why = "auto: not dpdk because ";
  const std::string tail = " are fewer than one tenant pool of " +
                           std::to_string(o.pool_bytes >> 20) + " MiB needs (" +
                           std::to_string(need) + ")";
  const std::string log = shoald_.Log();
  EXPECT_NE(log.find("pool: backend boost (" + why), std::string::npos) << log;
  EXPECT_NE(log.find(tail), std::string::npos) << log;
  DeployEcho();
  EXPECT_NE(shoald_.Log().find("pool: created boost /dev/shm/shoal." + shoald_.node() + ".default"),
            std::string::npos);
  struct stat st {};
  EXPECT_EQ(stat(("/dev/shm/shoal." + shoald_.node() + ".default").c_str(), &st), 0);
  const std::string series = BackendSeries(shoald_.port(), "default");
  EXPECT_NE(series.find("backend=\"boost\""), std::string::npos) << series;
  EXPECT_NE(series.find("reason=\"" + why), std::string::npos) << series;
  EXPECT_NE(series.find(tail), std::string::npos) << series;
  EXPECT_EQ(series.substr(series.rfind(' ') + 1), "1") << series;
  EXPECT_EQ(shoald_.Metric("shoal_pool_backend", "backend=\"dpdk\""), 0);
}

TEST_F(PoolBackendTest, AutoWithTheHugepagesTakesDpdkAndSaysSo) {
  Shoald::Options o;
  o.pool = "auto";
  o.pool_bytes = 64ull << 20;
  o.max_body_bytes = 16ull << 20;
  if (auto why = ShortOfHugepages(HugepagesFor(o.pool_bytes), "pool: auto taking dpdk");
      !why.empty()) {
    GTEST_SKIP() << why;
  }
  ASSERT_TRUE(shoald_.Start(o)) << shoald_.Log();
  EXPECT_NE(shoald_.Log().find("pool: backend dpdk (auto: hugepages configured: "),
            std::string::npos);
  DeployEcho();
  const std::string file = HugetlbfsDir().value() + "/shoal." + shoald_.node() + ".default";
  EXPECT_NE(shoald_.Log().find("pool: created dpdk " + file), std::string::npos);
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0) << file;
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string series = BackendSeries(shoald_.port(), "default");
  EXPECT_NE(series.find("backend=\"dpdk\""), std::string::npos) << series;
  EXPECT_NE(series.find("reason=\"auto: hugepages configured: "), std::string::npos) << series;
  EXPECT_NE(series.find(", 32 per tenant pool\""), std::string::npos) << series;
  EXPECT_EQ(shoald_.Metric("shoal_pool_backend", "backend=\"boost\""), 0);
}

// Writes nr_hugepages (root); false when the kernel refuses.
bool SetHugepages(uint64_t pages) {
  std::ofstream out(std::string(kHugepagesSysfs) + "/nr_hugepages");
  out << pages;
  out.flush();
  return static_cast<bool>(out);
}

TEST_F(PoolBackendTest, RestartTakesItsPoolOverOnThePagesItHoldsWithNoneFree) {
  Shoald::Options o;
  o.pool = "dpdk";
  o.pool_bytes = 64ull << 20;
  o.max_body_bytes = 16ull << 20;
  if (auto why = ShortOfHugepages(HugepagesFor(o.pool_bytes), "pool: dpdk"); !why.empty()) {
    GTEST_SKIP() << why;
  }
  ASSERT_TRUE(shoald_.Start(o)) << shoald_.Log();
  DeployEcho();
  shoald_.Stop(SIGKILL);  // leaves the pool's file, and its 32 pages, in hugetlbfs
  // Give back every free page: only the killed shoald's pool holds any now.
  auto before = ReadHugepageCounts();
  ASSERT_TRUE(before.ok());
  if (!SetHugepages(before->total - before->free)) GTEST_SKIP() << "cannot write nr_hugepages";
  struct Restore {
    uint64_t pages;
    ~Restore() { SetHugepages(pages); }
  } restore{before->total};
  auto now = ReadHugepageCounts();
  ASSERT_TRUE(now.ok());
  ASSERT_EQ(now->free, 0u);
  ASSERT_TRUE(shoald_.Start(o)) << shoald_.Log();
  const std::string log = shoald_.Log();
  EXPECT_NE(log.find("pool: backend dpdk (configured (pool: dpdk): 0 free 2 MiB hugepages + 32 "
                     "held by this node's pools to take over"),
            std::string::npos)
      << log;
  auto r = Http(shoald_.port(), "POST", "/fn/echo", "after the restart");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "after the restart");
  EXPECT_NE(shoald_.Log().find("pool: recovered dpdk " + HugetlbfsDir().value() + "/shoal." +
                               shoald_.node() + ".default"),
            std::string::npos);
}

}  // namespace
}  // namespace shoal::testing
