#include "shoal/serving/graph/shape_inference.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <numeric>
#include <string>

namespace shoal::inference {
namespace {

using Shape = std::vector<int64_t>;

Status Bad(const Node& n, const std::string& what) {
  return InvalidArgument(NodeLabel(n) + ": " + what);
}

int64_t Product(const Shape& s, size_t begin, size_t end) {
  return std::accumulate(s.begin() + static_cast<ptrdiff_t>(begin),
                         s.begin() + static_cast<ptrdiff_t>(end), int64_t{1}, std::multiplies<>());
}

Status NeedRank(const Node& n, size_t input, const Shape& s, size_t rank, const char* layout) {
  if (s.size() == rank) return {};
  return Bad(n, "input '" + n.inputs[input] + "' has shape " + ShapeToString(s) + " but " +
                    std::string(OpTypeName(n.op)) + " needs " + std::to_string(rank) +
                    " dimensions " + layout);
}

// Numpy-style multidirectional broadcast (Add).
Result<Shape> Broadcast(const Node& n, const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1) {
      return Bad(n,
                 "shapes " + ShapeToString(a) + " and " + ShapeToString(b) + " do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Result<Shape> Gemm(const Node& n, const std::vector<const Shape*>& in) {
  SHOAL_RETURN_IF_ERROR(NeedRank(n, 0, *in[0], 2, "[M,K]"));
  SHOAL_RETURN_IF_ERROR(NeedRank(n, 1, *in[1], 2, "[K,N]"));
  const bool ta = n.IntAttr("transA", 0) != 0, tb = n.IntAttr("transB", 0) != 0;
  const int64_t m = ta ? (*in[0])[1] : (*in[0])[0], k = ta ? (*in[0])[0] : (*in[0])[1];
  const int64_t kb = tb ? (*in[1])[1] : (*in[1])[0], nn = tb ? (*in[1])[0] : (*in[1])[1];
  if (k != kb) {
    return Bad(n, "A " + ShapeToString(*in[0]) + (ta ? " (transposed)" : "") + " and B " +
                      ShapeToString(*in[1]) + (tb ? " (transposed)" : "") + " disagree on K (" +
                      std::to_string(k) + " vs " + std::to_string(kb) + ")");
  }
  Shape out{m, nn};
  if (in.size() > 2 && in[2] != nullptr) {
    // C broadcasts to [M,N] in one direction only.
    auto b = Broadcast(n, out, *in[2]);
    if (!b.ok() || *b != out) {
      return Bad(n, "C " + ShapeToString(*in[2]) + " does not broadcast to " + ShapeToString(out));
    }
  }
  return out;
}

// Numpy matmul: the last two dimensions multiply, the leading ones broadcast.
Result<Shape> MatMul(const Node& n, const std::vector<const Shape*>& in) {
  const Shape &a = *in[0], &b = *in[1];
  if (a.size() < 2 || b.size() < 2) {
    return Bad(n,
               "supports A and B of rank >= 2; got " + ShapeToString(a) + " x " + ShapeToString(b));
  }
  if (a.back() != b[b.size() - 2]) {
    return Bad(n, "A " + ShapeToString(a) + " and B " + ShapeToString(b) + " disagree on K");
  }
  auto batch = Broadcast(n, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!batch.ok()) return batch.status();
  Shape out = *batch;
  out.push_back(a[a.size() - 2]);
  out.push_back(b.back());
  return out;
}

Result<Shape> Conv(const Node& n, const std::vector<const Shape*>& in) {
  SHOAL_RETURN_IF_ERROR(NeedRank(n, 0, *in[0], 4, "[N,C,H,W] (only 2-D convolution)"));
  SHOAL_RETURN_IF_ERROR(NeedRank(n, 1, *in[1], 4, "[M,C/group,kH,kW]"));
  const Shape &x = *in[0], &w = *in[1];
  auto win = ReadWindow(n, {w[2], w[3]});
  if (!win.ok()) return win.status();
  const int64_t g = win->group;
  if (g < 1 || x[1] % g != 0 || w[0] % g != 0) {
    return Bad(n, "group " + std::to_string(g) + " does not divide input channels " +
                      std::to_string(x[1]) + " and output channels " + std::to_string(w[0]));
  }
  if (w[1] * g != x[1]) {
    return Bad(n, "weights '" + n.inputs[1] + "' " + ShapeToString(w) + " expect " +
                      std::to_string(w[1] * g) + " input channels, input '" + n.inputs[0] +
                      "' has " + std::to_string(x[1]));
  }
  if (in.size() > 2 && in[2] != nullptr && *in[2] != Shape{w[0]}) {
    return Bad(n, "bias '" + n.inputs[2] + "' is " + ShapeToString(*in[2]) + ", expected [" +
                      std::to_string(w[0]) + "]");
  }
  auto hw = WindowOutput(n, *win, {x[2], x[3]});
  if (!hw.ok()) return hw.status();
  return Shape{x[0], w[0], (*hw)[0], (*hw)[1]};
}

Result<Shape> Pool(const Node& n, const std::vector<const Shape*>& in) {
  SHOAL_RETURN_IF_ERROR(NeedRank(n, 0, *in[0], 4, "[N,C,H,W] (only 2-D pooling)"));
  if (n.IntAttr("ceil_mode", 0) != 0) return Bad(n, "ceil_mode=1 is not supported");
  if (n.op == OpType::kMaxPool && n.IntAttr("storage_order", 0) != 0) {
    return Bad(n, "storage_order=1 is not supported");
  }
  auto win = ReadWindow(n, {0, 0});
  if (!win.ok()) return win.status();
  if (win->dilations != std::array<int64_t, 2>{1, 1}) {
    return Bad(n, "dilated pooling is not supported");
  }
  const Shape& x = *in[0];
  auto hw = WindowOutput(n, *win, {x[2], x[3]});
  if (!hw.ok()) return hw.status();
  return Shape{x[0], x[1], (*hw)[0], (*hw)[1]};
}

Result<Shape> BatchNorm(const Node& n, const std::vector<const Shape*>& in) {
  const Shape& x = *in[0];
  if (x.size() < 2) return Bad(n, "input '" + n.inputs[0] + "' needs [N,C,...]");
  if (n.IntAttr("training_mode", 0) != 0) return Bad(n, "training_mode=1 is not supported");
  for (size_t i = 1; i < 5; ++i) {
    if (*in[i] != Shape{x[1]}) {
      return Bad(n, "'" + n.inputs[i] + "' is " + ShapeToString(*in[i]) + ", expected [" +
                        std::to_string(x[1]) + "] (one value per channel)");
    }
  }
  return x;
}

Result<Shape> Flatten(const Node& n, const Shape& x) {
  const int64_t axis = NormaliseAxis(n.IntAttr("axis", 1), static_cast<int64_t>(x.size()), true);
  if (axis < 0) {
    return Bad(n, "axis " + std::to_string(n.IntAttr("axis", 1)) + " out of range for " +
                      ShapeToString(x));
  }
  const auto a = static_cast<size_t>(axis);
  return Shape{Product(x, 0, a), Product(x, a, x.size())};
}

Result<Shape> LayerNorm(const Node& n, const std::vector<const Shape*>& in) {
  const Shape& x = *in[0];
  const int64_t axis = NormaliseAxis(n.IntAttr("axis", -1), static_cast<int64_t>(x.size()));
  if (axis < 0) return Bad(n, "axis out of range for " + ShapeToString(x));
  const Shape norm(x.begin() + axis, x.end());
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i] != nullptr && *in[i] != norm &&
        !(in[i]->size() == 1 && (*in[i])[0] == Product(norm, 0, norm.size()))) {
      return Bad(n, "'" + n.inputs[i] + "' is " + ShapeToString(*in[i]) + ", expected " +
                        ShapeToString(norm));
    }
  }
  return x;
}

}  // namespace

