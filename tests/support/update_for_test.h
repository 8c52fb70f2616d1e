// An FL update's body (SHU1, float32) as a client sends it, for the tests that stand in for FL
// clients: the unit tests of the coordinator and the integration tests against shoald.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shoal/fl/wire/update_format.h"

namespace shoal::testing {

// `values` (a model of `spec`) as the body of an update of `job` from `client_id` (with its
// `token`), trained from `base_version` on `num_samples` samples in `local_steps` steps (0: not
// said); empty, and a failure, if it cannot be encoded.
inline std::string UpdateBody(const model::ModelSpec& spec, std::vector<float> values,
                              const std::string& job, const std::string& client_id,
                              const std::string& token, uint64_t base_version, uint64_t num_samples,
                              uint32_t local_steps = 0) {
  model::Model m(spec);
  m.values = std::move(values);
  const model::UpdateMeta meta{job,         client_id,   token, base_version,
                               num_samples, local_steps, 0.0,   model::UpdateKind::kWeights};
  auto body = model::EncodeUpdate(meta, m, model::DType::kF32);
  EXPECT_TRUE(body.ok()) << body.status().ToString();
  return body.ok() ? std::string(reinterpret_cast<const char*>(body->data()), body->size())
                   : std::string();
}

}  // namespace shoal::testing
