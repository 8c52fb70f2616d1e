#include "shoal/dataplane/channel/dataplane.h"

#include <spdlog/spdlog.h>

#include "shoal/dataplane/channel/sockmap_dataplane.h"
#include "shoal/dataplane/channel/unix_dataplane.h"

namespace shoal {

Result<std::unique_ptr<DataPlane>> CreateDataPlane(const NodeConfig& config) {
  switch (config.dataplane) {
    case DataPlaneMode::kSockmap: {
      auto dp = SockmapDataPlane::Create(config);
      if (!dp.ok()) {
        return Status(dp.status().code(),
                      "dataplane: sockmap was configured but cannot run: " + dp.status().message());
      }
      spdlog::info("data plane: sockmap (configured): {}", (*dp)->Description());
      return std::unique_ptr<DataPlane>(std::move(dp).value());
    }
    case DataPlaneMode::kUnix: {
      auto dp = UnixDataPlane::Create(config, "configured");
      if (!dp.ok()) return dp.status();
      spdlog::info("data plane: unix (configured)");
      return std::unique_ptr<DataPlane>(std::move(dp).value());
    }
    case DataPlaneMode::kAuto:
      break;
  }
  auto sockmap = SockmapDataPlane::Create(config);
  if (sockmap.ok()) {
    spdlog::info("data plane: sockmap (auto): {}", (*sockmap)->Description());
    return std::unique_ptr<DataPlane>(std::move(sockmap).value());
  }
  const std::string why = "BPF unavailable: " + sockmap.status().ToString();
  auto dp = UnixDataPlane::Create(config, why);
  if (!dp.ok()) return dp.status();
  spdlog::warn("data plane: unix (auto fallback), {}", why);
  return std::unique_ptr<DataPlane>(std::move(dp).value());
}

}  // namespace shoal