int64_t NormaliseAxis(int64_t axis, int64_t rank, bool allow_rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a > rank || (a == rank && !allow_rank)) return -1;
  return a;
}

Result<Window2d> ReadWindow(const Node& n, std::array<int64_t, 2> kernel_hw) {
  Window2d w;
  const std::vector<int64_t> ks = n.IntsAttr("kernel_shape");
  if (!ks.empty()) {
    if (ks.size() != 2) return Bad(n, "kernel_shape must have 2 values");
    if (kernel_hw[0] != 0 && (ks[0] != kernel_hw[0] || ks[1] != kernel_hw[1])) {
      return Bad(n, "kernel_shape " + ShapeToString(ks) + " disagrees with the weights' " +
                        ShapeToString({kernel_hw[0], kernel_hw[1]}));
    }
    kernel_hw = {ks[0], ks[1]};
  } else if (kernel_hw[0] == 0) {
    return Bad(n, "kernel_shape is required");
  }
  w.kernel = kernel_hw;
  const std::vector<int64_t> pads = n.IntsAttr("pads", {0, 0, 0, 0});
  const std::vector<int64_t> strides = n.IntsAttr("strides", {1, 1});
  const std::vector<int64_t> dil = n.IntsAttr("dilations", {1, 1});
  if (pads.size() != 4) return Bad(n, "pads must have 4 values [top,left,bottom,right]");
  if (strides.size() != 2) return Bad(n, "strides must have 2 values");
  if (dil.size() != 2) return Bad(n, "dilations must have 2 values");
  for (int i = 0; i < 2; ++i) {
    w.pad_begin[i] = pads[i];
    w.pad_end[i] = pads[i + 2];
    w.strides[i] = strides[i];
    w.dilations[i] = dil[i];
    if (w.kernel[i] < 1) return Bad(n, "kernel sizes must be >= 1");
    if (w.strides[i] < 1) return Bad(n, "strides must be >= 1");
    if (w.dilations[i] < 1) return Bad(n, "dilations must be >= 1");
    if (w.pad_begin[i] < 0 || w.pad_end[i] < 0) return Bad(n, "pads must be >= 0");
  }
  // Far above any real network; keeps the window arithmetic clear of int64 overflow.
  constexpr int64_t kMax = int64_t{1} << 20;
  for (int i = 0; i < 2; ++i) {
    if (w.kernel[i] > kMax || w.strides[i] > kMax || w.dilations[i] > kMax ||
        w.pad_begin[i] > kMax || w.pad_end[i] > kMax) {
      return Bad(n, "kernel, strides, dilations and pads must be below 2^20");
    }
  }
  w.group = n.IntAttr("group", 1);
  return w;
}

