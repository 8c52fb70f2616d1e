#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>

#include "pool_requests.h"
#include "shoal/common/payload.h"
#include "shoal/dataplane/pool/shm_pool.h"
#include "shoal/runtime/instance/builtin_module.h"
#include "shoal/runtime/instance/handler.h"
#include "shoal/runtime/node/function_router.h"
#include "shoal/runtime/node/latency_window.h"

namespace shoal {
namespace {

TEST(FunctionRouter, LeastLoadedThenQueueThenHandOff) {
  FunctionRouter r(2);
  EXPECT_EQ(r.Acquire(0, 1).outcome, FunctionRouter::Outcome::kQueued);  // no instance yet
  auto taken = r.AddInstance(10, 2);
  ASSERT_EQ(taken.size(), 1u);  // the waiter gets the new instance
  EXPECT_EQ(taken[0].request_id, 1u);
  EXPECT_EQ(taken[0].instance, 10u);
  r.AddInstance(20, 2);
  auto a = r.Acquire(1, 2);
  EXPECT_EQ(a.outcome, FunctionRouter::Outcome::kAssigned);
  EXPECT_EQ(a.instance, 20u);  // least loaded
  EXPECT_EQ(r.Acquire(0, 3).instance, 10u);
  EXPECT_EQ(r.Acquire(0, 4).instance, 20u);
  // All four slots busy: two may wait, the third is rejected.
  EXPECT_EQ(r.Acquire(0, 5).outcome, FunctionRouter::Outcome::kQueued);
  EXPECT_EQ(r.Acquire(1, 6).outcome, FunctionRouter::Outcome::kQueued);
  EXPECT_EQ(r.Acquire(1, 7).outcome, FunctionRouter::Outcome::kRejected);
  EXPECT_EQ(r.Counts().queued, 2u);
  EXPECT_TRUE(r.CancelWaiter(0, 5));
  EXPECT_FALSE(r.CancelWaiter(0, 5));
  auto next = r.Release(10);  // the slot goes straight to the oldest waiter
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->request_id, 6u);
  EXPECT_EQ(next->loop, 1u);
  EXPECT_EQ(r.Counts().inflight, 4u);
  r.Drain(20);
  EXPECT_FALSE(r.Release(20).has_value());
  EXPECT_EQ(r.Inflight(20), 1u);
  EXPECT_TRUE(r.IdleDraining().empty());
  r.Release(20);
  EXPECT_EQ(r.IdleDraining(), std::vector<uint32_t>{20});
  EXPECT_EQ(r.RemoveInstance(10), 2u);
  auto loads = r.Loads();
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_EQ(loads[0].served, 2u);
}

TEST(FunctionRouter, TakeWaitersEmptiesTheQueue) {
  FunctionRouter r(10);
  r.Acquire(0, 1);
  r.Acquire(1, 2);
  auto w = r.TakeWaiters();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[1].loop, 1u);
  EXPECT_EQ(r.Counts().queued, 0u);
}

TEST(LatencyWindow, QuantilesOverTheLastTenSeconds) {
  LatencyWindow w;
  for (int i = 0; i < 98; ++i) w.Record(100, 1000);  // 1 ms
  w.Record(100, 100000);                             // 100 ms
  w.Record(101, 100000);
  auto s = w.Summarize(101);
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.rps, 10.0);
  EXPECT_NEAR(s.p50_ms, 1.0, 0.2);  // bucket upper bound within 19%
  EXPECT_NEAR(s.p99_ms, 100.0, 20.0);
  EXPECT_EQ(w.Summarize(111).count, 0u);  // aged out
  w.Record(110, 50);                      // reuses second 100's slot: the old counts are gone
  EXPECT_EQ(w.Summarize(110).count, 2u);
}

class PoolBacked : public PoolRequestsTest {
 protected:
  void SetUp() override { MakePool("shoal-rt-test-", 64 << 20); }
};

TEST_F(PoolBacked, EchoAnswersWithTheRequestBufferItself) {
  auto h = CreateBuiltinHandler("echo");
  ASSERT_TRUE(h.ok());
  const uint64_t req = MakeRequest("hello");
  ResponseBuilder rb(*pool_, 1, req);
  ASSERT_TRUE((*h)->Handle(View(req), rb).ok());
  auto fin = rb.Finish();
  ASSERT_TRUE(fin.ok());
  EXPECT_EQ(fin->first, req);  // zero copy
  EXPECT_EQ(Body(fin->first), "hello");
  EXPECT_EQ(ReadPayload(pool_->Data(req)).status, 200);
  EXPECT_TRUE(pool_->Release(req, 1).ok());
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);
}

