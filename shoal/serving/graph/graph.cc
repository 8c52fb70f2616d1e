#include "shoal/serving/graph/graph.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <utility>

#include "shoal/common/enum_names.h"
#include "shoal/serving/graph/fold_constants.h"
#include "shoal/serving/graph/shape_inference.h"

namespace shoal::inference {
namespace {

constexpr EnumName<OpType> kOpNames[] = {
    {OpType::kGemm, "Gemm"},
    {OpType::kMatMul, "MatMul"},
    {OpType::kAdd, "Add"},
    {OpType::kRelu, "Relu"},
    {OpType::kConv, "Conv"},
    {OpType::kBatchNormalization, "BatchNormalization"},
    {OpType::kMaxPool, "MaxPool"},
    {OpType::kAveragePool, "AveragePool"},
    {OpType::kGlobalAveragePool, "GlobalAveragePool"},
    {OpType::kFlatten, "Flatten"},
    {OpType::kReshape, "Reshape"},
    {OpType::kSoftmax, "Softmax"},
    {OpType::kLayerNormalization, "LayerNormalization"},
    {OpType::kIdentity, "Identity"},
    {OpType::kDropout, "Dropout"},
    {OpType::kShape, "Shape"},
    {OpType::kGather, "Gather"},
    {OpType::kGatherElements, "GatherElements"},
    {OpType::kConcat, "Concat"},
    {OpType::kSlice, "Slice"},
    {OpType::kSplit, "Split"},
    {OpType::kTranspose, "Transpose"},
    {OpType::kUnsqueeze, "Unsqueeze"},
    {OpType::kSqueeze, "Squeeze"},
    {OpType::kExpand, "Expand"},
    {OpType::kConstantOfShape, "ConstantOfShape"},
    {OpType::kRange, "Range"},
    {OpType::kCast, "Cast"},
    {OpType::kWhere, "Where"},
    {OpType::kEqual, "Equal"},
    {OpType::kLess, "Less"},
    {OpType::kLessOrEqual, "LessOrEqual"},
    {OpType::kGreater, "Greater"},
    {OpType::kGreaterOrEqual, "GreaterOrEqual"},
    {OpType::kNot, "Not"},
    {OpType::kSub, "Sub"},
    {OpType::kMul, "Mul"},
    {OpType::kDiv, "Div"},
    {OpType::kPow, "Pow"},
    {OpType::kMod, "Mod"},
    {OpType::kMin, "Min"},
    {OpType::kMax, "Max"},
    {OpType::kSqrt, "Sqrt"},
    {OpType::kErf, "Erf"},
    {OpType::kTanh, "Tanh"},
    {OpType::kSigmoid, "Sigmoid"},
    {OpType::kExp, "Exp"},
    {OpType::kNeg, "Neg"},
    {OpType::kHardSwish, "HardSwish"},
    {OpType::kHardSigmoid, "HardSigmoid"},
    {OpType::kClip, "Clip"},
    {OpType::kReduceMean, "ReduceMean"},
    {OpType::kPad, "Pad"},
};

// Inputs (min, max, where "" counts as given) and outputs (min, max) each operator takes.
struct Arity {
  size_t min_in, max_in, min_out, max_out;
};

Arity ArityOf(OpType op) {
  switch (op) {
    case OpType::kGemm:
    case OpType::kConv:
    case OpType::kLayerNormalization:
      return {2, 3, 1, 1};
    case OpType::kMatMul:
    case OpType::kAdd:
    case OpType::kReshape:
    case OpType::kSub:
    case OpType::kMul:
    case OpType::kDiv:
    case OpType::kPow:
    case OpType::kMod:
    case OpType::kEqual:
    case OpType::kLess:
    case OpType::kLessOrEqual:
    case OpType::kGreater:
    case OpType::kGreaterOrEqual:
    case OpType::kGather:
    case OpType::kGatherElements:
    case OpType::kExpand:
      return {2, 2, 1, 1};
    case OpType::kBatchNormalization:
      return {5, 5, 1, 1};
    case OpType::kWhere:
    case OpType::kRange:
      return {3, 3, 1, 1};
    case OpType::kSlice:
      return {3, 5, 1, 1};
    case OpType::kConcat:
    case OpType::kMin:
    case OpType::kMax:
      return {1, 1024, 1, 1};
    case OpType::kSplit:
      return {1, 2, 1, 1024};
    case OpType::kDropout:
      return {1, 3, 1, 1};
    case OpType::kUnsqueeze:
    case OpType::kSqueeze:
    case OpType::kReduceMean:
      return {1, 2, 1, 1};
    case OpType::kClip:
      return {1, 3, 1, 1};
    case OpType::kPad:
      return {2, 4, 1, 1};
    default:
      return {1, 1, 1, 1};
  }
}

// Every tensor stays below this many elements (counting non-zero dimensions), so no product of
// dimensions anywhere overflows int64, whatever a file claims.
constexpr int64_t kMaxElements = int64_t{1} << 40;

bool SizeOk(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxElements) return false;
    if (d != 0 && (__builtin_mul_overflow(n, d, &n) || n > kMaxElements)) return false;
  }
  return true;
}

