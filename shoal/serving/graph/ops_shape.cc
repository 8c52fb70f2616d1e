// Data-movement and shape kernels (ops.h): Shape, Gather, GatherElements, Concat, Slice, Split,
// Transpose, Unsqueeze, Squeeze, Reshape, Flatten, Expand, ConstantOfShape, Range, Pad; and the
// dispatcher over both families.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "shoal/serving/graph/ops.h"
#include "shoal/serving/graph/shape_inference.h"

namespace shoal::inference::ops {
namespace {

Status Bad(const Node& n, const std::string& what) {
  return InvalidArgument(NodeLabel(n) + ": " + what);
}

// The integer values of input `i`, which must be known at load.
template <typename T>
Result<const std::vector<int64_t>*> Known(const Node& n, const Io<T>& io, size_t i,
                                          const char* what) {
  if (i >= io.in_ints.size() || io.in_ints[i] == nullptr) {
    return Bad(n, std::string(what) + " '" + (i < n.inputs.size() ? n.inputs[i] : "") +
                      "' must be a constant (or computed from shapes only)");
  }
  return io.in_ints[i];
}

bool Given(const Node& n, size_t i) { return i < n.inputs.size() && !n.inputs[i].empty(); }

// Axes from the attribute (opset < 13) or from input `i` (opset >= 13).
template <typename T>
Result<std::vector<int64_t>> Axes(const Node& n, const Io<T>& io, size_t i) {
  if (Given(n, i)) {
    auto k = Known(n, io, i, "axes");
    if (!k.ok()) return k.status();
    return **k;
  }
  return n.IntsAttr("axes");
}

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// Copies an n-d box: out[idx] = in[start + idx * step] over `out_shape`, `in_strides` per dim.
template <typename T>
void CopyStrided(const T* in, const std::vector<int64_t>& in_strides, int64_t in_offset,
                 const Shape& out_shape, T* out) {
  const int64_t total = Numel(out_shape);
  if (total == 0) return;
  const size_t r = out_shape.size();
  if (r == 0) {
    out[0] = in[in_offset];
    return;
  }
  const int64_t inner = out_shape[r - 1], is = in_strides[r - 1];
  std::vector<int64_t> pos(r, 0);
  int64_t base = in_offset;
  for (int64_t o = 0; o < total; o += inner) {
    if (is == 1) {
      std::memcpy(out + o, in + base, static_cast<size_t>(inner) * sizeof(T));
    } else {
      for (int64_t j = 0; j < inner; ++j) out[o + j] = in[base + j * is];
    }
    for (size_t d = r - 1; d-- > 0;) {
      if (++pos[d] < out_shape[d]) {
        base += in_strides[d];
        break;
      }
      base -= in_strides[d] * (out_shape[d] - 1);
      pos[d] = 0;
    }
  }
}

template <typename T>
Status Gather(const Node& n, Io<T>& io) {
  const Shape &x = io.in_shapes[0], &idx = io.in_shapes[1];
  const int64_t axis = NormaliseAxis(n.IntAttr("axis", 0), static_cast<int64_t>(x.size()));
  if (axis < 0) return Bad(n, "axis out of range for " + ShapeToString(x));
  const auto a = static_cast<size_t>(axis);
  Shape out(x.begin(), x.begin() + static_cast<ptrdiff_t>(a));
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), x.begin() + static_cast<ptrdiff_t>(a) + 1, x.end());
  io.out_shapes = {out};
  if (io.out.empty()) return {};
  const int64_t outer = std::accumulate(x.begin(), x.begin() + static_cast<ptrdiff_t>(a),
                                        int64_t{1}, std::multiplies<>());
  const int64_t inner = std::accumulate(x.begin() + static_cast<ptrdiff_t>(a) + 1, x.end(),
                                        int64_t{1}, std::multiplies<>());
  const int64_t dim = x[a], count = Numel(idx);
  T* y = io.out[0];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < count; ++j) {
      auto k = static_cast<int64_t>(io.in[1][j]);
      if (k < 0) k += dim;
      if (k < 0 || k >= dim) return Bad(n, "index " + std::to_string(k) + " out of range");
      if (inner == 0) continue;  // an empty tensor may have no data pointer
      std::memcpy(y + (o * count + j) * inner, io.in[0] + (o * dim + k) * inner,
                  static_cast<size_t>(inner) * sizeof(T));
    }
  }
  return {};
}

