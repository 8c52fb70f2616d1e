#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h

#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <type_traits>

#include "shoal/serving/onnx/onnx.h"

namespace shoal::inference {
namespace {

// ONNX operator semantics Shoal implements are opset 13's; older files whose operators did not
// change meaning load too (Softmax before 13 is handled below).
constexpr int64_t kMinOpset = 7;

std::string DataTypeName(int t) {
  const std::string& n = onnx::TensorProto_DataType_Name(t);
  return n.empty() ? std::to_string(t) : n;
}

Result<Initializer> ToInitializer(const onnx::TensorProto& t, const std::string& name) {
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    return InvalidArgument("initializer '" + name +
                           "' keeps its data in an external file; save the model with the "
                           "weights inside it");
  }
  Initializer init;
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) return InvalidArgument("initializer '" + name + "' has a negative dimension");
    if (d > (int64_t{1} << 34)) return InvalidArgument("initializer '" + name + "' is too large");
    init.shape.push_back(d);
    numel = d == 0 ? 0 : numel * d;
    if (numel > (int64_t{1} << 34))
      return InvalidArgument("initializer '" + name + "' is too large");
  }
  const auto n = static_cast<size_t>(numel);
  auto sizes = [&](size_t have, const char* field) -> Status {
    if (have == n) return {};
    return InvalidArgument("initializer '" + name + "': " + std::to_string(have) + " values in " +
                           field + " but shape " + ShapeToString(init.shape) + " needs " +
                           std::to_string(n));
  };
  // The values, from raw_data (little-endian) or from the typed field (`typed`, named `field`).
  auto values = [&](auto* out, const auto& typed, const char* field) -> Status {
    using T = typename std::remove_pointer_t<decltype(out)>::value_type;
    if (t.has_raw_data()) {
      if (t.raw_data().size() != n * sizeof(T)) {
        return InvalidArgument("initializer '" + name +
                               "': " + std::to_string(t.raw_data().size()) +
                               " bytes of raw_data but shape " + ShapeToString(init.shape) +
                               " needs " + std::to_string(n * sizeof(T)));
      }
      out->resize(n);
      std::memcpy(out->data(), t.raw_data().data(), n * sizeof(T));
      return {};
    }
    SHOAL_RETURN_IF_ERROR(sizes(static_cast<size_t>(typed.size()), field));
    out->assign(typed.begin(), typed.end());
    return {};
  };
  if (t.data_type() == onnx::TensorProto_DataType_FLOAT) {
    SHOAL_RETURN_IF_ERROR(values(&init.floats, t.float_data(), "float_data"));
    return init;
  }
  if (t.data_type() == onnx::TensorProto_DataType_INT64) {
    SHOAL_RETURN_IF_ERROR(values(&init.ints, t.int64_data(), "int64_data"));
    return init;
  }
  // Narrower integers, booleans and doubles (masks and shape constants) are held as INT64 and
  // FLOAT values.
  auto widen = [&](auto sample, const auto& typed, const char* field, bool to_int) -> Status {
    using T = decltype(sample);
    std::vector<T> v;
    if (t.has_raw_data()) {
      if (t.raw_data().size() != n * sizeof(T)) {
        return InvalidArgument("initializer '" + name + "': raw_data has the wrong size");
      }
      v.resize(n);
      std::memcpy(v.data(), t.raw_data().data(), n * sizeof(T));
    } else {
      SHOAL_RETURN_IF_ERROR(sizes(static_cast<size_t>(typed.size()), field));
      v.assign(typed.begin(), typed.end());
    }
    if (to_int) {
      init.ints.assign(v.begin(), v.end());
    } else {
      init.floats.assign(v.begin(), v.end());
    }
    return {};
  };
  switch (t.data_type()) {
    case onnx::TensorProto_DataType_INT32:
      SHOAL_RETURN_IF_ERROR(widen(int32_t{}, t.int32_data(), "int32_data", true));
      return init;
    case onnx::TensorProto_DataType_BOOL:
    case onnx::TensorProto_DataType_UINT8:
      SHOAL_RETURN_IF_ERROR(widen(uint8_t{}, t.int32_data(), "int32_data", true));
      return init;
    case onnx::TensorProto_DataType_INT8:
      SHOAL_RETURN_IF_ERROR(widen(int8_t{}, t.int32_data(), "int32_data", true));
      return init;
    case onnx::TensorProto_DataType_DOUBLE:
      SHOAL_RETURN_IF_ERROR(widen(double{}, t.double_data(), "double_data", false));
      return init;
    default:
      break;
  }
  return InvalidArgument("initializer '" + name + "' is " + DataTypeName(t.data_type()) +
                         "; only FLOAT, DOUBLE, INT64, INT32, INT8, UINT8 and BOOL initializers "
                         "are supported");
}

