// QuantizeInt8 (lm_weights.h): per-row symmetric int8 linears.
#include <algorithm>
#include <cmath>

#include "shoal/serving/lm/lm_weights.h"

namespace shoal::lm {

std::shared_ptr<const LmWeights> QuantizeInt8(const LmWeights& w) {
  const LmConfig& c = w.config;
  auto out = std::make_shared<LmWeights>();
  out->config = c;
  size_t floats = 0;
  size_t q_bytes = 0;
  const auto D = static_cast<size_t>(c.d_model);
  floats += static_cast<size_t>(c.vocab_size) * D + static_cast<size_t>(c.n_ctx) * D + 2 * D;
  for (int l = 0; l < kLinears; ++l) {
    const auto o = static_cast<size_t>(LinearOut(c, static_cast<Linear>(l)));
    const auto i = static_cast<size_t>(LinearIn(c, static_cast<Linear>(l)));
    floats += static_cast<size_t>(c.n_layer) * (2 * o);  // bias + scale per row
    q_bytes += static_cast<size_t>(c.n_layer) * o * i;
  }
  floats += static_cast<size_t>(c.n_layer) * 4 * D;  // the LayerNorms
  out->storage.reserve(floats);                      // pointers into it stay valid: no reallocation
  out->q_storage.reserve(q_bytes);
  auto copy = [&](const float* src, size_t n) {
    const size_t at = out->storage.size();
    out->storage.insert(out->storage.end(), src, src + n);
    return out->storage.data() + at;
  };
  out->wte = copy(w.wte, static_cast<size_t>(c.vocab_size) * D);
  out->wpe = copy(w.wpe, static_cast<size_t>(c.n_ctx) * D);
  out->lnf_w = copy(w.lnf_w, D);
  out->lnf_b = copy(w.lnf_b, D);
  out->layers.resize(w.layers.size());
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& from = w.layers[i];
    LayerWeights& to = out->layers[i];
    to.ln1_w = copy(from.ln1_w, D);
    to.ln1_b = copy(from.ln1_b, D);
    to.ln2_w = copy(from.ln2_w, D);
    to.ln2_b = copy(from.ln2_b, D);
    for (int l = 0; l < kLinears; ++l) {
      const auto rows = static_cast<size_t>(LinearOut(c, static_cast<Linear>(l)));
      const auto cols = static_cast<size_t>(LinearIn(c, static_cast<Linear>(l)));
      to.w[l] = nullptr;
      to.b[l] = copy(from.b[l], rows);
      const size_t scale_at = out->storage.size();
      const size_t q_at = out->q_storage.size();
      for (size_t r = 0; r < rows; ++r) {
        const float* row = from.w[l] + r * cols;
        float m = 0;
        for (size_t k = 0; k < cols; ++k) m = std::max(m, std::fabs(row[k]));
        const float scale = m > 0 ? m / 127.0f : 1.0f;
        out->storage.push_back(scale);
        for (size_t k = 0; k < cols; ++k) {
          out->q_storage.push_back(static_cast<int8_t>(std::lround(row[k] / scale)));
        }
      }
      to.scale[l] = out->storage.data() + scale_at;
      to.q[l] = out->q_storage.data() + q_at;
    }
  }
  return out;
}

}  // namespace shoal::lm