// Kahn's algorithm over tensors: a node is ready once every input it reads exists. Keeps the
// given order among ready nodes, so an already sorted graph stays as it is.
Status SortTopologically(Graph& g) {
  std::set<std::string, std::less<>> available;
  for (const ValueInfo& in : g.inputs) available.insert(in.name);
  for (const auto& [name, init] : g.initializers) available.insert(name);
  std::set<std::string, std::less<>> produced;
  for (const Node& n : g.nodes) {
    for (const std::string& out : n.outputs) {
      if (available.count(out) != 0 || !produced.insert(out).second) {
        return InvalidArgument(NodeLabel(n) + ": tensor '" + out +
                               "' is produced more than once (or is also an input/initializer)");
      }
    }
  }
  std::vector<Node> sorted;
  std::vector<bool> done(g.nodes.size(), false);
  sorted.reserve(g.nodes.size());
  while (sorted.size() < g.nodes.size()) {
    bool progress = false;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (done[i]) continue;
      const Node& n = g.nodes[i];
      const bool ready = std::all_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& t) {
        return t.empty() || available.count(t) != 0;
      });
      if (!ready) continue;
      for (const std::string& out : n.outputs) available.insert(out);
      sorted.push_back(n);
      done[i] = true;
      progress = true;
    }
    if (!progress) break;
  }
  if (sorted.size() != g.nodes.size()) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (done[i]) continue;
      for (const std::string& t : g.nodes[i].inputs) {
        if (t.empty() || available.count(t) != 0) continue;
        const bool will = produced.count(t) != 0;
        return InvalidArgument(NodeLabel(g.nodes[i]) + ": input '" + t + "' " +
                               (will ? "is part of a cycle"
                                     : "is neither a graph input, an initializer nor a node's "
                                       "output"));
      }
    }
  }
  g.nodes = std::move(sorted);
  for (const ValueInfo& out : g.outputs) {
    if (available.count(out.name) == 0) {
      return InvalidArgument("graph output '" + out.name + "' is not produced by any node");
    }
  }
  return {};
}