// Constant nodes (opset 13: value, value_float(s), value_int(s)) become initializers: Reshape
// targets exported by PyTorch arrive this way.
Status AddConstant(const onnx::NodeProto& n, Graph& g) {
  if (n.output_size() != 1 || n.attribute_size() != 1) {
    return InvalidArgument("Constant node '" + n.name() + "' needs one output and one value");
  }
  const onnx::AttributeProto& a = n.attribute(0);
  Initializer init;
  if (a.name() == "value") {
    auto r = ToInitializer(a.t(), n.output(0));
    if (!r.ok()) return r.status();
    init = std::move(*r);
  } else if (a.name() == "value_ints") {
    init.ints.assign(a.ints().begin(), a.ints().end());
    init.shape = {static_cast<int64_t>(init.ints.size())};
  } else if (a.name() == "value_int") {
    init.ints = {a.i()};
  } else if (a.name() == "value_floats") {
    init.floats.assign(a.floats().begin(), a.floats().end());
    init.shape = {static_cast<int64_t>(init.floats.size())};
  } else if (a.name() == "value_float") {
    init.floats = {a.f()};
  } else {
    return InvalidArgument("Constant node '" + n.name() + "': attribute '" + a.name() +
                           "' is not supported");
  }
  g.initializers[n.output(0)] = std::move(init);
  return {};
}

Status ReadAttributes(const onnx::NodeProto& p, Node& node) {
  for (const onnx::AttributeProto& a : p.attribute()) {
    switch (a.type()) {
      case onnx::AttributeProto_AttributeType_INT:
        node.attributes[a.name()] = a.i();
        break;
      case onnx::AttributeProto_AttributeType_FLOAT:
        node.attributes[a.name()] = a.f();
        break;
      case onnx::AttributeProto_AttributeType_INTS:
        node.attributes[a.name()] = std::vector<int64_t>(a.ints().begin(), a.ints().end());
        break;
      case onnx::AttributeProto_AttributeType_FLOATS:
        node.attributes[a.name()] = std::vector<float>(a.floats().begin(), a.floats().end());
        break;
      case onnx::AttributeProto_AttributeType_TENSOR: {
        // ConstantOfShape's value: one element, kept as an INT or FLOAT attribute.
        auto v = ToInitializer(a.t(), node.name + "." + a.name());
        if (!v.ok()) return v.status();
        if (v->is_int() && v->ints.size() == 1) {
          node.attributes[a.name()] = v->ints[0];
        } else if (!v->is_int() && v->floats.size() == 1) {
          node.attributes[a.name()] = v->floats[0];
        } else {
          return InvalidArgument("node '" + node.name + "' (" + p.op_type() + "): attribute '" +
                                 a.name() + "' must hold one value");
        }
        break;
      }
      case onnx::AttributeProto_AttributeType_STRING:
        if (a.name() == "mode" && a.s() == "constant") break;  // Pad
        // auto_pad is the only string attribute of Shoal's operators; explicit pads are what
        // exporters write, SAME_* would need the input size here.
        if (a.name() == "auto_pad" && (a.s() == "NOTSET" || a.s() == "VALID")) break;
        return InvalidArgument("node '" + node.name + "' (" + p.op_type() + "): attribute " +
                               a.name() + "='" + a.s() +
                               "' is not supported (export with explicit pads)");
      default:
        return InvalidArgument("node '" + node.name + "' (" + p.op_type() + "): attribute '" +
                               a.name() + "' has a type Shoal does not read");
    }
  }
  return {};
}

