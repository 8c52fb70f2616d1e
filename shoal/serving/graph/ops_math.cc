// Element-wise kernels: unary math, broadcasting binary arithmetic and comparisons, Where, Cast,
// Clip, ReduceMean (ops.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "shoal/serving/graph/ops.h"
#include "shoal/serving/graph/shape_inference.h"

namespace shoal::inference::ops {
namespace {

Status Bad(const Node& n, const std::string& what) {
  return InvalidArgument(NodeLabel(n) + ": " + what);
}

// Numpy multidirectional broadcast of every given shape.
Result<Shape> BroadcastAll(const Node& n, const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o != 1) {
        std::string all;
        for (const Shape& t : shapes) all += (all.empty() ? "" : " and ") + ShapeToString(t);
        return Bad(n, "shapes " + all + " do not broadcast");
      }
      o = s[i];
    }
  }
  return out;
}

// Element strides of `s` seen as `out` (right-aligned; 0 where s broadcasts).
std::vector<int64_t> BroadcastStrides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != 1) st[out.size() - s.size() + i] = stride;
    stride *= s[i];
  }
  return st;
}

// Calls f(o, i[0..K)) for every element of `out`, with the matching offsets into K inputs.
template <size_t K, typename F>
void ForEach(const Shape& out, const std::array<Shape, K>& in, F f) {
  const int64_t total = Numel(out);
  if (total == 0) return;
  bool same = true;
  for (const Shape& s : in) same = same && s == out;
  std::array<int64_t, K> idx{};
  if (same) {
    for (int64_t o = 0; o < total; ++o) {
      idx.fill(o);
      f(o, idx);
    }
    return;
  }
  const size_t r = out.size();
  if (r == 0) {
    f(0, idx);
    return;
  }
  std::array<std::vector<int64_t>, K> st;
  for (size_t k = 0; k < K; ++k) st[k] = BroadcastStrides(in[k], out);
  const int64_t inner = r == 0 ? 1 : out[r - 1];
  std::vector<int64_t> pos(r, 0);
  std::array<int64_t, K> base{};
  for (int64_t o = 0; o < total; o += inner) {
    for (int64_t j = 0; j < inner; ++j) {
      for (size_t k = 0; k < K; ++k) idx[k] = base[k] + j * st[k][r - 1];
      f(o + j, idx);
    }
    for (size_t d = r - 1; d-- > 0;) {  // odometer over the outer dimensions
      if (++pos[d] < out[d]) {
        for (size_t k = 0; k < K; ++k) base[k] += st[k][d];
        break;
      }
      for (size_t k = 0; k < K; ++k) base[k] -= st[k][d] * (out[d] - 1);
      pos[d] = 0;
    }
  }
}

template <typename T>
T Unary(OpType op, T x, float alpha, float beta, T lo, T hi) {
  switch (op) {
    case OpType::kSqrt:
      return std::sqrt(x);
    case OpType::kErf:
      return std::erf(x);
    case OpType::kTanh:
      return std::tanh(x);
    case OpType::kSigmoid:
      return T(1) / (T(1) + std::exp(-x));
    case OpType::kExp:
      return std::exp(x);
    case OpType::kNeg:
      return -x;
    case OpType::kRelu:
      return x > T(0) ? x : T(0);
    case OpType::kNot:
      return x == T(0) ? T(1) : T(0);
    case OpType::kHardSigmoid:
      return std::clamp(T(alpha) * x + T(beta), T(0), T(1));
    case OpType::kHardSwish:
      return x * std::clamp(x / T(6) + T(0.5), T(0), T(1));
    case OpType::kClip:
      return std::clamp(x, lo, hi);
    default:
      return x;  // Identity, Dropout (inference)
  }
}

