// Plain C++ kernels for the operators that oneDNN has no primitive for (data movement, shape
// arithmetic, comparisons, broadcasting element-wise math), on row-major tensors. One function
// per operator computes the output shapes and, when given buffers, the values: the constant
// folder runs them in double at load (fold_constants.h), the CPU executor runs them in float as
// plan steps. Integer tensors are held as values of T (exact below 2^24 in float, 2^53 in
// double); booleans as 0 and 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shoal/serving/graph/graph.h"

namespace shoal::inference::ops {

using Shape = std::vector<int64_t>;

template <typename T>
struct Io {
  std::vector<Shape> in_shapes;  // one per node input ({} for an omitted optional one)
  // The values of the inputs known at load (initializers, folded tensors) as integers; nullptr
  // where not known. Axes, starts, perm, shapes, pads must be known.
  std::vector<const std::vector<int64_t>*> in_ints;
  std::vector<const T*> in;       // empty: shapes only
  std::vector<Shape> out_shapes;  // set by Eval
  std::vector<T*> out;            // set by the caller (after the shapes) to compute values
  bool int_math = false;          // the first input holds integers (Div truncates, Mod floors)
};

// Whether `op` has a kernel here.
bool HasKernel(OpType op);
// Whether the output of `op` holds integers (or booleans) given whether its first input does.
bool OutputIsInt(const Node& n, bool first_input_is_int);

// Computes io.out_shapes; when io.out is non-empty, also the output values. Errors name the node.
template <typename T>
Status Eval(const Node& n, Io<T>& io);

extern template Status Eval<float>(const Node& n, Io<float>& io);
extern template Status Eval<double>(const Node& n, Io<double>& io);

// The element-wise family (ops_math.cc); ops_shape.cc has the rest and Eval.
template <typename T>
Status EvalMath(const Node& n, Io<T>& io);
bool IsMathOp(OpType op);

int64_t Numel(const Shape& s);

}  // namespace shoal::inference::ops