TEST_F(PoolBacked, Sha256WordcountAndSleep) {
  const uint64_t req = MakeRequest("abc");
  ResponseBuilder rb(*pool_, 1, req);
  ASSERT_TRUE((*CreateBuiltinHandler("sha256"))->Handle(View(req), rb).ok());
  auto fin = rb.Finish();
  ASSERT_TRUE(fin.ok());
  EXPECT_EQ(Body(fin->first), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n");
  EXPECT_TRUE(pool_->Release(fin->first, 1).ok());
  EXPECT_EQ(pool_->Stats().live_buffers, 0u);  // the request buffer was released by Finish

  const uint64_t req2 = MakeRequest("a b\nc");
  ResponseBuilder rb2(*pool_, 1, req2);
  ASSERT_TRUE((*CreateBuiltinHandler("wordcount"))->Handle(View(req2), rb2).ok());
  auto fin2 = rb2.Finish();
  EXPECT_EQ(Body(fin2->first), "{\"bytes\":5,\"words\":3,\"lines\":1}\n");
  EXPECT_EQ(ReadPayload(pool_->Data(fin2->first)).content_type, "application/json");
  (void)pool_->Release(fin2->first, 1);

  const uint64_t req3 = MakeRequest("nope");
  ResponseBuilder rb3(*pool_, 1, req3);
  Status st = (*CreateBuiltinHandler("sleep"))->Handle(View(req3), rb3);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  (void)pool_->Release(req3, 1);
  EXPECT_FALSE(CreateBuiltinHandler("nonesuch").ok());
}

TEST_F(PoolBacked, LibraryHandlerThroughTheCAbi) {
  auto h = LoadLibraryHandler(SHOAL_LIB_DIR "/shoal/handlers/libshoal-reverse.so", "shoal_handle");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_FALSE((*h)->MayBlock());  // the library exports shoal_may_block() == 0
  EXPECT_TRUE((*CreateBuiltinHandler("sleep"))->MayBlock());
  EXPECT_FALSE((*CreateBuiltinHandler("echo"))->MayBlock());
  const uint64_t req = MakeRequest("abc");
  ResponseBuilder rb(*pool_, 1, req);
  ASSERT_TRUE((*h)->Handle(View(req), rb).ok());
  auto fin = rb.Finish();
  EXPECT_EQ(Body(fin->first), "cba");
  (void)pool_->Release(fin->first, 1);
  auto missing = LoadLibraryHandler(SHOAL_LIB_DIR "/shoal/handlers/libshoal-reverse.so", "nope");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no symbol 'nope'"), std::string::npos);
}

// spec.aggregation.device reaches the leaf as SHOAL_FL_AGG_DEVICE: auto, cpu and gpu make a
// leaf (gpu without a device folds on the CPU and says so in the log); anything else is refused.
TEST_F(PoolBacked, FlLeafAggregationDeviceSwitch) {
  for (const char* d : {"auto", "cpu", "gpu", ""}) {
    setenv("SHOAL_FL_AGG_DEVICE", d, 1);
    auto h = CreateBuiltinHandler("fl-leaf");
    ASSERT_TRUE(h.ok()) << d << ": " << h.status().ToString();
    // Pins the pool where a GPU is usable (in the background), a no-op decision elsewhere.
    (*h)->OnPoolAttached(pool_->base(), pool_->mapped_size());
    EXPECT_FALSE((*h)->MayBlock());
  }
  setenv("SHOAL_FL_AGG_DEVICE", "tpu", 1);
  auto bad = CreateBuiltinHandler("fl-leaf");
  unsetenv("SHOAL_FL_AGG_DEVICE");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'tpu'"), std::string::npos) << bad.status().message();
}

// An instance maps only what its handler kind needs: shoal-fn itself links none of the heavy
// libraries of the inference handler and the FL leaf (they come with their modules).
TEST(BuiltinModules, ShoalFnLinksNoHeavyLibrary) {
  const std::string fn = BuiltinModuleDir() + "/../../../bin/shoal-fn";
  // The dynamic loader's own listing (what ldd prints) of what shoal-fn would map.
  FILE* p = popen(("env -i LD_TRACE_LOADED_OBJECTS=1 " + fn).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  ASSERT_NE(out.find("libc.so.6"), std::string::npos) << out;
  for (const char* heavy : {"libdnnl", "libcurl", "libprotobuf", "libonnx", "libgomp", "libOpenCL",
                            "libgnutls", "libkrb5", "libldap", "libcudart"}) {
    EXPECT_EQ(out.find(heavy), std::string::npos) << heavy << " in\n" << out;
  }
  // Counted without the sanitizer runtimes of an instrumented build. An optimised build maps
  // 10 objects; an unoptimised one 14 (its out-of-line helpers reach libbpf and yaml-cpp). The
  // single binary before the modules mapped 43.
  size_t libs = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(".so") == std::string::npos) continue;
    if (line.find("libasan") != std::string::npos || line.find("libubsan") != std::string::npos ||
        line.find("liblsan") != std::string::npos || line.find("libtsan") != std::string::npos) {
      continue;
    }
    ++libs;
  }
  EXPECT_LE(libs, 14u) << out;
}

TEST(BuiltinModules, AMissingModuleIsNamed) {
  auto h = LoadBuiltinModule("nonesuch");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(h.status().message().find("built-in handler 'nonesuch': cannot load " +
                                      BuiltinModuleDir() + "/libshoal-builtin-nonesuch.so"),
            std::string::npos)
      << h.status().message();
}

}  // namespace
}  // namespace shoal