template <typename T>
T Binary(OpType op, T a, T b, bool int_math, bool fmod) {
  switch (op) {
    case OpType::kAdd:
      return a + b;
    case OpType::kSub:
      return a - b;
    case OpType::kMul:
      return a * b;
    case OpType::kDiv:
      return int_math && b != T(0) ? std::trunc(a / b) : a / b;
    case OpType::kPow:
      return b == T(2) ? a * a : b == T(0.5) ? std::sqrt(a) : std::pow(a, b);
    case OpType::kMod: {
      if (fmod || !int_math) return std::fmod(a, b);
      T m = std::fmod(a, b);
      if (m != T(0) && ((m < 0) != (b < 0))) m += b;
      return m;
    }
    case OpType::kEqual:
      return a == b ? T(1) : T(0);
    case OpType::kLess:
      return a < b ? T(1) : T(0);
    case OpType::kLessOrEqual:
      return a <= b ? T(1) : T(0);
    case OpType::kGreater:
      return a > b ? T(1) : T(0);
    case OpType::kGreaterOrEqual:
      return a >= b ? T(1) : T(0);
    case OpType::kMin:
      return std::min(a, b);
    case OpType::kMax:
      return std::max(a, b);
    default:
      return a;
  }
}

// Cast: integer targets truncate, bool is (x != 0), float32 rounds to float.
template <typename T>
T CastTo(int64_t to, T x) {
  switch (to) {
    case 1:   // FLOAT
    case 10:  // FLOAT16 (kept at float precision)
    case 16:  // BFLOAT16
      return static_cast<T>(static_cast<float>(x));
    case 11:  // DOUBLE
      return x;
    case 9:  // BOOL
      return x != T(0) ? T(1) : T(0);
    default:
      return std::trunc(x);
  }
}

template <typename T>
Status ReduceMean(const Node& n, Io<T>& io) {
  const Shape& x = io.in_shapes[0];
  const auto rank = static_cast<int64_t>(x.size());
  std::vector<int64_t> axes = n.IntsAttr("axes");
  if (io.in_ints.size() > 1 && !n.inputs[1].empty()) {
    if (io.in_ints[1] == nullptr) return Bad(n, "axes '" + n.inputs[1] + "' must be constant");
    axes = *io.in_ints[1];
  }
  std::vector<bool> reduce(x.size(), axes.empty());
  for (int64_t a : axes) {
    const int64_t k = NormaliseAxis(a, rank);
    if (k < 0) return Bad(n, "axis " + std::to_string(a) + " out of range");
    reduce[static_cast<size_t>(k)] = true;
  }
  const bool keep = n.IntAttr("keepdims", 1) != 0;
  Shape kept = x, out;
  int64_t count = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!reduce[i]) {
      out.push_back(x[i]);
      continue;
    }
    count *= x[i];
    kept[i] = 1;
    if (keep) out.push_back(1);
  }
  io.out_shapes = {out};
  if (io.out.empty()) return {};
  T* y = io.out[0];
  std::fill(y, y + Numel(out), T(0));
  const T* a = io.in[0];
  ForEach<1>(x, {kept}, [&](int64_t i, const std::array<int64_t, 1>& o) { y[o[0]] += a[i]; });
  for (int64_t i = 0; i < Numel(out); ++i) y[i] /= static_cast<T>(count);
  return {};
}

}  // namespace

bool IsMathOp(OpType op) {
  switch (op) {
    case OpType::kIdentity:
    case OpType::kDropout:
    case OpType::kAdd:
    case OpType::kSub:
    case OpType::kMul:
    case OpType::kDiv:
    case OpType::kPow:
    case OpType::kMod:
    case OpType::kMin:
    case OpType::kMax:
    case OpType::kEqual:
    case OpType::kLess:
    case OpType::kLessOrEqual:
    case OpType::kGreater:
    case OpType::kGreaterOrEqual:
    case OpType::kNot:
    case OpType::kSqrt:
    case OpType::kErf:
    case OpType::kTanh:
    case OpType::kSigmoid:
    case OpType::kExp:
    case OpType::kNeg:
    case OpType::kRelu:
    case OpType::kHardSwish:
    case OpType::kHardSigmoid:
    case OpType::kClip:
    case OpType::kCast:
    case OpType::kWhere:
    case OpType::kReduceMean:
      return true;
    default:
      return false;
  }
}

