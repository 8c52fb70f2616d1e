#include "shoal/serving/lm/lm_forward.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace shoal::lm {
namespace {

constexpr int kRowsPerThread = 512;  // tokens in a step per OpenMP thread

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

// y[rows, n] += x[rows, k] (q[n, k] * scale[n])^T: int8 weights dequantized in the dot product
// (each weight row read once per step, a quarter of fp32's bytes).
void MatMulInt8Wt(const float* x, const int8_t* q, const float* scale, float* y, int rows, int n,
                  int k) {
#pragma omp parallel for schedule(static) if (rows >= 2 * kRowsPerThread)
  for (int o = 0; o < n; ++o) {
    const int8_t* w = q + static_cast<size_t>(o) * k;
    for (int r = 0; r < rows; ++r) {
      const float* xr = x + static_cast<size_t>(r) * k;
      float acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int i = 0; i < k; ++i) acc += xr[i] * static_cast<float>(w[i]);
      y[static_cast<size_t>(r) * n + o] += scale[o] * acc;
    }
  }
}

float GeluTanh(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  // tanh(y) = 1 - 2 / (e^{2y} + 1): one expf (glibc's FMA path) instead of tanhf's expm1f; for
  // |y| > 9 e^{2y} overflows to inf or underflows to 0, giving exactly +-1 as tanhf does.
  const float y = kC * (x + 0.044715f * x * x * x);
  const float t = 1.0f - 2.0f / (std::exp(2.0f * y) + 1.0f);
  return 0.5f * x * (1.0f + t);
}

}  // namespace

KvCache::KvCache(const LmConfig& c)
    : stride_(static_cast<size_t>(c.d_model)),
      n_ctx_(static_cast<size_t>(c.n_ctx)),
      data_(static_cast<size_t>(c.n_layer) * n_ctx_ * 2 * stride_) {}

LmForward::LmForward(std::shared_ptr<const LmWeights> weights, int max_threads)
    : w_(std::move(weights)), max_threads_(max_threads > 0 ? max_threads : omp_get_max_threads()) {}

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
  if (L.q[l] != nullptr) {
    MatMulInt8Wt(x, L.q[l], L.scale[l], y, rows, out, in);
  } else {
    MatMulWt(x, L.w[l], y, rows, out, in, 1.0f, true);
  }
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
  // Per token, all heads at once: each cached key and value row is read once, front to back
  // (head by head it was read n_head times in pieces of dh floats, and the step was bound by it).
  const int n = static_cast<int>(items.size());
  const int heads = c.n_head;
#pragma omp parallel for schedule(dynamic, 2) if (n >= 8)
  for (int t = 0; t < n; ++t) {
    const Item& it = items[static_cast<size_t>(t)];
    const size_t len = static_cast<size_t>(it.pos) + 1;
    const float* q = qkv_.data() + static_cast<size_t>(it.row) * 3 * d;
    float* o = att_.data() + static_cast<size_t>(it.row) * d;
    thread_local std::vector<float> p;
    p.resize(static_cast<size_t>(heads) * len);
    for (size_t j = 0; j < len; ++j) {
      const float* k = it.cache->k(layer, static_cast<int>(j));
      for (int h = 0; h < heads; ++h) {
        const float* qh = q + h * dh;
        const float* kh = k + h * dh;
        float dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int i = 0; i < dh; ++i) dot += qh[i] * kh[i];
        p[static_cast<size_t>(h) * len + j] = dot * scale;
      }
    }
    for (int h = 0; h < heads; ++h) {
      float* ph = p.data() + static_cast<size_t>(h) * len;
      float m = -INFINITY;
      for (size_t j = 0; j < len; ++j) m = std::max(m, ph[j]);
      float sum = 0;
      for (size_t j = 0; j < len; ++j) {
        ph[j] = std::exp(ph[j] - m);
        sum += ph[j];
      }
      for (size_t j = 0; j < len; ++j) ph[j] /= sum;
    }
    std::fill(o, o + d, 0.0f);
    for (size_t j = 0; j < len; ++j) {
      const float* v = it.cache->v(layer, static_cast<int>(j));
      for (int h = 0; h < heads; ++h) {
        const float pj = p[static_cast<size_t>(h) * len + j];
        float* oh = o + h * dh;
        const float* vh = v + h * dh;
#pragma omp simd
        for (int i = 0; i < dh; ++i) oh[i] += pj * vh[i];
      }
    }
  }
}

void LmForward::Step(std::span<const StepInput> inputs) {
  const LmConfig& c = w_->config;
  const int d = c.d_model;
  int rows = 0;
  for (const StepInput& s : inputs) rows += static_cast<int>(s.tokens.size());
  if (rows == 0) return;
  // Threads only for steps with the rows to share: a decode step of a few sequences is a
  // few GEMVs of microseconds, where a second thread costs more at each barrier than it saves
  // (on a busy 2-core VM a step of 1 sequence took 75 ms with 2 threads, 2 ms with 1).
  omp_set_num_threads(std::clamp(rows / kRowsPerThread, 1, max_threads_));
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
