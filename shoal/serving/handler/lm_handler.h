// The `inference` built-in serving a shoal-gpt language model (spec.inference.source.lm): the
// native decoder (shoal/serving/lm) behind OpenAI-compatible routes. Chosen by
// CreateInferenceHandler when SHOAL_INFER_LM_BASE is set.
#pragma once

#include <memory>

#include "shoal/common/status.h"
#include "shoal/runtime/instance/handler.h"

namespace shoal {

Result<std::unique_ptr<Handler>> CreateLmHandler();

}  // namespace shoal