template <typename T>
Status GatherElements(const Node& n, Io<T>& io) {
  const Shape &x = io.in_shapes[0], &idx = io.in_shapes[1];
  const int64_t axis = NormaliseAxis(n.IntAttr("axis", 0), static_cast<int64_t>(x.size()));
  if (axis < 0 || idx.size() != x.size()) return Bad(n, "indices must have the data's rank");
  io.out_shapes = {idx};
  if (io.out.empty()) return {};
  const auto xs = Strides(x), is = Strides(idx);
  const auto a = static_cast<size_t>(axis);
  for (int64_t i = 0; i < Numel(idx); ++i) {
    int64_t off = 0, rem = i;
    auto k = static_cast<int64_t>(io.in[1][i]);
    if (k < 0) k += x[a];
    if (k < 0 || k >= x[a]) return Bad(n, "index out of range");
    for (size_t d = 0; d < idx.size(); ++d) {
      const int64_t c = rem / is[d];
      rem %= is[d];
      off += (d == a ? k : c) * xs[d];
    }
    io.out[0][i] = io.in[0][off];
  }
  return {};
}

template <typename T>
Status Concat(const Node& n, Io<T>& io) {
  const Shape& first = io.in_shapes[0];
  const int64_t axis = NormaliseAxis(n.IntAttr("axis", 0), static_cast<int64_t>(first.size()));
  if (axis < 0) return Bad(n, "axis out of range for " + ShapeToString(first));
  const auto a = static_cast<size_t>(axis);
  Shape out = first;
  out[a] = 0;
  for (const Shape& s : io.in_shapes) {
    bool ok = s.size() == first.size();
    for (size_t d = 0; ok && d < s.size(); ++d) ok = d == a || s[d] == first[d];
    if (!ok)
      return Bad(n, "inputs " + ShapeToString(first) + " and " + ShapeToString(s) +
                        " do not concatenate on axis " + std::to_string(axis));
    out[a] += s[a];
  }
  io.out_shapes = {out};
  if (io.out.empty()) return {};
  const int64_t outer = std::accumulate(out.begin(), out.begin() + static_cast<ptrdiff_t>(a),
                                        int64_t{1}, std::multiplies<>());
  const int64_t row = Numel(out) / std::max<int64_t>(outer, 1);
  int64_t at = 0;
  for (size_t i = 0; i < io.in.size(); ++i) {
    const int64_t chunk = Numel(io.in_shapes[i]) / std::max<int64_t>(outer, 1);
    if (chunk == 0) continue;  // an empty input (a shape subgraph's [] may have no data at all)
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(io.out[0] + o * row + at, io.in[i] + o * chunk,
                  static_cast<size_t>(chunk) * sizeof(T));
    }
    at += chunk;
  }
  return {};
}

template <typename T>
Status Slice(const Node& n, Io<T>& io) {
  const Shape& x = io.in_shapes[0];
  auto starts = Known(n, io, 1, "starts");
  if (!starts.ok()) return starts.status();
  auto ends = Known(n, io, 2, "ends");
  if (!ends.ok()) return ends.status();
  std::vector<int64_t> axes(x.size()), steps((*starts)->size(), 1);
  std::iota(axes.begin(), axes.end(), 0);
  if (Given(n, 3)) {
    auto k = Known(n, io, 3, "axes");
    if (!k.ok()) return k.status();
    axes = **k;
  }
  if (Given(n, 4)) {
    auto k = Known(n, io, 4, "steps");
    if (!k.ok()) return k.status();
    steps = **k;
  }
  if ((*ends)->size() != (*starts)->size() || axes.size() < (*starts)->size() ||
      steps.size() != (*starts)->size()) {
    return Bad(n, "starts, ends, axes and steps differ in length");
  }
  Shape out = x;
  std::vector<int64_t> begin(x.size(), 0), step(x.size(), 1);
  for (size_t i = 0; i < (*starts)->size(); ++i) {
    const int64_t ax = NormaliseAxis(axes[i], static_cast<int64_t>(x.size()));
    if (ax < 0) return Bad(n, "axis out of range");
    const auto d = static_cast<size_t>(ax);
    const int64_t dim = x[d], st = steps[i];
    if (st == 0) return Bad(n, "step 0");
    int64_t s = (**starts)[i], e = (**ends)[i];
    if (s < 0) s += dim;
    if (e < 0 && e > std::numeric_limits<int64_t>::min() / 2) e += dim;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      out[d] = e > s ? (e - s + st - 1) / st : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      out[d] = s > e ? (s - e - st - 1) / -st : 0;
    }
    begin[d] = s;
    step[d] = st;
  }
  io.out_shapes = {out};
  if (io.out.empty()) return {};
  const auto xs = Strides(x);
  std::vector<int64_t> st(x.size());
  int64_t off = 0;
  for (size_t d = 0; d < x.size(); ++d) {
    st[d] = xs[d] * step[d];
    off += begin[d] * xs[d];
  }
  CopyStrided(io.in[0], st, off, out, io.out[0]);
  return {};
}

