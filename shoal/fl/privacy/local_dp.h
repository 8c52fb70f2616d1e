// Local differential privacy on the client (shoal-client --local-dp-clip/--local-dp-noise; the
// Python SDK's shoal_fl.LocalDP does the same): the update's change from the global model it was
// trained from, d = w_k - w, is scaled to L2 norm at most `clip` (over all tensors together) and
// N(0, (noise_multiplier * clip)^2) is added to each coordinate; the client sends w + d'. Each
// update sent is then one Gaussian mechanism of sensitivity `clip` on this client's data.
#pragma once

#include <span>

#include "shoal/common/status.h"
#include "shoal/fl/privacy/gaussian_noise.h"

namespace shoal::privacy {

struct LocalDpOptions {
  double clip = 0;              // C > 0
  double noise_multiplier = 0;  // sigma >= 0
};

// kInvalidArgument naming the field unless clip is finite and > 0 and noise_multiplier finite
// and >= 0 (`flag_prefix` names them: "--local-dp-" gives "--local-dp-clip").
Status CheckLocalDp(const LocalDpOptions& o, std::string_view flag_prefix);

// `trained` (the client's model, float32) becomes the privatized update against `global`; the
// norm of the change before clipping. kInvalidArgument when the sizes differ.
Result<double> PrivatizeUpdate(std::span<const float> global, std::span<float> trained,
                               const LocalDpOptions& o, GaussianNoise& noise);

}  // namespace shoal::privacy
