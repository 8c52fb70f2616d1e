#include "shoal/serving/graph/fold_constants.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "shoal/serving/graph/ops.h"
#include "shoal/serving/graph/shape_inference.h"

namespace shoal::inference {
namespace {

// A folded tensor never exceeds this many elements (a mask [1,1,S,S] at S = 1024 is 1 M).
constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;

struct Known {
  const Initializer* init = nullptr;  // a graph initializer (values converted on first use)
  bool is_int = false;
  bool converted = false;
  std::vector<double> values;
  std::vector<int64_t> ints;
};

int64_t ToInt(double v) {
  if (v >= 9.2e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

void Convert(Known& k) {
  if (k.converted) return;
  k.converted = true;
  if (k.init == nullptr) return;
  if (k.is_int) {
    k.ints = k.init->ints;
    k.values.assign(k.ints.begin(), k.ints.end());
  } else {
    k.values.assign(k.init->floats.begin(), k.init->floats.end());
    for (double v : k.values) k.ints.push_back(ToInt(v));
  }
}

}  // namespace

Result<FoldedGraph> FoldConstants(const Graph& g, int64_t batch) {
  if (batch <= 0) return InvalidArgument("batch must be > 0");
  FoldedGraph f;
  f.batch = batch;
  std::map<std::string, Known, std::less<>> known;
  for (const auto& [name, init] : g.initializers) {
    f.shapes[name] = init.shape;
    Known k;
    k.init = &init;
    k.is_int = init.is_int();
    known.emplace(name, std::move(k));
  }
  for (const ValueInfo& in : g.inputs) {
    std::vector<int64_t> s = in.shape;
    s[0] = batch;
    f.shapes[in.name] = s;
  }
  std::set<std::string> folded;  // tensors computed here
  for (const Node& n : g.nodes) {
    std::vector<const std::vector<int64_t>*> in_shapes_p;
    ops::Io<double> io;
    bool all_known = true, first_int = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const std::string& t = n.inputs[i];
      if (t.empty()) {
        io.in_shapes.emplace_back();
        io.in_ints.push_back(nullptr);
        in_shapes_p.push_back(nullptr);
        continue;
      }
      auto s = f.shapes.find(t);
      if (s == f.shapes.end()) {
        return InvalidArgument(NodeLabel(n) + ": input '" + t + "' has no shape");
      }
      io.in_shapes.push_back(s->second);
      in_shapes_p.push_back(&s->second);
      auto k = known.find(t);
      if (k == known.end()) {
        all_known = false;
        io.in_ints.push_back(nullptr);
        continue;
      }
      if (i == 0) first_int = k->second.is_int;
      // Only small tensors are converted for their integer values (weights never are).
      if (ops::Numel(s->second) <= 64 || k->second.init == nullptr) {
        Convert(k->second);
        io.in_ints.push_back(&k->second.ints);
      } else {
        io.in_ints.push_back(nullptr);
      }
    }
    if (n.op == OpType::kShape) all_known = true;
    std::vector<std::vector<int64_t>> outs;
    if (ops::HasKernel(n.op)) {
      io.int_math = first_int;
      SHOAL_RETURN_IF_ERROR(ops::Eval(n, io));
      outs = io.out_shapes;
      int64_t total = 0;
      for (const auto& s : outs) {
        int64_t numel = 1;
        for (int64_t d : s) {
          if (d < 0 || __builtin_mul_overflow(numel, d, &numel) || numel > (int64_t{1} << 40)) {
            return InvalidArgument(NodeLabel(n) + ": output shape " + ShapeToString(s) +
                                   " is invalid or too large");
          }
        }
        total += numel;
      }
      if (all_known && total <= kMaxFoldedElements) {
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          if (n.inputs[i].empty() || n.op == OpType::kShape) {
            io.in.push_back(nullptr);
            continue;
          }
          Known& k = known.at(n.inputs[i]);
          Convert(k);
          io.in.push_back(k.values.data());
        }
        std::vector<std::vector<double>> values(outs.size());
        for (size_t i = 0; i < outs.size(); ++i) {
          values[i].resize(static_cast<size_t>(ops::Numel(outs[i])));
          io.out.push_back(values[i].data());
        }
        SHOAL_RETURN_IF_ERROR(ops::Eval(n, io));
        bool is_int = ops::OutputIsInt(n, first_int);
        if (n.op == OpType::kWhere) is_int = known.at(n.inputs[1]).is_int;
        for (size_t i = 0; i < outs.size(); ++i) {
          Known k;
          k.is_int = is_int;
          k.converted = true;
          k.values = std::move(values[i]);
          for (double v : k.values) k.ints.push_back(ToInt(v));
          known[n.outputs[i]] = std::move(k);
          folded.insert(n.outputs[i]);
          f.shapes[n.outputs[i]] = outs[i];
        }
        continue;
      }
    } else {
      auto s = InferNodeShape(g, n, in_shapes_p);
      if (!s.ok()) return s.status();
      outs = {*s};
    }
    for (size_t i = 0; i < outs.size() && i < n.outputs.size(); ++i) {
      f.shapes[n.outputs[i]] = outs[i];
    }
    f.nodes.push_back(n);
  }
  for (const Node& n : f.nodes) {
    for (const std::string& t : n.inputs) {
      if (folded.count(t) == 0 || f.constants.count(t) != 0) continue;
      const Known& k = known.at(t);
      Initializer init;
      init.shape = f.shapes.at(t);
      if (k.is_int) {
        init.ints = k.ints;
      } else {
        init.floats.assign(k.values.begin(), k.values.end());
      }
      f.constants.emplace(t, std::move(init));
    }
  }
  for (const ValueInfo& out : g.outputs) {
    if (folded.count(out.name) != 0) {
      return InvalidArgument("graph output '" + out.name + "' does not depend on the input");
    }
  }
  return f;
}

}  // namespace shoal::inference
