// The update the round benches send: one encoded update of the model, split into its header
// (each client's prefix is built from it with its own id, token and base version:
// update_sender.h's UpdatePrefix) and its tensor area (the bytes every client's update shares).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "shoal/fl/wire/architectures.h"
#include "shoal/fl/wire/update_format.h"
#include "shoal/v1/fl.pb.h"
#include "update_sender.h"

namespace shoal::bench {

struct UpdateTemplate {
  v1::UpdateHeader header;
  std::vector<std::byte> area;
};

// `m` encoded as float32 for job "round" (client c0, one sample), then split.
inline UpdateTemplate MakeUpdateTemplate(const model::Model& m) {
  model::UpdateMeta meta;
  meta.job = "round";
  meta.client_id = "c0";
  meta.token = "x";
  meta.num_samples = 1;
  auto body = model::EncodeUpdate(meta, m, model::DType::kF32);
  UpdateTemplate t;
  uint32_t hlen;
  std::memcpy(&hlen, body->data() + 4, 4);
  t.header.ParseFromArray(body->data() + 8, static_cast<int>(hlen));
  t.area.assign(body->begin() + static_cast<ptrdiff_t>(model::TensorAreaOffset(hlen)), body->end());
  return t;
}

// One round's client prefixes (update_sender.h's UpdatePrefix): the template header with the
// job, client k's id and token (ids[k]), 100 + k samples and base version `round`.
inline std::vector<std::string> RoundPrefixes(
    const v1::UpdateHeader& header, const std::string& job,
    const std::vector<std::pair<std::string, std::string>>& ids, int round) {
  std::vector<std::string> prefixes;
  for (size_t k = 0; k < ids.size(); ++k) {
    v1::UpdateHeader h = header;
    h.set_job(job);
    h.set_client_id(ids[k].first);
    h.set_token(ids[k].second);
    h.set_num_samples(100 + k);
    h.set_base_version(round);
    prefixes.push_back(UpdatePrefix(h.SerializeAsString()));
  }
  return prefixes;
}

}  // namespace shoal::bench
