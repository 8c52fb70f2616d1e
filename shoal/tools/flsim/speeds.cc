#include "shoal/tools/flsim/speeds.h"

#include <cmath>
#include <random>
#include <sstream>
#include <vector>

#include "shoal/fl/client/spec_number.h"

namespace shoal::client {
namespace {

// Splits "a,b" into its comma-separated parts.
std::vector<std::string_view> SplitArgs(std::string_view s) {
  std::vector<std::string_view> out;
  if (s.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string_view::npos ? s.npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

Result<SpeedSpec> ParseSpeedSpec(std::string_view spec) {
  const auto [kind, arg, has_arg, where] = internal::SplitSpec(spec, "speeds");
  const auto args = SplitArgs(arg);
  std::vector<double> values;
  for (size_t i = 0; i < args.size(); ++i) {
    auto v = internal::ParseDouble(args[i]);
    if (!v || !std::isfinite(*v) || *v < 0) {
      return InvalidArgument(where + "argument " + std::to_string(i + 1) + " \"" +
                             std::string(args[i]) + "\" is not a non-negative number");
    }
    values.push_back(*v);
  }
  auto want = [&](size_t lo, size_t hi, const char* usage) -> Status {
    if (values.size() < lo || values.size() > hi) {
      return InvalidArgument(where + "want " + usage);
    }
    return Status::Ok();
  };
  SpeedSpec s;
  if (kind == "uniform") {
    SHOAL_RETURN_IF_ERROR(want(0, 2, "uniform or uniform:<lo>,<hi> (seconds per step)"));
    if (values.size() == 1) return InvalidArgument(where + "uniform needs both <lo>,<hi>");
    s.kind = SpeedSpec::Kind::kUniform;
    if (values.size() == 2) {
      if (values[0] <= 0 || values[1] < values[0]) {
        return InvalidArgument(where + "want 0 < lo <= hi");
      }
      s.a = values[0];
      s.b = values[1];
    }
  } else if (kind == "lognormal") {
    SHOAL_RETURN_IF_ERROR(want(1, 2, "lognormal:<sigma>[,<median seconds per step>]"));
    s.kind = SpeedSpec::Kind::kLognormal;
    s.a = values[0];
    if (values.size() == 2) {
      if (values[1] <= 0) return InvalidArgument(where + "the median must be > 0");
      s.b = values[1];
    }
  } else if (kind == "exponential") {
    SHOAL_RETURN_IF_ERROR(want(1, 1, "exponential:<mean seconds per step>"));
    if (values[0] <= 0) return InvalidArgument(where + "the mean must be > 0");
    s.kind = SpeedSpec::Kind::kExponential;
    s.a = values[0];
  } else if (kind == "normal") {
    SHOAL_RETURN_IF_ERROR(want(2, 2, "normal:<mean>,<sd> (seconds per step)"));
    if (values[0] <= 0) return InvalidArgument(where + "the mean must be > 0");
    s.kind = SpeedSpec::Kind::kNormal;
    s.a = values[0];
    s.b = values[1];
  } else {
    return InvalidArgument(where + "unknown distribution \"" + std::string(kind) +
                           "\" (want uniform, lognormal, exponential or normal)");
  }
  return s;
}

std::string ToString(const SpeedSpec& spec) {
  std::ostringstream os;
  switch (spec.kind) {
    case SpeedSpec::Kind::kUniform:
      os << "uniform:" << spec.a << ',' << spec.b;
      break;
    case SpeedSpec::Kind::kLognormal:
      os << "lognormal:" << spec.a << ',' << spec.b;
      break;
    case SpeedSpec::Kind::kExponential:
      os << "exponential:" << spec.a;
      break;
    case SpeedSpec::Kind::kNormal:
      os << "normal:" << spec.a << ',' << spec.b;
      break;
  }
  return os.str();
}

std::vector<double> SampleStepSeconds(const SpeedSpec& spec, int num_clients, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> out(size_t(std::max(0, num_clients)));
  switch (spec.kind) {
    case SpeedSpec::Kind::kUniform: {
      std::uniform_real_distribution<double> d(spec.a, spec.b);
      for (double& v : out) v = spec.a == spec.b ? spec.a : d(rng);
      break;
    }
    case SpeedSpec::Kind::kLognormal: {
      // median * exp(N(0, sigma)): sigma 1.0 puts a tenth of clients 3.6x slower than the median.
      std::normal_distribution<double> d(0.0, spec.a);
      for (double& v : out) v = spec.b * std::exp(d(rng));
      break;
    }
    case SpeedSpec::Kind::kExponential: {
      std::exponential_distribution<double> d(1.0 / spec.a);
      // Clamped like the normal case: an exponential draw can be arbitrarily close to 0.
      for (double& v : out) v = std::max(d(rng), kMinStepFraction * spec.a);
      break;
    }
    case SpeedSpec::Kind::kNormal: {
      std::normal_distribution<double> d(spec.a, spec.b);
      for (double& v : out) v = std::max(d(rng), kMinStepFraction * spec.a);
      break;
    }
  }
  return out;
}

}  // namespace shoal::client
