#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h

#include <fstream>
#include <iterator>
#include <map>
#include <type_traits>

#include "shoal/serving/onnx/onnx.h"

namespace shoal::inference {
namespace {

constexpr int64_t kIrVersion = 8;
constexpr int64_t kOpset = 13;

void SetShape(onnx::ValueInfoProto& v, const std::vector<int64_t>& shape) {
  auto* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto_DataType_FLOAT);
  auto* s = t->mutable_shape();
  for (size_t i = 0; i < shape.size(); ++i) {
    auto* d = s->add_dim();
    if (i == 0 || shape[i] < 0) {
      d->set_dim_param("batch");  // dimension 0 is the batch, dynamic
    } else {
      d->set_dim_value(shape[i]);
    }
  }
}

void SetAttribute(onnx::AttributeProto& a, const std::string& name, const AttributeValue& v) {
  a.set_name(name);
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          a.set_type(onnx::AttributeProto_AttributeType_INT);
          a.set_i(x);
        } else if constexpr (std::is_same_v<T, float>) {
          a.set_type(onnx::AttributeProto_AttributeType_FLOAT);
          a.set_f(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          a.set_type(onnx::AttributeProto_AttributeType_INTS);
          for (int64_t i : x) a.add_ints(i);
        } else {
          a.set_type(onnx::AttributeProto_AttributeType_FLOATS);
          for (float f : x) a.add_floats(f);
        }
      },
      v);
}

}  // namespace

Result<std::string> SerializeOnnx(const Graph& graph) {
  auto shapes = graph.InferShapes(1);
  if (!shapes.ok()) return shapes.status();
  onnx::ModelProto m;
  m.set_ir_version(kIrVersion);
  m.set_producer_name("shoal");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name(graph.name.empty() ? "shoal" : graph.name);
  for (const auto& [name, init] : graph.initializers) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    for (int64_t d : init.shape) t->add_dims(d);
    if (init.is_int()) {
      t->set_data_type(onnx::TensorProto_DataType_INT64);
      t->set_raw_data(init.ints.data(), init.ints.size() * sizeof(int64_t));  // little-endian
    } else {
      t->set_data_type(onnx::TensorProto_DataType_FLOAT);
      t->set_raw_data(init.floats.data(), init.floats.size() * sizeof(float));
    }
  }
  for (const ValueInfo& in : graph.inputs) {
    auto* v = g->add_input();
    v->set_name(in.name);
    SetShape(*v, shapes->at(in.name));
  }
  for (const ValueInfo& out : graph.outputs) {
    auto* v = g->add_output();
    v->set_name(out.name);
    SetShape(*v, shapes->at(out.name));
  }
  for (const Node& n : graph.nodes) {
    onnx::NodeProto* p = g->add_node();
    p->set_op_type(std::string(OpTypeName(n.op)));
    p->set_name(n.name);
    for (const std::string& i : n.inputs) p->add_input(i);
    for (const std::string& o : n.outputs) p->add_output(o);
    for (const auto& [key, value] : n.attributes) SetAttribute(*p->add_attribute(), key, value);
  }
  std::string bytes;
  if (!m.SerializeToString(&bytes)) {
    return Internal("graph '" + graph.name + "' does not serialize (larger than 2 GiB?)");
  }
  return bytes;
}

Status SaveOnnx(const Graph& graph, const std::string& path) {
  auto bytes = SerializeOnnx(graph);
  if (!bytes.ok()) return bytes.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  out.close();
  if (!out) return Internal("cannot write '" + path + "'");
  return {};
}

Result<std::string> OnnxFileWithWeights(
    const std::string& path,
    const std::map<std::string, std::vector<float>, std::less<>>& weights) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot read the file");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) return InvalidArgument(path + ": not an ONNX ModelProto");
  size_t replaced = 0;
  for (onnx::TensorProto& t : *m.mutable_graph()->mutable_initializer()) {
    auto it = weights.find(t.name());
    if (it == weights.end()) continue;
    if (t.data_type() != onnx::TensorProto_DataType_FLOAT) {
      return InvalidArgument(path + ": initializer '" + t.name() + "' is not float32");
    }
    uint64_t numel = 1;
    for (int64_t d : t.dims()) numel *= static_cast<uint64_t>(d);
    if (numel != it->second.size()) {
      return InvalidArgument(path + ": initializer '" + t.name() + "' has " +
                             std::to_string(numel) + " values, the model's tensor " +
                             std::to_string(it->second.size()));
    }
    t.clear_float_data();
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto_DataLocation_DEFAULT);
    // raw_data is little-endian, as this host (static_assert in dtype.cc).
    t.set_raw_data(it->second.data(), it->second.size() * sizeof(float));
    ++replaced;
  }
  if (replaced != weights.size()) {
    return InvalidArgument(path + ": " + std::to_string(weights.size() - replaced) +
                           " of the model's tensors are not initializers of the graph");
  }
  return m.SerializeAsString();
}

}  // namespace shoal::inference