Status CheckArity(const Node& n) {
  const Arity a = ArityOf(n.op);
  if (n.inputs.size() < a.min_in || n.inputs.size() > a.max_in) {
    std::string range = std::to_string(a.min_in);
    if (a.max_in != a.min_in) range.append("-").append(std::to_string(a.max_in));
    return InvalidArgument(NodeLabel(n) + ": takes " + range + " inputs, has " +
                           std::to_string(n.inputs.size()));
  }
  for (size_t i = 0; i < a.min_in; ++i) {
    if (n.inputs[i].empty()) {
      return InvalidArgument(NodeLabel(n) + ": required input " + std::to_string(i) +
                             " is missing");
    }
  }
  if (n.outputs.size() < a.min_out || n.outputs.size() > a.max_out || n.outputs[0].empty()) {
    return InvalidArgument(NodeLabel(n) + ": has " + std::to_string(n.outputs.size()) +
                           " outputs; Shoal supports exactly " + std::to_string(a.min_out) +
                           " (optional outputs such as MaxPool's Indices are not supported)");
  }
  return {};
}

}  // namespace

std::string NodeLabel(const Node& n) {
  return "node '" + n.name + "' (" + std::string(OpTypeName(n.op)) + ")";
}

std::string_view OipDatatype(DType t) {
  constexpr std::string_view kOip[] = {"FP32", "BF16", "FP16", "INT64"};  // by DType's value
  const auto i = static_cast<size_t>(t);
  return i < std::size(kOip) ? kOip[i] : "?";
}

std::string_view OpTypeName(OpType op) { return NameOf(kOpNames, op, "?"); }

Result<OpType> OpTypeFromName(std::string_view op_type, std::string_view node_name) {
  if (const auto op = ValueOf(kOpNames, op_type)) return *op;
  return InvalidArgument("unsupported operator '" + std::string(op_type) + "' (node '" +
                         std::string(node_name) + "')");
}

int64_t Node::IntAttr(std::string_view key, int64_t fallback) const {
  auto it = attributes.find(std::string(key));
  if (it == attributes.end()) return fallback;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return fallback;
}

float Node::FloatAttr(std::string_view key, float fallback) const {
  auto it = attributes.find(std::string(key));
  if (it == attributes.end()) return fallback;
  if (const auto* v = std::get_if<float>(&it->second)) return *v;
  if (const auto* i = std::get_if<int64_t>(&it->second)) return static_cast<float>(*i);
  return fallback;
}

std::vector<int64_t> Node::IntsAttr(std::string_view key, std::vector<int64_t> fallback) const {
  auto it = attributes.find(std::string(key));
  if (it == attributes.end()) return fallback;
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return fallback;
}

Status Graph::Validate() {
  if (inputs.empty()) return InvalidArgument("graph '" + name + "' has no inputs");
  if (outputs.empty()) return InvalidArgument("graph '" + name + "' has no outputs");
  for (const ValueInfo& in : inputs) {
    if (in.type != DType::kF32) {
      return InvalidArgument("graph input '" + in.name + "' is " +
                             std::string(OipDatatype(in.type)) +
                             "; only FP32 inputs are supported");
    }
    if (in.shape.empty()) return InvalidArgument("graph input '" + in.name + "' has no shape");
    for (size_t d = 1; d < in.shape.size(); ++d) {
      if (in.shape[d] <= 0) {
        return InvalidArgument("graph input '" + in.name + "': dimension " + std::to_string(d) +
                               " must be fixed (only the batch dimension 0 may be dynamic)");
      }
    }
  }
  for (const auto& [tensor, init] : initializers) {
    if (!SizeOk(init.shape)) return InvalidArgument("initializer '" + tensor + "' is too large");
    int64_t n = 1;
    for (int64_t d : init.shape) n *= d;
    const size_t have = init.is_int() ? init.ints.size() : init.floats.size();
    if (have != static_cast<size_t>(n)) {
      return InvalidArgument("initializer '" + tensor + "' has " + std::to_string(have) +
                             " values for shape " + ShapeToString(init.shape));
    }
  }
  // Name nodes that came without one, so every later error can point at a node.
  std::set<std::string> names;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (n.name.empty()) n.name = std::string(OpTypeName(n.op)) + "_" + std::to_string(i);
    if (!names.insert(n.name).second) {
      return InvalidArgument("node name '" + n.name + "' is used twice");
    }
    SHOAL_RETURN_IF_ERROR(CheckArity(n));
  }
  SHOAL_RETURN_IF_ERROR(SortTopologically(*this));
  // Batch 1 and 2 both infer, and the output keeps the batch as its leading dimension: the
  // executors build one plan per batch size and hand back batch-major rows.
  auto one = InferShapes(1);
  if (!one.ok()) return one.status();
  auto two = InferShapes(2);
  if (!two.ok()) return two.status();
  for (const ValueInfo& out : outputs) {
    const auto& s1 = one->at(out.name);
    const auto& s2 = two->at(out.name);
    bool keeps = !s1.empty() && s1.size() == s2.size() && s1[0] == 1 && s2[0] == 2 &&
                 std::equal(s1.begin() + 1, s1.end(), s2.begin() + 1);
    if (!keeps) {
      return InvalidArgument("tensor '" + out.name + "' does not keep the batch as its first " +
                             "dimension (shape " + ShapeToString(s1) +
                             " at batch 1); Shoal's executors need batch-major tensors");
    }
  }
  for (ValueInfo& out : outputs) {
    const auto& s = one->at(out.name);
    if (!out.shape.empty()) {
      bool match = out.shape.size() == s.size();
      for (size_t d = 1; match && d < s.size(); ++d) {
        match = out.shape[d] <= 0 || out.shape[d] == s[d];
      }
      if (!match) {
        return InvalidArgument("graph output '" + out.name + "' is declared " +
                               ShapeToString(out.shape) + " but the nodes give " +
                               ShapeToString(s) + " at batch 1");
      }
    }
    out.shape = s;
    out.shape[0] = -1;
    out.type = DType::kF32;
  }
  return {};
}

