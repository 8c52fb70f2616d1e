#include "shoal/common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace shoal {

void InitLogging(std::string_view component, std::string_view level) {
  auto logger = spdlog::stderr_color_mt(std::string(component));
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%n %P] %v");
  logger->set_level(spdlog::level::from_str(std::string(level)));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace shoal
