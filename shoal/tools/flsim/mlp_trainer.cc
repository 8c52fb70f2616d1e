#include "shoal/tools/flsim/mlp_trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace shoal::client {
namespace {

// The two big products (fc1 forward, fc1 weight gradient) are compiled for AVX-512, AVX2 and
// baseline x86-64 and picked at load time, so the library runs anywhere and uses the widest
// vectors the machine has.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_ADDRESS__)
#define SHOAL_VECTOR_KERNEL \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SHOAL_VECTOR_KERNEL
#endif

// <a, b> over n floats; inlined into each caller (and each of a kernel's target clones).
__attribute__((always_inline)) inline float Dot(const float* a, const float* b, size_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// hidden[b, j] = relu(b1[j] + <W1[j, :], x[b, :]>) for a block of batch rows. Four rows of x
// and two rows of W1 at a time: each loaded vector feeds several multiply-adds, and the 8
// partial sums stay in registers (the `omp simd` reduction vectorises them without
// -ffast-math).
SHOAL_VECTOR_KERNEL
void Fc1Forward(const float* __restrict w1, const float* __restrict b1, const float* __restrict x,
                int batch, int inputs, int hidden, float* __restrict out) {
  const size_t d = size_t(inputs);
  int b = 0;
  for (; b + 4 <= batch; b += 4) {
    const float* x0 = x + size_t(b) * d;
    const float* x1 = x0 + d;
    const float* x2 = x1 + d;
    const float* x3 = x2 + d;
    int j = 0;
    for (; j + 2 <= hidden; j += 2) {
      const float* wa = w1 + size_t(j) * d;
      const float* wb = wa + d;
      float a0 = 0, a1 = 0, a2 = 0, a3 = 0, c0 = 0, c1 = 0, c2 = 0, c3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3, c0, c1, c2, c3)
      for (size_t i = 0; i < d; ++i) {
        const float va = wa[i], vb = wb[i];
        const float v0 = x0[i], v1 = x1[i], v2 = x2[i], v3 = x3[i];
        a0 += va * v0;
        a1 += va * v1;
        a2 += va * v2;
        a3 += va * v3;
        c0 += vb * v0;
        c1 += vb * v1;
        c2 += vb * v2;
        c3 += vb * v3;
      }
      const size_t h = size_t(hidden);
      float* o = out + size_t(b) * h + size_t(j);
      o[0] = std::max(0.0F, a0 + b1[j]);
      o[h] = std::max(0.0F, a1 + b1[j]);
      o[2 * h] = std::max(0.0F, a2 + b1[j]);
      o[3 * h] = std::max(0.0F, a3 + b1[j]);
      o[1] = std::max(0.0F, c0 + b1[j + 1]);
      o[h + 1] = std::max(0.0F, c1 + b1[j + 1]);
      o[2 * h + 1] = std::max(0.0F, c2 + b1[j + 1]);
      o[3 * h + 1] = std::max(0.0F, c3 + b1[j + 1]);
    }
    for (; j < hidden; ++j) {
      const float* wa = w1 + size_t(j) * d;
      for (int r = 0; r < 4; ++r) {
        const float* xr = x0 + size_t(r) * d;
        const float s = Dot(wa, xr, d);
        out[size_t(b + r) * size_t(hidden) + size_t(j)] = std::max(0.0F, s + b1[j]);
      }
    }
  }
  for (; b < batch; ++b) {
    const float* xr = x + size_t(b) * d;
    for (int j = 0; j < hidden; ++j) {
      const float* wa = w1 + size_t(j) * d;
      const float s = Dot(wa, xr, d);
      out[size_t(b) * size_t(hidden) + size_t(j)] = std::max(0.0F, s + b1[j]);
    }
  }
}

// gW1[j, :] = sum_b dh[b, j] * x[b, :], skipping the rows whose unit was inactive (ReLU):
// about half of them, so half the work.
SHOAL_VECTOR_KERNEL
void Fc1WeightGradient(const float* __restrict dh, const float* __restrict x, int batch, int inputs,
                       int hidden, float* __restrict gw1) {
  const size_t d = size_t(inputs);
  // Reused per unit: the batch rows that contribute and their coefficients.
  constexpr int kMaxBlock = 4;
  for (int j = 0; j < hidden; ++j) {
    float* __restrict g = gw1 + size_t(j) * d;
    std::fill(g, g + d, 0.0F);
    const float* rows[kMaxBlock];
    float coef[kMaxBlock];
    int n = 0;
    auto flush = [&]() {
      if (n == 4) {
        const float *x0 = rows[0], *x1 = rows[1], *x2 = rows[2], *x3 = rows[3];
        const float k0 = coef[0], k1 = coef[1], k2 = coef[2], k3 = coef[3];
#pragma omp simd
        for (size_t i = 0; i < d; ++i) g[i] += k0 * x0[i] + k1 * x1[i] + k2 * x2[i] + k3 * x3[i];
      } else {
        for (int r = 0; r < n; ++r) {
          const float* xr = rows[r];
          const float k = coef[r];
#pragma omp simd
          for (size_t i = 0; i < d; ++i) g[i] += k * xr[i];
        }
      }
      n = 0;
    };
    for (int b = 0; b < batch; ++b) {
      const float c = dh[size_t(b) * size_t(hidden) + size_t(j)];
      if (c == 0.0F) continue;
      rows[n] = x + size_t(b) * d;
      coef[n] = c;
      if (++n == kMaxBlock) flush();
    }
    flush();
  }
}

// logits[b, c] = b2[c] + <W2[c, :], hidden[b, :]>.
void Fc2Forward(const float* __restrict w2, const float* __restrict b2,
                const float* __restrict hidden_act, int batch, int hidden, int classes,
                float* __restrict logits) {
  const size_t h = size_t(hidden);
  for (int b = 0; b < batch; ++b) {
    const float* hr = hidden_act + size_t(b) * h;
    for (int c = 0; c < classes; ++c) {
      const float* w = w2 + size_t(c) * h;
      logits[size_t(b) * size_t(classes) + size_t(c)] = Dot(w, hr, h) + b2[c];
    }
  }
}

// Turns logits into dLoss/dlogits = (softmax - onehot) * scale in place; returns the summed
// cross-entropy (double: a sum over many samples).
double SoftmaxCrossEntropy(float* logits, const uint8_t* y, int batch, int classes, float scale) {
  double loss = 0;
  for (int b = 0; b < batch; ++b) {
    float* z = logits + size_t(b) * size_t(classes);
    const float m = *std::max_element(z, z + classes);
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(double(z[c] - m));
    const double log_sum = std::log(sum);
    loss += log_sum - double(z[y[b]] - m);
    for (int c = 0; c < classes; ++c) {
      const double p = std::exp(double(z[c] - m) - log_sum);
      z[c] = float(p - (c == y[b] ? 1.0 : 0.0)) * scale;
    }
  }
  return loss;
}

}  // namespace

