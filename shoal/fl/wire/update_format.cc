#include "shoal/fl/wire/update_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "shoal/common/assign_or_return.h"
#include "shoal/v1/fl.pb.h"

namespace shoal::model {
namespace {

// shoal::DType <-> shoal.v1.DType: the one place the proto enum is mapped. The values agree, so
// the mapping is a cast of the floating types.
static_assert(static_cast<int>(DType::kF32) == v1::F32 &&
              static_cast<int>(DType::kBF16) == v1::BF16 &&
              static_cast<int>(DType::kF16) == v1::F16);

// nullopt for a type updates do not carry (EncodeUpdate refuses it).
std::optional<v1::DType> ToProto(DType d) {
  if (!IsFoldableDType(d)) return std::nullopt;
  return static_cast<v1::DType>(d);
}

static_assert(static_cast<int>(DType::kU32) == v1::U32);
static_assert(static_cast<int>(DType::kQ8) == v1::Q8 && static_cast<int>(DType::kQ4) == v1::Q4);

std::optional<DType> FromProto(int d) {
  if (d != v1::F32 && d != v1::BF16 && d != v1::F16 && d != v1::U32 && d != v1::Q8 && d != v1::Q4) {
    return std::nullopt;
  }
  return static_cast<DType>(d);
}

// Names in messages come from the client: printable ASCII only (others as \xNN), at most 64
// bytes, so the message is safe to put in a log line or a JSON reply.
std::string Quoted(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "tensor '";
  for (size_t i = 0; i < name.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      s += static_cast<char>(c);
    } else {
      s += "\\x";
      s += kHex[c >> 4];
      s += kHex[c & 15];
    }
  }
  if (name.size() > 64) s += "...";
  s += '\'';
  return s;
}

// A shape from the client, cut after 8 dimensions so a hostile one cannot bloat the message.
std::string ClientShape(const google::protobuf::RepeatedField<uint64_t>& shape) {
  const size_t n = std::min<size_t>(static_cast<size_t>(shape.size()), 8);
  std::string s = ShapeString({shape.data(), n});
  if (static_cast<size_t>(shape.size()) > n) s.insert(s.size() - 1, ",...");
  return s;
}

std::string Range(uint64_t offset, uint64_t length) {
  std::string s = "[";  // appended piecewise: GCC 12 warns falsely on "[" + std::string
  s += std::to_string(offset);
  s += ',';
  s += std::to_string(offset + length);
  s += ')';
  return s;
}

std::string ScaleString(float s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(s));
  return buf;
}

// ParseLimits::lora_lower_rank: a LoRA adapter's tensor ("*.lora_A" [r, in], "*.lora_B"
// [out, r]) may come at a lower rank.
bool IsLoraA(const TensorSpec& spec) { return spec.name.ends_with(".lora_A"); }
bool IsLoraTensor(const TensorSpec& spec) {
  return spec.shape.size() == 2 && (IsLoraA(spec) || spec.name.ends_with(".lora_B"));
}

// The rank `e` was sent at, or the error naming it: 2-D, the inner size the job's, the rank in
// [1, the job's], a floating dtype (a quantized block would straddle the zero-padded rows).
Result<uint64_t> LoraRank(const TensorSpec& spec, const v1::TensorEntry& e, DType dtype) {
  const bool a = IsLoraA(spec);
  const uint64_t rank = a ? spec.shape[0] : spec.shape[1];
  const uint64_t inner = a ? spec.shape[1] : spec.shape[0];
  std::string want = "[";  // appended piecewise: GCC 12 warns falsely on "[" + std::string
  want += a ? "r," : "";
  want += std::to_string(inner);
  want += a ? "]" : ",r]";
  const bool two_d = e.shape().size() == 2;
  const uint64_t sent = two_d ? e.shape(a ? 0 : 1) : 0;
  if (!two_d || e.shape(a ? 1 : 0) != inner || sent == 0) {
    return InvalidArgument(Quoted(e.name()) + ": shape " + want + " expected with 1 <= r <= " +
                           std::to_string(rank) + ", got " + ClientShape(e.shape()));
  }
  if (sent > rank) {
    return InvalidArgument(Quoted(e.name()) + ": rank " + std::to_string(sent) +
                           " exceeds the job's rank " + std::to_string(rank) +
                           " (spec.model.lora.rank), shape " + ClientShape(e.shape()));
  }
  if (sent < rank && !IsFloatDType(dtype)) {
    return InvalidArgument(Quoted(e.name()) + ": a LoRA tensor below the job's rank must be " +
                           "f32, bf16 or f16, got " + std::string(DTypeName(dtype)));
  }
  return sent;
}

