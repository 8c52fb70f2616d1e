#include "shoal/serving/cpu/cpu_plan.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <set>

#include "shoal/serving/cpu/cpu_lowering.h"

namespace shoal::inference::cpu {
namespace {

constexpr size_t kAlign = 64;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string DataTypeName(dt t) {
  switch (t) {
    case dt::f32:
      return "fp32";
    case dt::bf16:
      return "bf16";
    case dt::f16:
      return "fp16";
    default:
      return "other";
  }
}

// Greedy first-fit by lifetime: a value may reuse bytes of any value that is dead before it is
// written. Aliases take their parent's bytes, so the parent lives as long as they do.
size_t LayOut(std::vector<Value>& values) {
  for (size_t i = values.size(); i-- > 0;) {
    Value& v = values[i];
    if (v.alias_of < 0) continue;
    Value& p = values[static_cast<size_t>(v.alias_of)];
    p.first = std::min(p.first, v.first);
    p.last = std::max(p.last, v.last);
  }
  std::vector<size_t> placed;
  size_t total = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    Value& v = values[i];
    if (v.external || v.alias_of >= 0) continue;
    const size_t size = AlignUp(std::max<size_t>(v.bytes, 1));
    // Candidate offsets: 0 and the end of every live-overlapping placed value; take the lowest
    // that collides with none of them.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed) {
      const Value& o = values[j];
      if (o.last >= v.first && v.last >= o.first)
        busy.emplace_back(o.offset, o.offset + AlignUp(o.bytes));
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [b, e] : busy) {
      if (offset + size <= b) break;
      offset = std::max(offset, e);
    }
    v.offset = offset;
    total = std::max(total, offset + size);
    placed.push_back(i);
  }
  for (Value& v : values) {
    if (v.alias_of >= 0) v.offset = values[static_cast<size_t>(v.alias_of)].offset;
  }
  return total;
}

size_t Consumers(const std::vector<Node>& nodes, const std::string& t, const Node** only) {
  size_t n = 0;
  for (const Node& node : nodes) {
    for (const std::string& in : node.inputs) {
      if (in == t) {
        ++n;
        *only = &node;
      }
    }
  }
  return n;
}

bool IsGraphOutput(const Graph& g, const std::string& t) {
  return std::any_of(g.outputs.begin(), g.outputs.end(),
                     [&](const ValueInfo& v) { return v.name == t; });
}

}  // namespace

tag PlainTag(size_t rank) {
  switch (rank) {
    case 1:
      return tag::a;
    case 2:
      return tag::ab;
    case 3:
      return tag::abc;
    case 4:
      return tag::abcd;
    default:
      return tag::abcde;
  }
}

dims ToDims(const std::vector<int64_t>& v) { return dims(v.begin(), v.end()); }

dnnl::memory WeightCache::Get(const std::string& name, const Initializer& init,
                              const dnnl::memory::desc& src, const dnnl::memory::desc& want,
                              float scale) {
  for (const Entry& e : entries_) {
    if (e.name == name && e.src == src && e.want == want && e.scale == scale) return e.mem;
  }
  const float* data = init.floats.data();
  const bool copy = scale != 1.0f || init.is_int();
  if (copy) {
    if (init.is_int()) {
      scaled_.emplace_back(init.ints.begin(), init.ints.end());
    } else {
      scaled_.emplace_back(init.floats);
    }
    for (float& x : scaled_.back()) x *= scale;
    data = scaled_.back().data();
  }
  // oneDNN reads the source only; the const_cast never writes.
  dnnl::memory user(src, engine_, const_cast<float*>(data));
  dnnl::memory mem(want, engine_);
  dnnl::stream s(engine_);
  // On the calling thread alone: compiling then starts no OpenMP team, so a process that
  // compiles and then forks (an inference function's zygote) is still single-threaded. The
  // compute primitives were created for the full thread count; only this one-time copy of the
  // weights runs on one core.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  dnnl::reorder(user, mem).execute(s, user, mem);
  s.wait();
  omp_set_num_threads(threads);
  if (copy) scaled_.pop_back();
  entries_.push_back({name, src, want, scale, mem});
  return mem;
}

void Plan::Bind(uint8_t* arena, uint8_t* scratch) {
  for (Value& v : values) {
    if (!v.external) v.mem.set_data_handle(arena + v.offset);
  }
  for (dnnl::memory& m : scratch_users) m.set_data_handle(scratch);
  for (Step& s : steps) {
    s.c_args.clear();
    for (const auto& [arg, mem] : s.args) s.c_args.push_back({arg, mem.get()});
  }
}