std::vector<TensorSlice> MlpTensorLayout(const MlpShape& s) {
  return {
      {"fc1.weight",
       {s.hidden, s.inputs},
       s.Fc1WeightOffset(),
       size_t(s.hidden) * size_t(s.inputs)},
      {"fc1.bias", {s.hidden}, s.Fc1BiasOffset(), size_t(s.hidden)},
      {"fc2.weight",
       {s.classes, s.hidden},
       s.Fc2WeightOffset(),
       size_t(s.classes) * size_t(s.hidden)},
      {"fc2.bias", {s.classes}, s.Fc2BiasOffset(), size_t(s.classes)},
  };
}

std::vector<float> InitMlpParams(const MlpShape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> p(s.NumParams());
  auto fill = [&](size_t offset, size_t n, int fan_in) {
    const float bound = 1.0F / std::sqrt(float(fan_in));
    std::uniform_real_distribution<float> u(-bound, bound);
    for (size_t i = 0; i < n; ++i) p[offset + i] = u(rng);
  };
  for (const auto& t : MlpTensorLayout(s)) {
    const int fan_in = t.name.starts_with("fc1") ? s.inputs : s.hidden;
    fill(t.offset, t.size, fan_in);
  }
  return p;
}

void ForwardBatch(const MlpShape& s, std::span<const float> params, const float* x, int batch,
                  float* hidden, float* logits) {
  const float* p = params.data();
  Fc1Forward(p + s.Fc1WeightOffset(), p + s.Fc1BiasOffset(), x, batch, s.inputs, s.hidden, hidden);
  Fc2Forward(p + s.Fc2WeightOffset(), p + s.Fc2BiasOffset(), hidden, batch, s.hidden, s.classes,
             logits);
}

