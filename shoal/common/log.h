// Logging: spdlog with one format for every Shoal process, so logs from shoald and its
// instances interleave readably.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace shoal {

// Sets the process-wide logger: `component` shows in every line ("shoald", "shoal-fn[echo/2]").
// `level` is one of trace, debug, info, warn, error.
void InitLogging(std::string_view component, std::string_view level = "info");

}  // namespace shoal
