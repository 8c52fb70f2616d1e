#include "shoal/serving/lm/lm_forward.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace shoal::lm {
namespace {

void LayerNorm(const float* x, const float* w, const float* b, float* y, int rows, int d) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * d;
    float* yr = y + static_cast<size_t>(r) * d;
    float mean = 0;
    for (int i = 0; i < d; ++i) mean += xr[i];
    mean /= static_cast<float>(d);
    float var = 0;
    for (int i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<float>(d);
    const float inv = 1.0f / std::sqrt(var + 1e-5f);
    for (int i = 0; i < d; ++i) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
  }
}

// y[rows, n] = x[rows, k] W[n, k]^T (+ y when accumulate).
void MatMulWt(const float* x, const float* w, float* y, int rows, int n, int k, float alpha,
              bool accumulate) {
  if (rows == 0) return;
  dnnl_sgemm('N', 'T', rows, n, k, alpha, x, k, w, k, accumulate ? 1.0f : 0.0f, y, n);
}

float GeluTanh(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(kC * (x + 0.044715f * x * x * x)));
}

}  // namespace

KvCache::KvCache(const LmConfig& c)
    : stride_(static_cast<size_t>(c.d_model)),
      n_ctx_(static_cast<size_t>(c.n_ctx)),
      data_(static_cast<size_t>(c.n_layer) * n_ctx_ * 2 * stride_) {}

LmForward::LmForward(std::shared_ptr<const LmWeights> weights) : w_(std::move(weights)) {}

void LmForward::Linear(int layer, lm::Linear which, const float* x, float* y, int rows,
                       std::span<const StepInput> inputs) {
  const LmConfig& c = w_->config;
  const LayerWeights& L = w_->layers[static_cast<size_t>(layer)];
  const int l = static_cast<int>(which);
  const int out = LinearOut(c, which);
  const int in = LinearIn(c, which);
  for (int r = 0; r < rows; ++r) {
    std::memcpy(y + static_cast<size_t>(r) * out, L.b[l], sizeof(float) * out);
  }
  MatMulWt(x, L.w[l], y, rows, out, in, 1.0f, true);
  // Each sequence's adapter: y += scale * (x A^T) B^T over its own rows.
  int row = 0;
  for (const StepInput& s : inputs) {
    const int n = static_cast<int>(s.tokens.size());
    if (s.adapter != nullptr) {
      const LoraPair& p = s.adapter->layers[static_cast<size_t>(layer)][static_cast<size_t>(l)];
      if (p.rank > 0) {
        lora_.resize(static_cast<size_t>(n) * p.rank);
        const float* xs = x + static_cast<size_t>(row) * in;
        MatMulWt(xs, p.a.data(), lora_.data(), n, p.rank, in, 1.0f, false);
        MatMulWt(lora_.data(), p.b.data(), y + static_cast<size_t>(row) * out, n, out, p.rank,
                 s.adapter->scale, true);
      }
    }
    row += n;
  }
}

void LmForward::Attention(int layer, std::span<const StepInput> inputs) {
  const LmConfig& c = w_->config;
  const int d = c.d_model;
  const int dh = c.head_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  // Keys and values of the step's tokens go to their caches first.
  int row = 0;
  for (const StepInput& s : inputs) {
    for (size_t t = 0; t < s.tokens.size(); ++t, ++row) {
      const float* q = qkv_.data() + static_cast<size_t>(row) * 3 * d;
      const int pos = s.cache->length + static_cast<int>(t);
      std::memcpy(s.cache->k(layer, pos), q + d, sizeof(float) * d);
      std::memcpy(s.cache->v(layer, pos), q + 2 * d, sizeof(float) * d);
    }
  }
  struct Item {
    KvCache* cache;
    int row;
    int pos;
  };
  std::vector<Item> items;
  items.reserve(static_cast<size_t>(row));
  row = 0;
  for (const StepInput& s : inputs) {
    for (size_t t = 0; t < s.tokens.size(); ++t, ++row) {
      items.push_back({s.cache, row, s.cache->length + static_cast<int>(t)});
    }
  }
  const int work = static_cast<int>(items.size()) * c.n_head;
#pragma omp parallel for schedule(dynamic, 4) if (work > 64)
  for (int wi = 0; wi < work; ++wi) {
    const Item& it = items[static_cast<size_t>(wi / c.n_head)];
    const int h = wi % c.n_head;
    const float* q = qkv_.data() + static_cast<size_t>(it.row) * 3 * d + h * dh;
    float* o = att_.data() + static_cast<size_t>(it.row) * d + h * dh;
    thread_local std::vector<float> p;
    p.resize(static_cast<size_t>(it.pos) + 1);
    float m = -INFINITY;
    for (int j = 0; j <= it.pos; ++j) {
      const float* k = it.cache->k(layer, j) + h * dh;
      float dot = 0;
      for (int i = 0; i < dh; ++i) dot += q[i] * k[i];
      p[static_cast<size_t>(j)] = dot * scale;
      m = std::max(m, p[static_cast<size_t>(j)]);
    }
    float sum = 0;
    for (int j = 0; j <= it.pos; ++j) {
      p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - m);
      sum += p[static_cast<size_t>(j)];
    }
    std::fill(o, o + dh, 0.0f);
    for (int j = 0; j <= it.pos; ++j) {
      const float* v = it.cache->v(layer, j) + h * dh;
      const float pj = p[static_cast<size_t>(j)] / sum;
      for (int i = 0; i < dh; ++i) o[i] += pj * v[i];
    }
  }
}

