// How a Flower reply's arrays reach the job's pool: as an SHU1 update POSTed to this node's own
// gateway (/v1/jobs/{job}/updates on loopback), which reads the body straight into the job's
// shared-memory pool and hands it to a leaf, as for any client's update. Each job's updates carry
// an ephemeral fl-client token of that job (memory only, gone with this shoald).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "shoal/common/status.h"
#include "shoal/security/auth/token_store.h"

namespace shoal::flower {

// The gateway listens on `listen_host` (any address: reached on 127.0.0.1) and `port` (read at
// each call: known once the gateway started). `tokens` may be null (updates go without one).
std::function<Status(const std::string& job, std::string_view body)> GatewayUpdatePoster(
    std::string listen_host, const std::atomic<uint16_t>& port, auth::TokenStore* tokens);

}  // namespace shoal::flower
