// shoal-fn: one function instance. Started by shoald with its data-plane socket as fd 3 and
// its identity in SHOAL_* environment variables; not meant to be started by hand. With
// SHOAL_ZYGOTE=1 it is its function's zygote instead (zygote_server.h): it loads the handler,
// attaches the pool, then forks instances on shoald's request over fd 5.
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "shoal/common/log.h"
#include "shoal/pool/pool_backend.h"
#include "shoal/runtime/function_instance.h"
#include "shoal/runtime/zygote_protocol.h"
#include "shoal/runtime/zygote_server.h"

using namespace shoal;

namespace {

Result<std::unique_ptr<Handler>> MakeHandler(const std::string& spec) {
  if (spec.rfind("builtin:", 0) == 0) return CreateBuiltinHandler(spec.substr(8));
  if (spec.rfind("library:", 0) == 0) {
    const std::string rest = spec.substr(8);
    const auto colon = rest.rfind(':');
    if (colon == std::string::npos) return InvalidArgument("SHOAL_HANDLER: library:<path>:<symbol>");
    return LoadLibraryHandler(rest.substr(0, colon), rest.substr(colon + 1));
  }
  return InvalidArgument("SHOAL_HANDLER must start with builtin: or library:, got '" + spec + "'");
}

// SHOAL_POOL_POPULATE=1 (shoald pre-faulted the pool) and a handler that reads whole buffers:
// this process's page-table entries for the whole pool, installed once beside the event loop
// (0.1-0.2 s per GiB of 4 KiB pages), so that reading an update in the pool costs no fault (11.4k
// 4 KiB pages for 46.8 MB otherwise). After the zygote's fork: a fork copies no entries of a
// shared mapping, and a zygote starts no thread.
std::thread PopulateBeside(SharedPool& pool, const Handler& handler) {
  const char* env = std::getenv("SHOAL_POOL_POPULATE");
  if (env == nullptr || std::string(env) != "1" || !handler.PopulatesPool()) return {};
  return std::thread([&pool] {
    const auto t0 = std::chrono::steady_clock::now();
    if (Status st = PopulatePoolMapping(pool); !st.ok()) {
      spdlog::warn("pool: touching it faults page by page: {}", st.ToString());
      return;
    }
    spdlog::info(
        "pool: mapping populated: {} MiB in {:.0f} ms (pool_prefault)", pool.mapped_size() >> 20,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  });
}

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
  std::thread populate = PopulateBeside(**pool, **handler);
  if (Status st = (*handler)->OnInstanceStart(); !st.ok()) {
    spdlog::error("cannot start handler {}: {}", options->handler, st.ToString());
    if (populate.joinable()) populate.join();
    return 1;
  }
  auto channel = OpenChannel(options->fd, *kind, options->node);
  FunctionInstance instance(*options, **pool, std::move(channel), std::move(*handler));
  const int rc = instance.Run();
  if (populate.joinable()) populate.join();
  return rc;
}