Result<ValueInfo> ReadValueInfo(const onnx::ValueInfoProto& v, bool is_input) {
  ValueInfo info;
  info.name = v.name();
  const char* what = is_input ? "graph input '" : "graph output '";
  if (!v.type().has_tensor_type()) {
    return InvalidArgument(what + v.name() + "' is not a tensor");
  }
  const onnx::TypeProto_Tensor& t = v.type().tensor_type();
  if (t.elem_type() != onnx::TensorProto_DataType_FLOAT) {
    return InvalidArgument(what + v.name() + "' is " + DataTypeName(t.elem_type()) +
                           "; only float32 (FLOAT) inputs and outputs are supported");
  }
  if (t.has_shape()) {
    for (const auto& d : t.shape().dim())
      info.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
  }
  return info;
}

Result<Graph> Convert(const onnx::ModelProto& m) {
  if (!m.has_graph()) return InvalidArgument("not an ONNX model: no graph");
  int64_t opset = -1;
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  }
  if (opset < 0) opset = 1;  // IR < 3 files carry no opset_import
  if (opset < kMinOpset) {
    return InvalidArgument("opset " + std::to_string(opset) + " is too old (Shoal reads " +
                           std::to_string(kMinOpset) + " and newer; re-export with opset 13)");
  }
  const onnx::GraphProto& gp = m.graph();
  Graph g;
  g.name = gp.name().empty() ? "onnx" : gp.name();
  for (const onnx::TensorProto& t : gp.initializer()) {
    auto init = ToInitializer(t, t.name());
    if (!init.ok()) return init.status();
    g.initializers[t.name()] = std::move(*init);
  }
  for (const onnx::NodeProto& p : gp.node()) {
    if (p.op_type() == "Constant" && (p.domain().empty() || p.domain() == "ai.onnx")) {
      SHOAL_RETURN_IF_ERROR(AddConstant(p, g));
      continue;
    }
    const std::string name = p.name();
    if (!p.domain().empty() && p.domain() != "ai.onnx") {
      return InvalidArgument("unsupported operator '" + p.domain() + "." + p.op_type() +
                             "' (node '" + name + "')");
    }
    auto op = OpTypeFromName(p.op_type(), name);
    if (!op.ok()) return op.status();
    Node node{*op,
              name,
              {p.input().begin(), p.input().end()},
              {p.output().begin(), p.output().end()},
              {}};
    // Trailing optional outputs left empty by exporters do not count.
    while (node.outputs.size() > 1 && node.outputs.back().empty()) node.outputs.pop_back();
    SHOAL_RETURN_IF_ERROR(ReadAttributes(p, node));
    if (node.op == OpType::kReshape && node.inputs.size() < 2) {
      return InvalidArgument("node '" + name + "' (Reshape): the shape attribute of opset < 5 " +
                             "is not supported");
    }
    if (node.op == OpType::kSoftmax && opset < 13 && node.attributes.count("axis") == 0) {
      node.attributes["axis"] = int64_t{1};  // the old default
    }
    g.nodes.push_back(std::move(node));
  }
  for (const onnx::ValueInfoProto& v : gp.input()) {
    if (g.initializers.count(v.name()) != 0) continue;  // IR < 4 lists initializers as inputs
    auto info = ReadValueInfo(v, true);
    if (!info.ok()) return info.status();
    g.inputs.push_back(std::move(*info));
  }
  for (const onnx::ValueInfoProto& v : gp.output()) {
    auto info = ReadValueInfo(v, false);
    if (!info.ok()) return info.status();
    g.outputs.push_back(std::move(*info));
  }
  return g;
}

}  // namespace

Result<Graph> LoadOnnxBytes(std::string_view bytes, const OnnxLoadOptions& options) {
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return InvalidArgument("ONNX file is larger than 2 GiB (protobuf's limit)");
  }
  onnx::ModelProto m;
  if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return InvalidArgument(
        "not an ONNX model: the protobuf does not parse (truncated or not "
        "ONNX)");
  }
  auto g = Convert(m);
  if (!g.ok()) return g.status();
  SHOAL_RETURN_IF_ERROR(g->Validate());
  if (options.fold_batchnorm) {
    SHOAL_RETURN_IF_ERROR(FoldBatchNorm(*g));
    SHOAL_RETURN_IF_ERROR(g->Validate());
  }
  return g;
}

Result<Graph> LoadOnnx(const std::string& path, const OnnxLoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open ONNX file '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  auto g = LoadOnnxBytes(s.str(), options);
  if (!g.ok()) return Status(g.status().code(), path + ": " + g.status().message());
  return g;
}

}  // namespace shoal::inference