v1::UpdateHeader HeaderOf(const UpdateMeta& meta) {
  v1::UpdateHeader h;
  h.set_job(meta.job);
  h.set_client_id(meta.client_id);
  h.set_token(meta.token);
  h.set_base_version(meta.base_version);
  h.set_num_samples(meta.num_samples);
  h.set_local_steps(meta.local_steps);
  h.set_train_seconds(meta.train_seconds);
  h.set_kind(meta.kind == UpdateKind::kDelta ? v1::UPDATE_DELTA : v1::UPDATE_WEIGHTS);
  return h;
}

// The body for header `h` (its tensor table filled, offsets within an area of `area` bytes):
// prefix, header, zeroed tensor area; *area_start: where the area begins.
Result<std::vector<std::byte>> BodyFor(const v1::UpdateHeader& h, uint64_t area,
                                       uint64_t* area_start) {
  const std::string header = h.SerializeAsString();
  if (header.size() > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgument("update header too large");
  }
  const uint64_t start = TensorAreaOffset(header.size());
  std::vector<std::byte> body(start + area, std::byte{0});
  std::memcpy(body.data(), kUpdateMagic, 4);
  const uint32_t hlen = static_cast<uint32_t>(header.size());
  std::memcpy(body.data() + 4, &hlen, 4);  // little-endian host (static_assert in dtype.cc)
  std::memcpy(body.data() + kUpdatePrefixBytes, header.data(), header.size());
  *area_start = start;
  return body;
}

}  // namespace

Result<std::vector<std::byte>> EncodeUpdate(const UpdateMeta& meta,
                                            std::span<const NamedTensor> tensors,
                                            DType wire_dtype) {
  v1::UpdateHeader h = HeaderOf(meta);
  const std::optional<v1::DType> wire = ToProto(wire_dtype);
  if (!wire) {
    return InvalidArgument("wire dtype " + std::string(DTypeName(wire_dtype)) +
                           ": updates carry F32, BF16, F16, Q8 or Q4");
  }
  uint64_t area = 0;
  for (const NamedTensor& t : tensors) {
    uint64_t numel = 1;
    for (uint64_t d : t.shape) numel *= d;
    if (numel != t.values.size()) {
      return InvalidArgument(Quoted(t.name) + ": shape " + ShapeString(t.shape) + " has " +
                             std::to_string(numel) + " elements, " +
                             std::to_string(t.values.size()) + " values given");
    }
    v1::TensorEntry* e = h.add_tensors();
    e->set_name(std::string(t.name));
    e->set_dtype(*wire);
    for (uint64_t d : t.shape) e->add_shape(d);
    area = AlignUp(area, kUpdateAlignment);
    e->set_offset(area);
    e->set_length(TensorBytes(wire_dtype, numel));
    area += e->length();
  }
  uint64_t start = 0;
  SHOAL_ASSIGN_OR_RETURN(std::vector<std::byte> body, BodyFor(h, area, &start));
  for (size_t i = 0; i < tensors.size(); ++i) {
    EncodeFloats(tensors[i].values.data(), tensors[i].values.size(), wire_dtype,
                 body.data() + start + h.tensors(static_cast<int>(i)).offset());
  }
  return body;
}

Result<std::vector<std::byte>> EncodeMaskedUpdate(const UpdateMeta& meta, const ModelSpec& spec,
                                                  std::span<const uint32_t> masked) {
  if (masked.size() != spec.num_params()) {
    return InvalidArgument("masked input has " + std::to_string(masked.size()) +
                           " values, the model has " + std::to_string(spec.num_params()));
  }
  v1::UpdateHeader h = HeaderOf(meta);
  uint64_t area = 0;
  for (const TensorSpec& t : spec.tensors()) {
    v1::TensorEntry* e = h.add_tensors();
    e->set_name(t.name);
    e->set_dtype(v1::U32);
    for (uint64_t d : t.shape) e->add_shape(d);
    area = AlignUp(area, kUpdateAlignment);
    e->set_offset(area);
    e->set_length(TensorBytes(DType::kU32, t.numel()));
    area += e->length();
  }
  uint64_t start = 0;
  SHOAL_ASSIGN_OR_RETURN(std::vector<std::byte> body, BodyFor(h, area, &start));
  for (size_t i = 0; i < spec.size(); ++i) {
    std::memcpy(body.data() + start + h.tensors(static_cast<int>(i)).offset(),
                masked.data() + spec.offset(i), spec.tensor(i).numel() * sizeof(uint32_t));
  }
  return body;
}

