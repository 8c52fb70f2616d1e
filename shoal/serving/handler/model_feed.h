// Where an inference instance that serves an FL job gets the job's model: the newest version
// (with the job's status document, which names the architecture) and a version's weights as
// safetensors. The inference handler sees only this; MakeFlModelFeed fetches them from the
// gateway that started the instance (shoal/serving/handler/fl_model_feed.cc, the one place the
// instance side uses the FL client).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shoal/common/status.h"

namespace shoal {

class ModelFeed {
 public:
  struct Newest {
    uint64_t version = 0;
    std::string status_json;  // the job's status document
  };
  struct Weights {
    uint64_t version = 0;
    std::string safetensors;
  };
  virtual ~ModelFeed() = default;
  virtual Result<Newest> NewestVersion() = 0;
  virtual Result<Weights> FetchWeights(uint64_t version) = 0;
};

// FL job `job`'s models from the gateway at `gateway` (host:port).
std::unique_ptr<ModelFeed> MakeFlModelFeed(std::string gateway, std::string job);

}  // namespace shoal