Status Plan::Execute(const dnnl::stream& stream) const {
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (s.kernel) {
      SHOAL_RETURN_IF_ERROR(s.kernel());
      continue;
    }
    const dnnl_status_t st = dnnl_primitive_execute(
        s.primitive.get(), stream.get(), static_cast<int>(s.c_args.size()), s.c_args.data());
    if (st != dnnl_success) {
      return Internal("oneDNN step " + std::to_string(i) + " failed (status " +
                      std::to_string(static_cast<int>(st)) + ")");
    }
  }
  if (dnnl_stream_wait(stream.get()) != dnnl_success) return Internal("oneDNN stream wait failed");
  return {};
}

void Lowering::AddInput(const std::string& name) {
  Value v;
  const auto& s = Shape(name);
  v.mem = dnnl::memory({ToDims(s), dt::f32, PlainTag(s.size())}, engine_, DNNL_MEMORY_NONE);
  v.bytes = v.mem.get_desc().get_size();
  v.external = true;
  v.first = -1;
  plan_.values.push_back(v);
  plan_.input = v.mem;
  native_[name] = static_cast<int>(plan_.values.size() - 1);
}

int Lowering::FinishOutput(const std::string& tensor) {
  const auto& s = Shape(tensor);
  const int v = Ensure(tensor, {ToDims(s), dt::f32, PlainTag(s.size())}, true);
  plan_.values[static_cast<size_t>(v)].last = INT_MAX;  // read by Run after the last step
  plan_.output = Mem(v);
  return v;
}

int Lowering::NewValue(const dnnl::memory::desc& md) {
  Value v;
  v.mem = dnnl::memory(md, engine_, DNNL_MEMORY_NONE);
  v.bytes = md.get_size();
  v.first = v.last = static_cast<int>(plan_.steps.size());
  plan_.values.push_back(v);
  return static_cast<int>(plan_.values.size() - 1);
}

int Lowering::AliasValue(int parent, const dnnl::memory::desc& md) {
  const int v = NewValue(md);
  plan_.values[static_cast<size_t>(v)].alias_of = parent;
  plan_.values[static_cast<size_t>(v)].bytes = 0;
  return v;
}