template <typename T>
Status Split(const Node& n, Io<T>& io) {
  const Shape& x = io.in_shapes[0];
  const int64_t axis = NormaliseAxis(n.IntAttr("axis", 0), static_cast<int64_t>(x.size()));
  if (axis < 0) return Bad(n, "axis out of range");
  const auto a = static_cast<size_t>(axis);
  std::vector<int64_t> parts = n.IntsAttr("split");
  if (Given(n, 1)) {
    auto k = Known(n, io, 1, "split");
    if (!k.ok()) return k.status();
    parts = **k;
  }
  const auto count = static_cast<int64_t>(n.outputs.size());
  if (parts.empty()) {
    if (x[a] % count != 0) return Bad(n, "dimension does not split evenly");
    parts.assign(n.outputs.size(), x[a] / count);
  }
  if (parts.size() != n.outputs.size() ||
      std::accumulate(parts.begin(), parts.end(), int64_t{0}) != x[a]) {
    return Bad(n, "split sizes do not add up to the dimension");
  }
  io.out_shapes.clear();
  for (int64_t p : parts) {
    Shape s = x;
    s[a] = p;
    io.out_shapes.push_back(s);
  }
  if (io.out.empty()) return {};
  const auto xs = Strides(x);
  int64_t at = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    CopyStrided(io.in[0], xs, at * xs[a], io.out_shapes[i], io.out[i]);
    at += parts[i];
  }
  return {};
}

template <typename T>
Status Transpose(const Node& n, Io<T>& io) {
  const Shape& x = io.in_shapes[0];
  std::vector<int64_t> perm = n.IntsAttr("perm");
  if (perm.empty()) {
    for (size_t i = x.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  if (perm.size() != x.size()) return Bad(n, "perm does not match the input's rank");
  Shape out(x.size());
  const auto xs = Strides(x);
  std::vector<int64_t> st(x.size());
  std::vector<bool> seen(x.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(x.size()) ||
        seen[static_cast<size_t>(perm[i])]) {
      return Bad(n, "perm " + ShapeToString(perm) + " is not a permutation");
    }
    seen[static_cast<size_t>(perm[i])] = true;
    out[i] = x[static_cast<size_t>(perm[i])];
    st[i] = xs[static_cast<size_t>(perm[i])];
  }
  io.out_shapes = {out};
  if (!io.out.empty()) CopyStrided(io.in[0], st, 0, out, io.out[0]);
  return {};
}

// Shapes of the ops that move no data (the output is the input's values in order).
template <typename T>
Result<Shape> ReshapedShape(const Node& n, Io<T>& io) {
  const Shape& x = io.in_shapes[0];
  const auto rank = static_cast<int64_t>(x.size());
  switch (n.op) {
    case OpType::kUnsqueeze: {
      auto axes = Axes(n, io, 1);
      if (!axes.ok()) return axes.status();
      const auto out_rank = rank + static_cast<int64_t>(axes->size());
      std::vector<bool> ins(static_cast<size_t>(out_rank), false);
      for (int64_t a : *axes) {
        const int64_t k = NormaliseAxis(a, out_rank);
        if (k < 0) return Bad(n, "axis out of range");
        ins[static_cast<size_t>(k)] = true;
      }
      Shape out;
      size_t j = 0;
      for (bool b : ins) out.push_back(b ? 1 : (j < x.size() ? x[j++] : 1));
      return out;
    }
    case OpType::kSqueeze: {
      auto axes = Axes(n, io, 1);
      if (!axes.ok()) return axes.status();
      std::vector<bool> drop(x.size(), axes->empty());
      for (int64_t a : *axes) {
        const int64_t k = NormaliseAxis(a, rank);
        if (k < 0 || x[static_cast<size_t>(k)] != 1) return Bad(n, "cannot squeeze that axis");
        drop[static_cast<size_t>(k)] = true;
      }
      Shape out;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!(drop[i] && x[i] == 1)) out.push_back(x[i]);
      }
      return out;
    }
    default: {  // Reshape
      auto target = Known(n, io, 1, "shape");
      if (!target.ok()) return target.status();
      if (n.IntAttr("allowzero", 0) != 0) return Bad(n, "allowzero=1 is not supported");
      Shape out = **target;
      int64_t known = 1, infer_at = -1;
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i] == 0 && i < x.size()) out[i] = x[i];
        if (out[i] == -1) {
          if (infer_at >= 0) return Bad(n, "shape " + ShapeToString(**target) + " has two -1");
          infer_at = static_cast<int64_t>(i);
          continue;
        }
        if (out[i] < 0 || __builtin_mul_overflow(known, out[i], &known)) {
          return Bad(n, "shape " + ShapeToString(**target) + " is invalid");
        }
      }
      const int64_t total = Numel(x);
      if (infer_at >= 0 && known != 0 && total % known == 0) {
        out[static_cast<size_t>(infer_at)] = total / known;
      } else if (infer_at >= 0 || known != total) {
        return Bad(n, "cannot reshape " + ShapeToString(x) + " to " + ShapeToString(**target));
      }
      return out;
    }
  }
}