Result<std::vector<std::byte>> EncodeUpdate(const UpdateMeta& meta, const Model& model,
                                            DType wire_dtype) {
  std::vector<NamedTensor> tensors;
  tensors.reserve(model.spec.size());
  for (size_t i = 0; i < model.spec.size(); ++i) {
    tensors.push_back({model.spec.tensor(i).name, model.spec.tensor(i).shape, model.tensor(i)});
  }
  return EncodeUpdate(meta, tensors, wire_dtype);
}

Status ParseUpdateHead(std::span<const std::byte> body, v1::UpdateHeader* h, size_t* head_bytes) {
  SHOAL_ASSIGN_OR_RETURN(const uint32_t hlen, ParsePrefix(body, body.size()));
  if (!h->ParseFromArray(body.data() + kUpdatePrefixBytes, static_cast<int>(hlen))) {
    return InvalidArgument("update header does not parse as a shoal.v1.UpdateHeader");
  }
  if (head_bytes != nullptr) *head_bytes = kUpdatePrefixBytes + hlen;
  return {};
}

Result<UpdateView> ParseUpdate(std::span<const std::byte> body, const ModelSpec& model,
                               const ParseLimits& limits) {
  const uint64_t size = body.size();
  if (size > limits.max_body_bytes) {
    return Status(StatusCode::kTooLarge, "update body is " + std::to_string(size) +
                                             " bytes, the limit is " +
                                             std::to_string(limits.max_body_bytes));
  }
  const uint32_t max_header = std::min<uint32_t>(
      limits.max_header_bytes, static_cast<uint32_t>(std::numeric_limits<int>::max()));
  SHOAL_ASSIGN_OR_RETURN(const uint32_t hlen, ParsePrefix(body, size, max_header));
  v1::UpdateHeader h;
  if (!h.ParseFromArray(body.data() + kUpdatePrefixBytes, static_cast<int>(hlen))) {
    return InvalidArgument("header does not parse as a shoal.v1.UpdateHeader");
  }
  const uint64_t area_offset = TensorAreaOffset(hlen);
  if (area_offset > size) {
    return InvalidArgument("update body truncated: " + std::to_string(size) +
                           " bytes, the tensor area starts at " + std::to_string(area_offset));
  }
  const uint64_t area_size = size - area_offset;

  UpdateView view;
  view.tensor_area_offset = area_offset;
  UpdateMeta& m = view.meta;
  if (h.num_samples() == 0) return InvalidArgument("num_samples must be > 0");
  if (!std::isfinite(h.train_seconds()) || h.train_seconds() < 0) {
    return InvalidArgument("train_seconds must be finite and >= 0");
  }
  if (h.kind() != v1::UPDATE_WEIGHTS && h.kind() != v1::UPDATE_DELTA) {
    return InvalidArgument("kind " + std::to_string(h.kind()) + " unknown");
  }
  m.job = h.job();
  m.client_id = h.client_id();
  m.token = h.token();
  m.base_version = h.base_version();
  m.num_samples = h.num_samples();
  m.local_steps = h.local_steps();
  m.train_seconds = h.train_seconds();
  m.kind = h.kind() == v1::UPDATE_DELTA ? UpdateKind::kDelta : UpdateKind::kWeights;

  // Every entry either fills a distinct model slot or ends the parse, so this loop runs at most
  // model.size() + 1 times whatever the table's length.
  view.tensors.resize(model.size());
  std::vector<bool> seen(model.size(), false);
  uint64_t update_rank = 0;  // lora_lower_rank: the update's one rank, and the tensor that set it
  std::string update_rank_from;
  for (const v1::TensorEntry& e : h.tensors()) {
    const std::optional<size_t> idx = model.Find(e.name());
    if (!idx) return InvalidArgument(Quoted(e.name()) + ": not in the model");
    if (seen[*idx])
      return InvalidArgument(Quoted(e.name()) + ": appears twice in the tensor table");
    seen[*idx] = true;
    const TensorSpec& spec = model.tensor(*idx);
    const std::optional<DType> dtype = FromProto(e.dtype());
    if (!dtype)
      return InvalidArgument(Quoted(e.name()) + ": dtype " + std::to_string(e.dtype()) +
                             " unknown");
    if (std::find(limits.allowed_dtypes.begin(), limits.allowed_dtypes.end(), *dtype) ==
        limits.allowed_dtypes.end()) {
      return InvalidArgument(Quoted(e.name()) + ": dtype " + std::string(DTypeName(*dtype)) +
                             " not allowed" + limits.allowed_by);
    }
    uint64_t numel = spec.numel();
    uint64_t lora_rank = 0;
    if (limits.lora_lower_rank && IsLoraTensor(spec)) {
      SHOAL_ASSIGN_OR_RETURN(lora_rank, LoraRank(spec, e, *dtype));
      if (update_rank != 0 && lora_rank != update_rank) {
        return InvalidArgument(Quoted(e.name()) + ": rank " + std::to_string(lora_rank) + ", but " +
                               Quoted(update_rank_from) + " has rank " +
                               std::to_string(update_rank) + " (one rank per update)");
      }
      if (update_rank == 0) update_rank_from = e.name();
      update_rank = lora_rank;
      numel = lora_rank * spec.numel() / (IsLoraA(spec) ? spec.shape[0] : spec.shape[1]);
    } else if (!std::equal(spec.shape.begin(), spec.shape.end(), e.shape().begin(),
                           e.shape().end())) {
      return InvalidArgument(Quoted(e.name()) + ": shape " + ShapeString(spec.shape) +
                             " expected, got " + ClientShape(e.shape()));
    }
    const uint64_t need = TensorBytes(*dtype, numel);
    if (e.length() != need) {
      return InvalidArgument(Quoted(e.name()) + ": length " + std::to_string(e.length()) +
                             " bytes, shape " + ClientShape(e.shape()) + " in " +
                             std::string(DTypeName(*dtype)) + " needs " + std::to_string(need));
    }
    if (e.offset() % kUpdateAlignment != 0) {
      return InvalidArgument(Quoted(e.name()) + ": offset " + std::to_string(e.offset()) +
                             " is not a multiple of 64");
    }
    if (e.offset() > area_size || e.length() > area_size - e.offset()) {
      return InvalidArgument(Quoted(e.name()) + ": offset " + std::to_string(e.offset()) +
                             " + length " + std::to_string(e.length()) +
                             " runs past the end of the tensor area (" + std::to_string(area_size) +
                             " bytes): body truncated");
    }
    TensorView& v = view.tensors[*idx];
    v.index = *idx;
    v.name = spec.name;
    v.dtype = *dtype;
    v.shape = spec.shape;
    v.numel = numel;
    v.lora_rank = lora_rank;
    v.data = body.data() + area_offset + e.offset();
    v.length = e.length();
  }
  for (size_t i = 0; i < model.size(); ++i) {
    if (!seen[i]) return InvalidArgument(Quoted(model.tensor(i).name) + ": missing");
  }

  std::vector<const TensorView*> by_offset;
  by_offset.reserve(view.tensors.size());
  for (const TensorView& v : view.tensors) by_offset.push_back(&v);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorView* a, const TensorView* b) {
    return a->data < b->data || (a->data == b->data && a->index < b->index);
  });
  const std::byte* area = body.data() + area_offset;
  uint64_t end = 0;
  for (size_t i = 0; i < by_offset.size(); ++i) {
    const TensorView& v = *by_offset[i];
    const uint64_t off = static_cast<uint64_t>(v.data - area);
    if (i > 0 && off < end && v.length > 0) {
      const TensorView& p = *by_offset[i - 1];
      return InvalidArgument(Quoted(v.name) + ": bytes " + Range(off, v.length) + " overlap " +
                             Quoted(p.name) + " " +
                             Range(static_cast<uint64_t>(p.data - area), p.length));
    }
    end = std::max(end, off + v.length);
  }
  if (end < area_size) {
    return InvalidArgument("update body oversize: " + std::to_string(area_size - end) +
                           " bytes after the last tensor");
  }

  if (limits.check_finite) {
    for (const TensorView& v : view.tensors) {
      if (IsQuantizedDType(v.dtype)) {
        const BadScales bad = CountBadScales(v.data, v.dtype, v.numel);
        if (bad.count > 0) {
          return InvalidArgument(
              Quoted(v.name) + ": " + std::to_string(bad.count) + " of " +
              std::to_string((v.numel + kQuantBlock - 1) / kQuantBlock) + " " +
              std::string(DTypeName(v.dtype)) + " block scales invalid (first: block " +
              std::to_string(bad.first_block) + ", scale " + ScaleString(bad.first_scale) +
              "); a scale is finite, >= +0 and <= FLT_MAX/128");
        }
        continue;
      }
      if (!IsFloatDType(v.dtype)) continue;  // U32: masked integers, any bits
      const NonFinite nf = CountNonFinite(v.data, v.dtype, v.numel);
      if (nf.count > 0) {
        return InvalidArgument(Quoted(v.name) + ": " + std::to_string(nf.count) +
                               " non-finite values (first at index " + std::to_string(nf.first) +
                               ")");
      }
    }
  }
  return view;
}

}  // namespace shoal::model
