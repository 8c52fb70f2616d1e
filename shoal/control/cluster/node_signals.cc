#include "shoal/control/cluster/node_signals.h"

#include <nlohmann/json.hpp>

#include "shoal/control/cluster/json_field.h"

namespace shoal::cluster {

using json = nlohmann::json;

std::string NodeSignals::ToJson() const {
  return json{{"unix_ms", unix_ms},
              {"interval_s", interval_s},
              {"inflight", inflight},
              {"queued", queued},
              {"ready", ready},
              {"starting", starting},
              {"busy", busy},
              {"idle", idle},
              {"arrivals", arrivals},
              {"completions", completions},
              {"cold_starts", cold_starts},
              {"mean_queue_wait_s", mean_queue_wait_s},
              {"mean_service_s", mean_service_s},
              {"p99_latency_s", p99_latency_s},
              {"cold_start_cost_s", cold_start_cost_s},
              {"tokens_in_flight", tokens_in_flight},
              {"running_sequences", running_sequences},
              {"queued_sequences", queued_sequences}}
      .dump();
}

Result<NodeSignals> NodeSignals::FromJson(const std::string& text) {
  auto parsed = JsonObject(text, "signals");
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  NodeSignals s;
  try {
    s.unix_ms = j.at("unix_ms").get<int64_t>();
    s.interval_s = j.at("interval_s").get<double>();
    s.inflight = j.at("inflight").get<uint32_t>();
    s.queued = j.at("queued").get<uint32_t>();
    s.ready = j.at("ready").get<uint32_t>();
    s.starting = j.at("starting").get<uint32_t>();
    s.busy = j.at("busy").get<uint32_t>();
    s.idle = j.at("idle").get<uint32_t>();
    s.arrivals = j.at("arrivals").get<uint64_t>();
    s.completions = j.at("completions").get<uint64_t>();
    s.cold_starts = j.at("cold_starts").get<uint32_t>();
    s.mean_queue_wait_s = j.at("mean_queue_wait_s").get<double>();
    s.mean_service_s = j.at("mean_service_s").get<double>();
    s.p99_latency_s = j.at("p99_latency_s").get<double>();
    s.cold_start_cost_s = j.at("cold_start_cost_s").get<double>();
    s.tokens_in_flight = j.value("tokens_in_flight", uint64_t{0});
    s.running_sequences = j.value("running_sequences", uint32_t{0});
    s.queued_sequences = j.value("queued_sequences", uint32_t{0});
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("signals: ") + e.what());
  }
  return s;
}

}  // namespace shoal::cluster