MlpTrainer::MlpTrainer(MlpShape shape, SgdOptions options, uint64_t seed)
    : shape_(shape), options_(options), rng_(seed) {
  grad_.resize(shape_.NumParams());
}

void MlpTrainer::EnsureScratch(int batch) {
  const auto b = size_t(batch);
  if (hidden_.size() < b * size_t(shape_.hidden)) {
    batch_x_.resize(b * size_t(shape_.inputs));
    batch_y_.resize(b);
    hidden_.resize(b * size_t(shape_.hidden));
    dhidden_.resize(b * size_t(shape_.hidden));
    dlogits_.resize(b * size_t(shape_.classes));
  }
}

double MlpTrainer::LossAndGradient(std::span<const float> params, const float* x, const uint8_t* y,
                                   int batch, std::span<float> grad) {
  const MlpShape& s = shape_;
  EnsureScratch(batch);
  const size_t h = size_t(s.hidden), nc = size_t(s.classes);
  ForwardBatch(s, params, x, batch, hidden_.data(), dlogits_.data());
  const double loss =
      SoftmaxCrossEntropy(dlogits_.data(), y, batch, s.classes, 1.0F / float(batch));

  const float* w2 = params.data() + s.Fc2WeightOffset();
  float* gw2 = grad.data() + s.Fc2WeightOffset();
  float* gb2 = grad.data() + s.Fc2BiasOffset();
  float* gb1 = grad.data() + s.Fc1BiasOffset();
  std::fill(gw2, gw2 + nc * h, 0.0F);
  std::fill(gb2, gb2 + nc, 0.0F);
  std::fill(gb1, gb1 + h, 0.0F);
  for (int b = 0; b < batch; ++b) {
    const float* dl = dlogits_.data() + size_t(b) * nc;
    const float* hr = hidden_.data() + size_t(b) * h;
    float* dh = dhidden_.data() + size_t(b) * h;
    std::fill(dh, dh + h, 0.0F);
    for (size_t c = 0; c < nc; ++c) {
      const float k = dl[c];
      gb2[c] += k;
      float* __restrict g = gw2 + c * h;
      const float* __restrict w = w2 + c * h;
#pragma omp simd
      for (size_t j = 0; j < h; ++j) {
        g[j] += k * hr[j];
        dh[j] += k * w[j];
      }
    }
    // ReLU: no gradient through inactive units.
#pragma omp simd
    for (size_t j = 0; j < h; ++j) {
      dh[j] = hr[j] > 0.0F ? dh[j] : 0.0F;
      gb1[j] += dh[j];
    }
  }
  Fc1WeightGradient(dhidden_.data(), x, batch, s.inputs, s.hidden,
                    grad.data() + s.Fc1WeightOffset());
  return loss / batch;
}