Result<std::map<std::string, std::vector<int64_t>>> Graph::InferShapes(int64_t batch) const {
  if (batch <= 0) return InvalidArgument("batch must be > 0");
  for (const auto& [n, init] : initializers) {
    if (!SizeOk(init.shape)) return InvalidArgument("initializer '" + n + "' is too large");
  }
  for (const ValueInfo& in : inputs) {
    std::vector<int64_t> s = in.shape;
    s[0] = batch;  // dimension 0 is the batch, whatever the file fixed it to
    if (!SizeOk(s)) return InvalidArgument("graph input '" + in.name + "' is too large");
  }
  auto folded = FoldConstants(*this, batch);
  if (!folded.ok()) return folded.status();
  for (const auto& [tensor, shape] : folded->shapes) {
    if (!SizeOk(shape)) {
      return InvalidArgument("tensor '" + tensor + "' " + ShapeToString(shape) + " is too large");
    }
  }
  return std::move(folded->shapes);
}

Status Graph::SetWeights(const std::map<std::string, std::vector<float>, std::less<>>& weights) {
  // Check everything before changing anything: a rejected version leaves the graph as it was.
  for (const auto& [tensor, values] : weights) {
    auto it = initializers.find(tensor);
    if (it == initializers.end()) {
      const bool folded = initializers.count(tensor + kFoldedSuffix) != 0;
      return InvalidArgument(
          "tensor '" + tensor + "' is not an initializer of graph '" + name + "'" +
          (folded ? " (it was folded with a BatchNormalization: set weights on the unfolded "
                    "graph, then fold again)"
                  : ""));
    }
    const Initializer& init = it->second;
    if (init.is_int()) {
      return InvalidArgument("tensor '" + tensor + "' is an INT64 initializer, not weights");
    }
    if (values.size() != init.floats.size()) {
      return InvalidArgument("tensor '" + tensor + "': " + std::to_string(values.size()) +
                             " values given, the graph's shape " + ShapeToString(init.shape) +
                             " holds " + std::to_string(init.floats.size()));
    }
  }
  for (const auto& [tensor, values] : weights) {
    initializers.find(tensor)->second.floats = values;
  }
  return {};
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace shoal::inference
