// shoal-fn: one function instance. Started by shoald with its data-plane socket as fd 3 and
// its identity in SHOAL_* environment variables; not meant to be started by hand. With
// SHOAL_ZYGOTE=1 it is its function's zygote instead (zygote_server.h): it loads the handler,
// attaches the pool, then forks instances on shoald's request over fd 5.
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "shoal/common/log.h"
#include "shoal/dataplane/pool/pool_backend.h"
#include "shoal/runtime/instance/function_instance.h"
#include "shoal/runtime/instance/zygote_protocol.h"
#include "shoal/runtime/instance/zygote_server.h"

using namespace shoal;

namespace {

Result<std::unique_ptr<Handler>> MakeHandler(const std::string& spec) {
  if (spec.rfind("builtin:", 0) == 0) return CreateBuiltinHandler(spec.substr(8));
  if (spec.rfind("library:", 0) == 0) {
    const std::string rest = spec.substr(8);
    const auto colon = rest.rfind(':');
    if (colon == std::string::npos)
      return InvalidArgument("SHOAL_HANDLER: library:<path>:<symbol>");
    return LoadLibraryHandler(rest.substr(0, colon), rest.substr(colon + 1));
  }
  return InvalidArgument("SHOAL_HANDLER must start with builtin: or library:, got '" + spec + "'");
}

// A handler that reads whole buffers (the FL leaf) installs this process's page-table entries
// for the pool's allocated pages beside its event loop, so that reading an update or writing a
// partial sum costs no fault (a fork copies no entries of a shared mapping: 11.4k 4 KiB pages,
// ~714 fault-around faults, per 46.8 MB update otherwise). SHOAL_POOL_POPULATE=1 (shoald
// pre-faulted the pool): the whole mapping, once. Otherwise it follows shoald's warm-ahead
// (pool_warm_bytes): whenever the pool's warm end moves (a futex in the pool wakes it), the pages
// up to it, which are allocated already, so this commits no memory. After the zygote's fork: a
// zygote starts no thread.
class PoolFollower {
 public:
  PoolFollower(SharedPool& pool, const Handler& handler) : pool_(pool) {
    if (!handler.PopulatesPool()) return;
    const char* env = std::getenv("SHOAL_POOL_POPULATE");
    if (env != nullptr && std::string(env) == "1") {
      thread_ = std::thread([this] { PopulateWhole(); });
    } else {
      thread_ = std::thread([this] { Follow(); });
    }
  }
  ~PoolFollower() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    pool_.WakeWarmFollowers();
    thread_.join();
  }
  PoolFollower(const PoolFollower&) = delete;
  PoolFollower& operator=(const PoolFollower&) = delete;

 private:
  void PopulateWhole() {
    const auto t0 = std::chrono::steady_clock::now();
    if (Status st = PopulatePoolMapping(pool_); !st.ok()) {
      spdlog::warn("pool: touching it faults page by page: {}", st.ToString());
      return;
    }
    spdlog::info("pool: mapping populated: {} MiB in {:.0f} ms (pool_prefault)",
                 pool_.mapped_size() >> 20, MsSince(t0));
  }

  void Follow() {
    constexpr uint64_t kChunk = uint64_t{4} << 20;  // the mapping's lock is held per call
    uint64_t done = 0;
    bool logged = false;
    while (!stop_.load()) {
      const SharedPool::WarmMark mark = pool_.Warm();
      if (mark.end > done) {
        const auto t0 = std::chrono::steady_clock::now();
        for (uint64_t at = done; at < mark.end && !stop_.load(); at += kChunk) {
          const uint64_t len = std::min(kChunk, mark.end - at);
          if (Status st = PopulatePoolRange(pool_, at, len); !st.ok()) {
            spdlog::warn("pool: not following the warm-ahead (touching it faults page by page): {}",
                         st.ToString());
            return;
          }
        }
        spdlog::log(logged ? spdlog::level::debug : spdlog::level::info,
                    "pool: warm pages mapped: {} MiB (to {} MiB) in {:.0f} ms (pool_warm_bytes)",
                    (mark.end - done) >> 20, mark.end >> 20, MsSince(t0));
        logged = true;
        done = mark.end;
      }
      if (done >= pool_.mapped_size()) return;
      pool_.WaitWarm(mark.seq);
    }
  }

  static double MsSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  SharedPool& pool_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int main() {
  // Die with shoald: an orphaned instance would hold pool slots nobody reclaims.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  auto options = InstanceOptions::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "shoal-fn: %s\n", options.status().message().c_str());
    return 2;
  }
  const char* zygote_env = std::getenv("SHOAL_ZYGOTE");
  const bool zygote = zygote_env != nullptr && std::string(zygote_env) == "1";
  InitLogging("shoal-fn[" + options->function + "/" +
                  (zygote ? std::string("zygote") : std::to_string(options->endpoint)) + "]",
              std::getenv("SHOAL_LOG_LEVEL") ? std::getenv("SHOAL_LOG_LEVEL") : "info");
  if (getppid() == 1) return 1;  // shoald already gone
  auto fail = [&](const std::string& why) {
    spdlog::error("{}", why);
    if (zygote) ReportZygoteFailure(kZygoteControlFd, why);
    return 1;
  };

  auto kind = ParseDataPlaneKind(options->dataplane);
  if (!kind.ok()) return fail(kind.status().ToString());
  // shoald names the backend it created the tenant's pool with.
  const char* backend_name = std::getenv("SHOAL_POOL_BACKEND");
  auto backend = ParsePoolBackend(backend_name != nullptr ? backend_name : "boost");
  if (!backend.ok()) return fail("SHOAL_POOL_BACKEND: " + backend.status().ToString());
  auto pool = AttachPool(*backend, options->pool);
  if (!pool.ok()) {
    return fail("cannot attach pool " + options->pool + ": " + pool.status().ToString());
  }
  auto handler = MakeHandler(options->handler);
  if (!handler.ok()) {
    return fail("cannot load handler " + options->handler + ": " + handler.status().ToString());
  }
  (*handler)->OnPoolAttached((*pool)->base(), (*pool)->mapped_size());
  if (zygote) {
    // Everything above is shared by the instances forked from here; each child goes on below.
    auto child = ServeAsZygote(kZygoteControlFd, &*options);
    if (!child.ok()) return 1;
    if (!*child) return 0;
  }
  auto follower = std::make_unique<PoolFollower>(**pool, **handler);
  if (Status st = (*handler)->OnInstanceStart(); !st.ok()) {
    spdlog::error("cannot start handler {}: {}", options->handler, st.ToString());
    return 1;
  }
  auto channel = OpenChannel(options->fd, *kind, options->node);
  FunctionInstance instance(*options, **pool, std::move(channel), std::move(*handler));
  const int rc = instance.Run();
  follower.reset();
  return rc;
}