template <typename T>
Status EvalMath(const Node& n, Io<T>& io) {
  const bool run = !io.out.empty();
  switch (n.op) {
    case OpType::kReduceMean:
      return ReduceMean(n, io);
    case OpType::kWhere: {
      auto out = BroadcastAll(n, {io.in_shapes[0], io.in_shapes[1], io.in_shapes[2]});
      if (!out.ok()) return out.status();
      io.out_shapes = {*out};
      if (!run) return {};
      const T *c = io.in[0], *a = io.in[1], *b = io.in[2];
      T* y = io.out[0];
      ForEach<3>(*out, {io.in_shapes[0], io.in_shapes[1], io.in_shapes[2]},
                 [&](int64_t o, const std::array<int64_t, 3>& i) {
                   y[o] = c[i[0]] != T(0) ? a[i[1]] : b[i[2]];
                 });
      return {};
    }
    case OpType::kAdd:
    case OpType::kSub:
    case OpType::kMul:
    case OpType::kDiv:
    case OpType::kPow:
    case OpType::kMod:
    case OpType::kMin:
    case OpType::kMax:
    case OpType::kEqual:
    case OpType::kLess:
    case OpType::kLessOrEqual:
    case OpType::kGreater:
    case OpType::kGreaterOrEqual: {
      if (io.in_shapes.size() != 2) return Bad(n, "takes exactly 2 inputs here");
      auto out = BroadcastAll(n, {io.in_shapes[0], io.in_shapes[1]});
      if (!out.ok()) return out.status();
      io.out_shapes = {*out};
      if (!run) return {};
      const T *a = io.in[0], *b = io.in[1];
      T* y = io.out[0];
      const bool fmod = n.IntAttr("fmod", 0) != 0;
      const OpType op = n.op;
      const bool im = io.int_math;
      if (op == OpType::kMul && io.in_shapes[0] == *out && io.in_shapes[1] == *out) {
        for (int64_t o = 0; o < Numel(*out); ++o) y[o] = a[o] * b[o];
        return {};
      }
      ForEach<2>(*out, {io.in_shapes[0], io.in_shapes[1]},
                 [&](int64_t o, const std::array<int64_t, 2>& i) {
                   y[o] = Binary(op, a[i[0]], b[i[1]], im, fmod);
                 });
      return {};
    }
    default:
      break;
  }
  // Unary.
  io.out_shapes = {io.in_shapes[0]};
  if (!run) return {};
  const float alpha = n.FloatAttr("alpha", 0.2f), beta = n.FloatAttr("beta", 0.5f);
  T lo = -std::numeric_limits<T>::infinity(), hi = std::numeric_limits<T>::infinity();
  if (n.op == OpType::kClip) {
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
      if (io.in[1] == nullptr) return Bad(n, "min must be given");
      lo = io.in[1][0];
    } else {
      lo = static_cast<T>(n.FloatAttr("min", -std::numeric_limits<float>::infinity()));
    }
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      hi = io.in[2][0];
    } else {
      hi = static_cast<T>(n.FloatAttr("max", std::numeric_limits<float>::infinity()));
    }
  }
  const T* x = io.in[0];
  T* y = io.out[0];
  const int64_t total = Numel(io.in_shapes[0]);
  if (n.op == OpType::kCast) {
    const int64_t to = n.IntAttr("to", 1);
    for (int64_t i = 0; i < total; ++i) y[i] = CastTo(to, x[i]);
    return {};
  }
  const OpType op = n.op;
  for (int64_t i = 0; i < total; ++i) y[i] = Unary(op, x[i], alpha, beta, lo, hi);
  return {};
}

template Status EvalMath<float>(const Node& n, Io<float>& io);
template Status EvalMath<double>(const Node& n, Io<double>& io);

}  // namespace shoal::inference::ops
