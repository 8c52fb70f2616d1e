#include "shoal/fl/client/fl_http_client.h"
#include "shoal/serving/handler/model_feed.h"

namespace shoal {
namespace {

class FlModelFeed final : public ModelFeed {
 public:
  FlModelFeed(std::string gateway, std::string job) : http_(std::move(gateway), std::move(job)) {}

  Result<Newest> NewestVersion() override {
    auto status = http_.JobStatus();
    if (!status.ok()) return status.status();
    return Newest{status->version, std::move(status->json)};
  }
  Result<Weights> FetchWeights(uint64_t version) override {
    auto bytes = http_.Model(version);
    if (!bytes.ok()) return bytes.status();
    return Weights{bytes->version, std::move(bytes->bytes)};
  }

 private:
  client::FlHttpClient http_;
};

}  // namespace

std::unique_ptr<ModelFeed> MakeFlModelFeed(std::string gateway, std::string job) {
  return std::make_unique<FlModelFeed>(std::move(gateway), std::move(job));
}

}  // namespace shoal