template <typename T>
Status Pad(const Node& n, Io<T>& io) {
  const Shape& x = io.in_shapes[0];
  auto pads = Known(n, io, 1, "pads");
  if (!pads.ok()) return pads.status();
  if ((*pads)->size() != 2 * x.size()) return Bad(n, "pads must have 2 x rank values");
  if (n.IntAttr("mode", 0) != 0) return Bad(n, "only constant padding");
  Shape out = x;
  for (size_t d = 0; d < x.size(); ++d) {
    constexpr int64_t kMaxPad = int64_t{1} << 30;
    if ((**pads)[d] < 0 || (**pads)[d + x.size()] < 0 || (**pads)[d] > kMaxPad ||
        (**pads)[d + x.size()] > kMaxPad) {
      return Bad(n, "pads must be in 0..2^30");
    }
    out[d] += (**pads)[d] + (**pads)[d + x.size()];
  }
  io.out_shapes = {out};
  if (io.out.empty()) return {};
  const T value = Given(n, 2) && io.in[2] != nullptr ? io.in[2][0] : T(0);
  std::fill(io.out[0], io.out[0] + Numel(out), value);
  const auto os = Strides(out);
  int64_t off = 0;
  for (size_t d = 0; d < x.size(); ++d) off += (**pads)[d] * os[d];
  // Scatter: the input box lands at `off` with the output's strides.
  const auto xs = Strides(x);
  for (int64_t i = 0; i < Numel(x); ++i) {
    int64_t o = off, rem = i;
    for (size_t d = 0; d < x.size(); ++d) {
      o += rem / xs[d] * os[d];
      rem %= xs[d];
    }
    io.out[0][o] = io.in[0][i];
  }
  return {};
}