void LmForward::Step(std::span<const StepInput> inputs) {
  const LmConfig& c = w_->config;
  const int d = c.d_model;
  int rows = 0;
  for (const StepInput& s : inputs) rows += static_cast<int>(s.tokens.size());
  if (rows == 0) return;
  const auto R = static_cast<size_t>(rows);
  const auto D = static_cast<size_t>(d);
  x_.resize(R * D);
  h_.resize(R * D);
  qkv_.resize(R * 3 * D);
  att_.resize(R * D);
  fc_.resize(R * 4 * D);
  int row = 0;
  for (const StepInput& s : inputs) {
    for (size_t t = 0; t < s.tokens.size(); ++t, ++row) {
      const int pos = s.cache->length + static_cast<int>(t);
      const float* te = w_->wte + static_cast<size_t>(s.tokens[t]) * D;
      const float* pe = w_->wpe + static_cast<size_t>(pos) * D;
      float* x = x_.data() + static_cast<size_t>(row) * D;
      for (int i = 0; i < d; ++i) x[i] = te[i] + pe[i];
    }
  }
  for (int layer = 0; layer < c.n_layer; ++layer) {
    const LayerWeights& L = w_->layers[static_cast<size_t>(layer)];
    LayerNorm(x_.data(), L.ln1_w, L.ln1_b, h_.data(), rows, d);
    Linear(layer, lm::Linear::kQkv, h_.data(), qkv_.data(), rows, inputs);
    Attention(layer, inputs);
    Linear(layer, lm::Linear::kProj, att_.data(), h_.data(), rows, inputs);
    for (size_t i = 0; i < R * D; ++i) x_[i] += h_[i];
    LayerNorm(x_.data(), L.ln2_w, L.ln2_b, h_.data(), rows, d);
    Linear(layer, lm::Linear::kFc, h_.data(), fc_.data(), rows, inputs);
    for (float& v : fc_) v = GeluTanh(v);
    Linear(layer, lm::Linear::kMlpProj, fc_.data(), h_.data(), rows, inputs);
    for (size_t i = 0; i < R * D; ++i) x_[i] += h_[i];
  }
  // Only each sequence's last token needs logits.
  last_.resize(inputs.size() * D);
  row = 0;
  for (size_t s = 0; s < inputs.size(); ++s) {
    row += static_cast<int>(inputs[s].tokens.size());
    LayerNorm(x_.data() + static_cast<size_t>(row - 1) * D, w_->lnf_w, w_->lnf_b,
              last_.data() + s * D, 1, d);
  }
  thread_local std::vector<float> logits;
  logits.resize(inputs.size() * static_cast<size_t>(c.vocab_size));
  MatMulWt(last_.data(), w_->wte, logits.data(), static_cast<int>(inputs.size()), c.vocab_size, d,
           1.0f, false);
  for (size_t s = 0; s < inputs.size(); ++s) {
    std::memcpy(inputs[s].logits, logits.data() + s * static_cast<size_t>(c.vocab_size),
                sizeof(float) * static_cast<size_t>(c.vocab_size));
    inputs[s].cache->length += static_cast<int>(inputs[s].tokens.size());
  }
}

}  // namespace shoal::lm
