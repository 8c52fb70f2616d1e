#include "shoal/fl/flower/gateway_updates.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "shoal/fl/client/fl_http_client.h"

namespace shoal::flower {

std::function<Status(const std::string& job, std::string_view body)> GatewayUpdatePoster(
    std::string listen_host, const std::atomic<uint16_t>& port, auth::TokenStore* tokens) {
  struct Tokens {
    std::mutex mu;
    std::map<std::string, std::string> by_job;
  };
  auto cache = std::make_shared<Tokens>();
  const bool any = listen_host.empty() || listen_host == "0.0.0.0" || listen_host == "::";
  const std::string host = any ? "127.0.0.1" : listen_host;
  return [host, &port, tokens, cache](const std::string& job, std::string_view body) -> Status {
    std::string bearer;
    if (tokens != nullptr) {
      std::lock_guard lock(cache->mu);
      auto it = cache->by_job.find(job);
      if (it == cache->by_job.end()) {
        auto t = tokens->Create({"flower:" + job, auth::Role::kFlClient, "", job},
                                /*ephemeral=*/true);
        if (!t.ok()) return t.status();
        it = cache->by_job.emplace(job, t->token).first;
      }
      bearer = it->second;
    }
    if (port.load() == 0) return Unavailable("the gateway is not listening yet");
    client::FlHttpClient http("http://" + host + ":" + std::to_string(port.load()), job, bearer);
    // A full pool or queue is worth a few tries (the reply is not lost for a busy moment).
    Status st;
    for (int attempt = 0; attempt < 5; ++attempt) {
      st = http.PostUpdate(body);
      if (st.ok() || !client::IsRetryable(st)) return st;
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::max<uint32_t>(50, http.retry_after_ms())));
    }
    return st;
  };
}

}  // namespace shoal::flower