template <typename T>
Status EvalShapeOp(const Node& n, Io<T>& io) {
  const bool run = !io.out.empty();
  switch (n.op) {
    case OpType::kShape: {
      const Shape& x = io.in_shapes[0];
      const auto r = static_cast<int64_t>(x.size());
      int64_t s = n.IntAttr("start", 0), e = n.IntAttr("end", r);
      s = std::clamp<int64_t>(s < 0 ? s + r : s, 0, r);
      e = std::clamp<int64_t>(e < 0 ? e + r : e, 0, r);
      io.out_shapes = {{std::max<int64_t>(e - s, 0)}};
      if (run) {
        for (int64_t i = s; i < e; ++i)
          io.out[0][i - s] = static_cast<T>(x[static_cast<size_t>(i)]);
      }
      return {};
    }
    case OpType::kGather:
      return Gather(n, io);
    case OpType::kGatherElements:
      return GatherElements(n, io);
    case OpType::kConcat:
      return Concat(n, io);
    case OpType::kSlice:
      return Slice(n, io);
    case OpType::kSplit:
      return Split(n, io);
    case OpType::kTranspose:
      return Transpose(n, io);
    case OpType::kPad:
      return Pad(n, io);
    case OpType::kUnsqueeze:
    case OpType::kSqueeze:
    case OpType::kReshape: {
      auto out = ReshapedShape(n, io);
      if (!out.ok()) return out.status();
      io.out_shapes = {*out};
      if (run) std::copy(io.in[0], io.in[0] + Numel(*out), io.out[0]);
      return {};
    }
    case OpType::kExpand: {
      auto target = Known(n, io, 1, "shape");
      if (!target.ok()) return target.status();
      const Shape& x = io.in_shapes[0];
      const size_t r = std::max(x.size(), (*target)->size());
      Shape out(r, 1);
      for (size_t i = 0; i < r; ++i) {
        const int64_t a = i + x.size() >= r ? x[i + x.size() - r] : 1;
        const int64_t b = i + (*target)->size() >= r ? (**target)[i + (*target)->size() - r] : 1;
        if (a != b && a != 1 && b != 1) return Bad(n, "shape does not broadcast");
        out[i] = a == 1 ? b : a;
      }
      io.out_shapes = {out};
      if (!run) return {};
      std::vector<int64_t> st(r, 0);
      const auto xs = Strides(x);
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i] != 1) st[r - x.size() + i] = xs[i];
      }
      CopyStrided(io.in[0], st, 0, out, io.out[0]);
      return {};
    }
    case OpType::kConstantOfShape: {
      auto target = Known(n, io, 0, "shape");
      if (!target.ok()) return target.status();
      io.out_shapes = {**target};
      for (int64_t d : **target) {
        if (d < 0) return Bad(n, "negative dimension");
      }
      if (run) {
        std::fill(io.out[0], io.out[0] + Numel(**target), static_cast<T>(n.FloatAttr("value", 0)));
      }
      return {};
    }
    case OpType::kRange: {
      std::array<int64_t, 3> v{};
      for (size_t i = 0; i < 3; ++i) {
        auto k = Known(n, io, i, i == 0 ? "start" : i == 1 ? "limit" : "delta");
        if (!k.ok()) return k.status();
        if ((*k)->size() != 1) return Bad(n, "start, limit and delta must be scalars");
        v[i] = (**k)[0];
      }
      if (v[2] == 0) return Bad(n, "delta 0");
      const double span = std::ceil((static_cast<double>(v[1]) - static_cast<double>(v[0])) /
                                    static_cast<double>(v[2]));
      if (span > static_cast<double>(int64_t{1} << 40)) return Bad(n, "too many values");
      const int64_t count = std::max<int64_t>(0, static_cast<int64_t>(span));
      io.out_shapes = {{count}};
      if (run) {
        for (int64_t i = 0; i < count; ++i)
          io.out[0][i] = io.in[0][0] + static_cast<T>(i) * io.in[2][0];
      }
      return {};
    }
    default:
      return Bad(n, "no kernel");
  }
}

}  // namespace

int64_t Numel(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
}

bool HasKernel(OpType op) {
  return IsMathOp(op) || op == OpType::kShape || op == OpType::kGather ||
         op == OpType::kGatherElements || op == OpType::kConcat || op == OpType::kSlice ||
         op == OpType::kSplit || op == OpType::kTranspose || op == OpType::kPad ||
         op == OpType::kUnsqueeze || op == OpType::kSqueeze || op == OpType::kReshape ||
         op == OpType::kExpand || op == OpType::kConstantOfShape || op == OpType::kRange;
}

bool OutputIsInt(const Node& n, bool first_input_is_int) {
  switch (n.op) {
    case OpType::kShape:
    case OpType::kEqual:
    case OpType::kLess:
    case OpType::kLessOrEqual:
    case OpType::kGreater:
    case OpType::kGreaterOrEqual:
    case OpType::kNot:
      return true;
    case OpType::kCast: {
      const int64_t to = n.IntAttr("to", 1);
      return to != 1 && to != 10 && to != 11 && to != 16;
    }
    case OpType::kConstantOfShape: {
      auto it = n.attributes.find("value");
      return it != n.attributes.end() && std::holds_alternative<int64_t>(it->second);
    }
    case OpType::kWhere:
      return false;  // decided by the caller from the second input
    default:
      return first_input_is_int;
  }
}

template <typename T>
Status Eval(const Node& n, Io<T>& io) {
  if (IsMathOp(n.op)) return EvalMath(n, io);
  return EvalShapeOp(n, io);
}

template Status Eval<float>(const Node& n, Io<float>& io);
template Status Eval<double>(const Node& n, Io<double>& io);

}  // namespace shoal::inference::ops