Result<std::array<int64_t, 2>> WindowOutput(const Node& n, const Window2d& w,
                                            std::array<int64_t, 2> in_hw) {
  std::array<int64_t, 2> out{};
  for (int i = 0; i < 2; ++i) {
    const int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1;
    const int64_t padded = in_hw[i] + w.pad_begin[i] + w.pad_end[i];
    if (padded < span) {
      return Bad(n, "window " + std::to_string(span) + " is larger than the padded input (" +
                        std::to_string(padded) + ") in dimension " + std::to_string(i + 2));
    }
    out[i] = (padded - span) / w.strides[i] + 1;
  }
  return out;
}

Result<std::vector<int64_t>> InferNodeShape(const Graph& g, const Node& n,
                                            const std::vector<const std::vector<int64_t>*>& in) {
  switch (n.op) {
    case OpType::kGemm:
      return Gemm(n, in);
    case OpType::kMatMul:
      return MatMul(n, in);
    case OpType::kAdd:
      return Broadcast(n, *in[0], *in[1]);
    case OpType::kRelu:
      return *in[0];
    case OpType::kConv:
      return Conv(n, in);
    case OpType::kBatchNormalization:
      return BatchNorm(n, in);
    case OpType::kMaxPool:
    case OpType::kAveragePool:
      return Pool(n, in);
    case OpType::kGlobalAveragePool: {
      const Shape& x = *in[0];
      if (x.size() < 3) return Bad(n, "input '" + n.inputs[0] + "' needs [N,C,H,...]");
      Shape out = x;
      std::fill(out.begin() + 2, out.end(), 1);
      return out;
    }
    case OpType::kFlatten:
      return Flatten(n, *in[0]);
    case OpType::kLayerNormalization:
      return LayerNorm(n, in);
    case OpType::kSoftmax: {
      const Shape& x = *in[0];
      if (NormaliseAxis(n.IntAttr("axis", -1), static_cast<int64_t>(x.size())) < 0) {
        return Bad(n, "axis " + std::to_string(n.IntAttr("axis", -1)) + " out of range for " +
                          ShapeToString(x));
      }
      return x;
    }
    default:
      break;
  }
  (void)g;
  return Bad(n, "no shape rule");
}

}  // namespace shoal::inference
