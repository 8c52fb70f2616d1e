// The client side of secure aggregation (SecAgg+, spec.privacy.secureAggregation) for
// shoal-client: the protocol and the bytes of the Python SDK's shoal_fl/secagg.py, on the
// server's own primitives (shoal/fl/secagg: X25519, HKDF-SHA256, AES-128-CTR masks, AES-128-GCM
// sealed shares, Shamir over GF(2^61 - 1)), so C++ and Python clients take part in one round and
// open each other's shares. One round, per client:
//  1. advertise two fresh X25519 public keys (c seals the shares, s agrees the pairwise masks)
//     and SHA-256 of a fresh 16-byte self-mask seed b;
//  2. seal Shamir shares of s's private key and of b for each neighbour of the round's graph;
//  3. send y = q(x) + PRG(b) + sum over the neighbours that shared of +-PRG(s_ij) as a U32
//     update through the normal update route;
//  4. send, for each neighbour that shared, the share of its b if it survived, of its s key if
//     it dropped.
// No key or seed outlives its round; nothing here logs a secret.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/client/fl_http_client.h"
#include "shoal/fl/secagg/crypto.h"
#include "shoal/fl/wire/model_spec.h"
#include "shoal/fl/wire/update_format.h"

namespace shoal::client {

// A job's spec.privacy.secureAggregation as its status document shows it.
struct SecAggParams {
  uint32_t threshold = 0;
  double clip_range = 1.0;
  uint32_t bits = 16;
};

// The job's secure-aggregation parameters from its status document (GET /v1/jobs/{job}):
// nullopt when the job has none; kInvalidArgument when the section is malformed.
Result<std::optional<SecAggParams>> SecAggParamsOf(std::string_view status_json);

class SecAggClient {
 public:
  // `stopped` is asked while a stage is awaited: true ends the wait (kUnavailable, "stopped").
  // `stage_timeout_s`: how long one stage may take before the round is given up
  // (kDeadlineExceeded).
  SecAggClient(FlHttpClient& http, std::string client_id, std::string token, SecAggParams params,
               std::function<bool()> stopped = {}, double stage_timeout_s = 120);

  // One whole round around `update` (the trained values in spec order; meta's client fields
  // are this client's): Advertise, Share, Mask, PostMasked, Unmask. The protocol round's id.
  Result<uint64_t> RunRound(const model::UpdateMeta& meta, const model::Model& update);

  // The steps, for callers that stop between them (a test's dropouts).
  Result<uint64_t> Advertise();  // fresh keys; retries while the previous round still closes
  Status Share();                // waits for the share stage
  // Waits for the input stage; the quantized and masked input (Z_{2^32}, values' order).
  Result<std::vector<uint32_t>> Mask(std::span<const float> values);
  Status PostMasked(const model::UpdateMeta& meta, const model::ModelSpec& spec,
                    std::span<const uint32_t> masked);
  Status Unmask();  // waits for the unmask stage; nothing to send if the round ended first

  uint64_t round() const { return round_; }

 private:
  struct Neighbour {
    std::string id;
    uint32_t index = 0;
    secagg::Key32 c_pk{}, s_pk{};
  };
  // The round's state once its stage is one of `stages` (kUnavailable with the server's
  // reason if the round failed, kDeadlineExceeded after stage_timeout_s).
  Result<std::string> WaitStage(std::initializer_list<std::string_view> stages);
  Status ParseNeighbours(std::string_view state_json);
  Result<secagg::Seed> ShareKey(const Neighbour& n) const;

  FlHttpClient& http_;
  std::string client_id_, token_;
  SecAggParams params_;
  std::function<bool()> stopped_;
  double stage_timeout_s_;

  uint64_t round_ = 0;
  uint32_t index_ = 0;
  secagg::KeyPair c_{}, s_{};
  secagg::Seed b_{};
  std::vector<Neighbour> neighbours_;
};

}  // namespace shoal::client