Result<TrainStats> MlpTrainer::Train(std::span<float> params, const Dataset& data,
                                     std::span<const uint32_t> indices, int steps) {
  const MlpShape& s = shape_;
  if (params.size() != s.NumParams()) {
    return InvalidArgument("train: " + std::to_string(params.size()) + " parameters, the MLP " +
                           std::to_string(s.inputs) + "-" + std::to_string(s.hidden) + "-" +
                           std::to_string(s.classes) + " has " + std::to_string(s.NumParams()));
  }
  if (data.num_features != size_t(s.inputs)) {
    return InvalidArgument("train: dataset has " + std::to_string(data.num_features) +
                           " features, the MLP takes " + std::to_string(s.inputs));
  }
  if (options_.batch_size < 1) return InvalidArgument("train: batch size must be >= 1");
  if (steps < 0) return InvalidArgument("train: steps must be >= 0");

  std::vector<uint32_t> wanted;
  if (indices.empty()) {
    wanted.resize(data.num_samples);
    std::iota(wanted.begin(), wanted.end(), 0U);
    indices = wanted;
  }
  if (indices.empty()) return InvalidArgument("train: no samples");
  for (uint32_t i : indices) {
    if (i >= data.num_samples) {
      return InvalidArgument("train: sample index " + std::to_string(i) + " is outside the " +
                             std::to_string(data.num_samples) + "-sample dataset");
    }
  }
  // A different sample set (a new partition) restarts the shuffle; the same one carries on.
  if (!std::equal(indices.begin(), indices.end(), source_.begin(), source_.end())) {
    source_.assign(indices.begin(), indices.end());
    order_ = source_;
    cursor_ = order_.size();  // shuffle before the first batch
  }

  const int batch = options_.batch_size;
  EnsureScratch(batch);
  const float lr = options_.learning_rate, mom = options_.momentum, wd = options_.weight_decay;
  if (mom != 0.0F) velocity_.assign(s.NumParams(), 0.0F);
  const size_t d = size_t(s.inputs);
  TrainStats stats;
  double loss_sum = 0;
  for (int step = 0; step < steps; ++step) {
    for (int b = 0; b < batch; ++b) {
      if (cursor_ >= order_.size()) {
        std::shuffle(order_.begin(), order_.end(), rng_);
        cursor_ = 0;
      }
      const uint32_t idx = order_[cursor_++];
      std::copy(data.Row(idx), data.Row(idx) + d, batch_x_.data() + size_t(b) * d);
      batch_y_[size_t(b)] = data.labels[idx];
    }
    loss_sum += LossAndGradient(params, batch_x_.data(), batch_y_.data(), batch, grad_) * batch;

    // torch.optim.SGD: d = g + wd*w; v = mom*v + d; w -= lr*v.
    float* __restrict w = params.data();
    const float* __restrict g = grad_.data();
    const size_t n = params.size();
    if (mom == 0.0F) {
#pragma omp simd
      for (size_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
    } else {
      float* __restrict v = velocity_.data();
#pragma omp simd
      for (size_t i = 0; i < n; ++i) {
        v[i] = mom * v[i] + g[i] + wd * w[i];
        w[i] -= lr * v[i];
      }
    }
    ++stats.steps;
    stats.samples += size_t(batch);
  }
  stats.mean_loss = stats.samples > 0 ? loss_sum / double(stats.samples) : 0.0;
  return stats;
}

Result<EvalResult> Evaluate(const MlpShape& s, std::span<const float> params, const Dataset& data) {
  if (params.size() != s.NumParams()) {
    return InvalidArgument("evaluate: " + std::to_string(params.size()) +
                           " parameters, the MLP has " + std::to_string(s.NumParams()));
  }
  if (data.num_features != size_t(s.inputs)) {
    return InvalidArgument("evaluate: dataset has " + std::to_string(data.num_features) +
                           " features, the MLP takes " + std::to_string(s.inputs));
  }
  constexpr int kChunk = 256;
  std::vector<float> hidden(size_t(kChunk) * size_t(s.hidden));
  std::vector<float> logits(size_t(kChunk) * size_t(s.classes));
  EvalResult r;
  size_t correct = 0;
  double loss = 0;
  for (size_t start = 0; start < data.num_samples; start += kChunk) {
    const int n = int(std::min<size_t>(kChunk, data.num_samples - start));
    ForwardBatch(s, params, data.Row(start), n, hidden.data(), logits.data());
    for (int b = 0; b < n; ++b) {
      const float* z = logits.data() + size_t(b) * size_t(s.classes);
      const uint8_t y = data.labels[start + size_t(b)];
      const int pred = int(std::max_element(z, z + s.classes) - z);
      correct += pred == y ? 1 : 0;
      const float m = z[pred];
      double sum = 0;
      for (int c = 0; c < s.classes; ++c) sum += std::exp(double(z[c] - m));
      loss += std::log(sum) - double(z[y] - m);
    }
  }
  r.samples = data.num_samples;
  if (r.samples > 0) {
    r.accuracy = double(correct) / double(r.samples);
    r.loss = loss / double(r.samples);
  }
  return r;
}

}  // namespace shoal::client
