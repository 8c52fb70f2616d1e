// Arrival streams for the simulator: Poisson, diurnal, bursty (BurstGPT-like), Zipf over many
// functions, timers, FL rounds, and replayed traces (per-invocation CSV, Azure Functions 2019
// per-minute counts). Sources are pulled lazily so long runs need no arrival array.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"

namespace shoal {

struct Arrival {
  double t = 0;           // seconds from the start of the run
  uint32_t function = 0;  // index into the simulator's function list
  double service_s = -1;  // handler time; negative: sample the function's service distribution
};

// Yields arrivals in non-decreasing time order.
class ArrivalSource {
 public:
  virtual ~ArrivalSource() = default;
  virtual bool Next(Arrival& out) = 0;
};

// Rate `rate_per_s` until `duration_s`.
std::unique_ptr<ArrivalSource> MakePoisson(uint32_t function, double rate_per_s, double duration_s,
                                           uint64_t seed);
// Rate mean * (1 + amplitude * sin(2 pi t / period + phase)), amplitude in [0, 1] (thinning).
std::unique_ptr<ArrivalSource> MakeDiurnal(uint32_t function, double mean_rate_per_s,
                                           double amplitude, double period_s, double duration_s,
                                           uint64_t seed, double phase = 0);
// BurstGPT-like: gamma inter-arrivals with mean 1/rate whose shape is redrawn log-uniformly
// from [shape_min, shape_max] every `shift_every_s` (shape < 1: bursty, 1: Poisson, > 1: smooth).
std::unique_ptr<ArrivalSource> MakeBursty(uint32_t function, double mean_rate_per_s,
                                          double shape_min, double shape_max, double shift_every_s,
                                          double duration_s, uint64_t seed);
// Poisson at `total_rate_per_s` over functions [first, first + n), function k (0-based rank)
// with probability proportional to 1 / (k + 1)^exponent.
std::unique_ptr<ArrivalSource> MakeZipf(uint32_t first_function, uint32_t n, double exponent,
                                        double total_rate_per_s, double duration_s, uint64_t seed);
// One invocation every `period_s` (plus uniform jitter in [0, jitter_s)), starting at `phase_s`.
std::unique_ptr<ArrivalSource> MakeTimer(uint32_t function, double period_s, double jitter_s,
                                         double duration_s, double phase_s = 0, uint64_t seed = 0);
// FL rounds: every `round_period_s`, `clients` updates spread uniformly over `spread_s`.
std::unique_ptr<ArrivalSource> MakeFlRounds(uint32_t function, uint32_t clients,
                                            double round_period_s, double spread_s, uint32_t rounds,
                                            uint64_t seed);
// Merges several sources in time order (ties to the earlier source in the list).
std::unique_ptr<ArrivalSource> Merge(std::vector<std::unique_ptr<ArrivalSource>> sources);
// Replays a fixed list (sorted here if it is not).
std::unique_ptr<ArrivalSource> FromVector(std::vector<Arrival> arrivals);
// Drains a source into a list (for tests and small workloads).
std::vector<Arrival> Collect(ArrivalSource& source);

struct Trace {
  std::vector<std::string> functions;  // index = Arrival::function
  std::vector<std::string> triggers;   // per function; empty where the format has none
  std::vector<Arrival> arrivals;       // sorted by time
};

// `timestamp,function,duration` with that header; timestamp and duration in seconds, an empty
// duration means "sample the function's distribution". Errors name the line.
Result<Trace> ParseInvocationCsv(std::string_view text);
// Azure Functions 2019 invocation counts: `HashOwner,HashApp,HashFunction,Trigger,1,...,1440`
// (any number of minute columns); minute m's count is spread uniformly over
// [60 (m - 1), 60 m). Rows with the same HashFunction are one function.
Result<Trace> ParseAzureFunctionsCounts(std::string_view text, uint64_t seed);
// Reads a file and picks the parser by its header line.
Result<Trace> ReadTraceFile(const std::string& path, uint64_t seed);

}  // namespace shoal
