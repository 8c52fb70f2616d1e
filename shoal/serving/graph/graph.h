// A small in-memory model graph (nodes, tensors, shapes, dtypes) in plain C++: what the
// executors run. Built from ONNX files (onnx.h) and from Shoal's own FL architectures
// (architectures_graph.h, model_graph.h). No protobuf, no libuv: it builds with a C++ compiler
// alone (library shoal_inference_graph), so the GPU-only build (CUDA + CMake) has it too.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shoal/common/dtype.h"
#include "shoal/common/status.h"

namespace shoal::inference {

// Element types an executor reads or writes: Shoal's one DType. Weights are held as float32 in
// the graph; an executor may run in a narrower precision (ExecutorOptions::precision).
using shoal::DType;
std::string_view OipDatatype(DType t);  // the OIP spelling: "FP32", "FP16", "BF16", "INT64"

// The operators Shoal runs: MLPs, CNNs (ResNet, MobileNet, EfficientNet) and transformers
// (ViT, BERT, GPT-2) as torch.onnx.export writes them. ONNX semantics (opset 13, and 17 for
// LayerNormalization) for each, including attributes and their defaults. The operators after
// kSoftmax have a plain C++ kernel (ops.h) that also folds them at load where their inputs are
// constants (shape subgraphs: fold_constants.h).
enum class OpType : uint8_t {
  kGemm,
  kMatMul,
  kAdd,
  kRelu,
  kConv,
  kBatchNormalization,
  kMaxPool,
  kAveragePool,
  kGlobalAveragePool,
  kFlatten,
  kReshape,
  kSoftmax,
  kLayerNormalization,
  // plain kernels (ops.h)
  kIdentity,
  kDropout,
  kShape,
  kGather,
  kGatherElements,
  kConcat,
  kSlice,
  kSplit,
  kTranspose,
  kUnsqueeze,
  kSqueeze,
  kExpand,
  kConstantOfShape,
  kRange,
  kCast,
  kWhere,
  kEqual,
  kLess,
  kLessOrEqual,
  kGreater,
  kGreaterOrEqual,
  kNot,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMod,
  kMin,
  kMax,
  kSqrt,
  kErf,
  kTanh,
  kSigmoid,
  kExp,
  kNeg,
  kHardSwish,
  kHardSigmoid,
  kClip,
  kReduceMean,
  kPad,
};
std::string_view OpTypeName(OpType op);  // the ONNX op_type, "Gemm"
// kInvalidArgument "unsupported operator 'LSTM' (node 'lstm_1')" when not one of the above.
Result<OpType> OpTypeFromName(std::string_view op_type, std::string_view node_name);

using AttributeValue = std::variant<int64_t, float, std::vector<int64_t>, std::vector<float>>;

struct Node {
  OpType op;
  std::string name;                 // unique within the graph (generated when ONNX has none)
  std::vector<std::string> inputs;  // tensor names; "" for an omitted optional input
  std::vector<std::string> outputs;
  std::map<std::string, AttributeValue> attributes;

  int64_t IntAttr(std::string_view key, int64_t fallback) const;
  float FloatAttr(std::string_view key, float fallback) const;
  std::vector<int64_t> IntsAttr(std::string_view key, std::vector<int64_t> fallback = {}) const;
};
// "node '<name>' (<op_type>)": how an error names a node.
std::string NodeLabel(const Node& n);

// A graph input or output. A dimension of -1 is the batch dimension (dynamic).
struct ValueInfo {
  std::string name;
  DType type = DType::kF32;
  std::vector<int64_t> shape;
};

// A constant tensor (weights, biases, reshape targets). float32 or int64 values.
struct Initializer {
  std::vector<int64_t> shape;
  std::vector<float> floats;  // set for float tensors
  std::vector<int64_t> ints;  // set for int64 tensors (Reshape's shape)
  bool is_int() const { return !ints.empty() || floats.empty(); }
};

struct Graph {
  std::string name;
  std::vector<ValueInfo> inputs;  // the graph's runtime inputs (not initializers)
  std::vector<ValueInfo> outputs;
  std::map<std::string, Initializer, std::less<>> initializers;
  std::vector<Node> nodes;  // topologically sorted after Validate()

  // Checks every node's operator, arity and attributes, that every tensor is produced once
  // before it is used, and infers every intermediate shape; sorts the nodes topologically,
  // names unnamed nodes and fills in the outputs' shapes. Every tensor must keep the batch as
  // its first dimension (what lets executors run any batch with one plan) and stay below 2^40
  // elements. Errors name the node and the tensor.
  Status Validate();
  // Shapes of every tensor for a given batch size (after Validate), shape subgraphs folded for
  // that batch (fold_constants.h).
  Result<std::map<std::string, std::vector<int64_t>>> InferShapes(int64_t batch) const;
  // Replaces the float values of the initializers whose names appear in `weights` (same shape
  // and element count required: kInvalidArgument naming the tensor otherwise). This is how a
  // new FL model version reaches an inference graph.
  Status SetWeights(const std::map<std::string, std::vector<float>, std::less<>>& weights);
};

// Folds every BatchNormalization that follows a Conv (or a Gemm with a constant B) into that
// node's weights and bias and removes it. Done at load, before an executor sees the graph. The
// folded weights are renamed "<name>.bn_folded": their values are no longer the model's, so
// SetWeights on a folded graph refuses the old names (set weights, then fold a fresh copy).
Status FoldBatchNorm(Graph& graph);
inline constexpr char kFoldedSuffix[] = ".bn_folded";

// "[1,3,224,224]"
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace shoal::inference