int Lowering::Ensure(const std::string& tensor, const dnnl::memory::desc& want, bool in_arena) {
  const int from = native_.at(tensor);
  const Value& src = plan_.values[static_cast<size_t>(from)];
  if (src.mem.get_desc() == want && !(in_arena && src.external)) return from;
  for (const Converted& c : converted_) {
    if (c.from == from && c.md == want) return c.value;
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::reorder::primitive_desc pd(engine_, src.mem.get_desc(), engine_, want, attr);
  const int to = NewValue(want);
  AddStep(dnnl::reorder(pd), {{DNNL_ARG_SRC, Mem(from)}, {DNNL_ARG_DST, Mem(to)}}, {from}, pd);
  converted_.push_back({from, want, to});
  return to;
}

void Lowering::AddKernelStep(std::function<Status()> kernel, const std::vector<int>& reads) {
  const int step = static_cast<int>(plan_.steps.size());
  for (int r : reads) {
    Value& v = plan_.values[static_cast<size_t>(r)];
    v.last = std::max(v.last, step);
  }
  Step s;
  s.kernel = std::move(kernel);
  plan_.steps.push_back(std::move(s));
}

void Lowering::AddStep(const dnnl::primitive& p, std::unordered_map<int, dnnl::memory> args,
                       const std::vector<int>& reads, const dnnl::primitive_desc_base& pd) {
  const int step = static_cast<int>(plan_.steps.size());
  for (int r : reads) {
    Value& v = plan_.values[static_cast<size_t>(r)];
    v.last = std::max(v.last, step);
  }
  const dnnl::memory::desc sp = pd.scratchpad_desc();
  if (sp.get_size() > 0) {
    dnnl::memory m(sp, engine_, DNNL_MEMORY_NONE);
    args[DNNL_ARG_SCRATCHPAD] = m;
    plan_.scratch_users.push_back(m);
    plan_.scratch_bytes = std::max(plan_.scratch_bytes, sp.get_size());
  }
  plan_.steps.push_back({p, std::move(args), {}, {}});
}

Result<std::unique_ptr<Plan>> BuildPlan(const Graph& graph, int64_t batch, const PlanOptions& o,
                                        const dnnl::engine& engine, WeightCache& weights) {
  auto folded = FoldConstants(graph, batch);
  if (!folded.ok()) return folded.status();
  const auto* shapes = &folded->shapes;
  const std::vector<Node>& nodes = folded->nodes;
  auto plan = std::make_unique<Plan>();
  plan->batch = batch;
  Lowering low(graph, *folded, o, engine, weights, *plan);
  low.AddInput(graph.inputs[0].name);
  std::set<const Node*> skipped;
  for (const Node& n : nodes) {
    if (skipped.count(&n) != 0) continue;
    // A Relu that is the only reader of a Conv/Gemm/MatMul/Add output runs as that primitive's
    // post-op: one pass over memory instead of two.
    const Node* next = nullptr;
    const bool fusable = n.op == OpType::kConv || n.op == OpType::kGemm ||
                         n.op == OpType::kMatMul || n.op == OpType::kAdd;
    bool fuse = fusable && Consumers(nodes, n.outputs[0], &next) == 1 &&
                next->op == OpType::kRelu && !IsGraphOutput(graph, n.outputs[0]);
    // A residual connection, Add(Conv(..), x) with x computed earlier and read by nothing
    // after the conv: the conv adds its result into x's bytes (sum post-op) and applies the
    // Relu that follows the Add, so the Add and the Relu are not separate passes (ResNet's
    // blocks: 8 binary steps of ResNet-18 gone).
    const std::string* sum = nullptr;
    const Node* add = nullptr;
    const Node* add_relu = nullptr;
    if (n.op == OpType::kConv && next != nullptr && next->op == OpType::kAdd &&
        !IsGraphOutput(graph, n.outputs[0]) && Consumers(nodes, n.outputs[0], &next) == 1) {
      add = next;
      const std::string& other = add->inputs[0] == n.outputs[0] ? add->inputs[1] : add->inputs[0];
      bool ok = other != n.outputs[0] && !low.IsConstant(other) && low.Computed(other) &&
                !IsGraphOutput(graph, other) && shapes->at(other) == shapes->at(n.outputs[0]) &&
                !low.IsAlias(low.Native(other)) && low.Native(other) != low.Native(n.inputs[0]);
      for (const Node& reader : nodes) {  // every other reader of x ran before the conv
        if (!ok) break;
        if (&reader == add || &reader < &n) continue;
        ok = std::find(reader.inputs.begin(), reader.inputs.end(), other) == reader.inputs.end();
      }
      if (ok) {
        sum = &other;
        fuse = Consumers(nodes, add->outputs[0], &add_relu) == 1 && add_relu->op == OpType::kRelu &&
               !IsGraphOutput(graph, add->outputs[0]);
        if (!fuse) add_relu = nullptr;
      }
    }
    // A transformer's linear layer: MatMul + bias Add (+ erf GELU) as one matmul primitive.
    if (n.op == OpType::kMatMul) {
      const MatMulFusion f = FindMatMulFusion(nodes, graph, low, n);
      if (!f.fused.empty()) {
        try {
          SHOAL_RETURN_IF_ERROR(LowerMatMulNd(low, n, false, &f));
        } catch (const dnnl::error& e) {
          return Internal("node '" + n.name + "' (MatMul, fused): oneDNN: " + e.what());
        }
        for (const Node* fused : f.fused) skipped.insert(fused);
        continue;
      }
    }
    if (n.op == OpType::kMul || n.op == OpType::kPow) {
      const MatMulFusion f = FindGeluTanh(nodes, graph, low, n);
      if (!f.fused.empty()) {
        try {
          SHOAL_RETURN_IF_ERROR(LowerGeluTanh(low, n.inputs[0], f.output));
        } catch (const dnnl::error& e) {
          return Internal("node '" + n.name + "' (GELU, fused): oneDNN: " + e.what());
        }
        for (const Node* fused : f.fused) skipped.insert(fused);
        continue;
      }
    }
    bool summed = false;
    try {
      SHOAL_RETURN_IF_ERROR(low.LowerNode(n, fuse, sum, &summed));
    } catch (const dnnl::error& e) {
      const std::string what = "node '" + n.name + "' (" + std::string(OpTypeName(n.op)) + ")";
      if (e.status == dnnl_unimplemented) {
        return Unavailable("precision " + DataTypeName(o.compute) +
                           ": oneDNN has no CPU implementation for " + what +
                           " on this machine's ISA");
      }
      return Internal(what + ": oneDNN: " + e.what());
    }
    if (summed) {
      skipped.insert(add);
      low.Bind(add->outputs[0], low.Native(n.outputs[0]));
      if (add_relu != nullptr) {
        skipped.insert(add_relu);
        low.Bind(add_relu->outputs[0], low.Native(n.outputs[0]));
      }
    } else if (fuse && sum == nullptr) {
      skipped.insert(next);
      low.Bind(next->outputs[0], low.Native(n.outputs[0]));
    }
  }
  try {
    low.FinishOutput(graph.outputs[0].name);
  } catch (const dnnl::error& e) {
    return Internal(std::string("graph output reorder: oneDNN: ") + e.what());
  }
  plan->arena_bytes = LayOut(plan->values);
  return plan;
}

}  // namespace shoal::inference::cpu
