#include "shoal/fl/wire/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace shoal::model {
namespace {

using OrderedJson = nlohmann::ordered_json;
using Json = nlohmann::json;

std::string Quoted(std::string_view name) { return "tensor '" + std::string(name) + "'"; }

std::optional<uint64_t> CheckedNumel(std::span<const uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

// A JSON value as a uint64, when it is a non-negative integer.
std::optional<uint64_t> AsU64(const Json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0)
    return static_cast<uint64_t>(j.get<int64_t>());
  return std::nullopt;
}

}  // namespace

const SafetensorsTensor* SafetensorsView::Find(std::string_view name) const {
  for (const SafetensorsTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

// The header text (padded to 8 bytes) and the data size, after checking every entry.
Result<std::string> SafetensorsHeader(std::span<const SafetensorsEntry> tensors,
                                      const std::map<std::string, std::string>& metadata,
                                      uint64_t* data_bytes) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson m = OrderedJson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  std::set<std::string_view> names;
  for (const SafetensorsEntry& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return InvalidArgument("tensor name '" + std::string(t.name) + "' is not allowed");
    }
    if (!names.insert(t.name).second) return InvalidArgument(Quoted(t.name) + ": appears twice");
    const std::optional<uint64_t> numel = CheckedNumel(t.shape);
    if (!numel || *numel * DTypeSize(t.dtype) != t.data.size()) {
      return InvalidArgument(Quoted(t.name) + ": " + std::to_string(t.data.size()) +
                             " bytes do not hold shape " + ShapeString(t.shape) + " in " +
                             std::string(DTypeName(t.dtype)));
    }
    OrderedJson e = OrderedJson::object();
    e["dtype"] = DTypeName(t.dtype);
    e["shape"] = std::vector<uint64_t>(t.shape.begin(), t.shape.end());
    e["data_offsets"] = {offset, offset + t.data.size()};
    header[std::string(t.name)] = std::move(e);
    offset += t.data.size();
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  *data_bytes = offset;
  return text;
}

// Writes the file into `out` (sized 8 + header + data).
// The header's length and text at `out`; returns where the data starts.
size_t PutHeader(const std::string& text, std::byte* out) {
  const uint64_t n = text.size();
  std::memcpy(out, &n, 8);
  std::memcpy(out + 8, text.data(), text.size());
  return 8 + text.size();
}

void FillSafetensors(std::span<const SafetensorsEntry> tensors, const std::string& text,
                     std::byte* out) {
  std::byte* data = out + PutHeader(text, out);
  for (const SafetensorsEntry& t : tensors) {
    if (!t.data.empty()) std::memcpy(data, t.data.data(), t.data.size());
    data += t.data.size();
  }
}

}  // namespace

Result<std::vector<std::byte>> WriteSafetensors(
    std::span<const SafetensorsEntry> tensors, const std::map<std::string, std::string>& metadata) {
  uint64_t data_bytes = 0;
  auto text = SafetensorsHeader(tensors, metadata, &data_bytes);
  if (!text.ok()) return text.status();
  std::vector<std::byte> out(8 + text->size() + data_bytes);
  FillSafetensors(tensors, *text, out.data());
  return out;
}

Result<std::string> WriteSafetensorsString(std::span<const SafetensorsEntry> tensors,
                                           const std::map<std::string, std::string>& metadata) {
  uint64_t data_bytes = 0;
  auto text = SafetensorsHeader(tensors, metadata, &data_bytes);
  if (!text.ok()) return text.status();
  std::string out(8 + text->size() + data_bytes, '\0');
  FillSafetensors(tensors, *text, reinterpret_cast<std::byte*>(out.data()));
  return out;
}

Result<size_t> WriteSafetensorsHeaderInto(std::span<const SafetensorsEntry> tensors,
                                          const std::map<std::string, std::string>& metadata,
                                          std::string* out) {
  uint64_t data_bytes = 0;
  auto text = SafetensorsHeader(tensors, metadata, &data_bytes);
  if (!text.ok()) return text.status();
  out->resize(8 + text->size() + data_bytes);
  return PutHeader(*text, reinterpret_cast<std::byte*>(out->data()));
}

Result<SafetensorsView> ReadSafetensors(std::span<const std::byte> file,
                                        const SafetensorsLimits& limits) {
  if (file.size() < 8) {
    return InvalidArgument("safetensors file truncated: " + std::to_string(file.size()) +
                           " bytes, shorter than the 8-byte header size");
  }
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  if (n > limits.max_header_bytes) {
    return InvalidArgument("safetensors header size " + std::to_string(n) + " exceeds the limit " +
                           std::to_string(limits.max_header_bytes));
  }
  if (n > file.size() - 8) {
    return InvalidArgument("safetensors header size " + std::to_string(n) +
                           " runs past the end of the file (" + std::to_string(file.size()) +
                           " bytes)");
  }
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  const Json header = Json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return InvalidArgument("safetensors header is not valid JSON");
  if (!header.is_object()) return InvalidArgument("safetensors header is not a JSON object");
  const std::span<const std::byte> data = file.subspan(8 + n);

  SafetensorsView view;
  struct Placed {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Placed> placed;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return InvalidArgument("__metadata__ is not a JSON object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          return InvalidArgument("__metadata__: value of '" + mk + "' is not a string");
        view.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) return InvalidArgument(Quoted(key) + ": entry is not a JSON object");
    SafetensorsTensor t;
    t.name = key;
    const auto dt = value.find("dtype");
    if (dt == value.end() || !dt->is_string())
      return InvalidArgument(Quoted(key) + ": dtype missing");
    const std::optional<DType> dtype = DTypeFromName(dt->get<std::string>());
    if (!dtype) {
      return InvalidArgument(Quoted(key) + ": dtype " + dt->get<std::string>() +
                             " not supported (F32, BF16, F16)");
    }
    t.dtype = *dtype;
    const auto sh = value.find("shape");
    if (sh == value.end() || !sh->is_array())
      return InvalidArgument(Quoted(key) + ": shape missing");
    for (const Json& d : *sh) {
      const std::optional<uint64_t> v = AsU64(d);
      if (!v) return InvalidArgument(Quoted(key) + ": shape holds a value that is not a size");
      t.shape.push_back(*v);
    }
    const auto off = value.find("data_offsets");
    if (off == value.end() || !off->is_array() || off->size() != 2) {
      return InvalidArgument(Quoted(key) + ": data_offsets is not [begin, end]");
    }
    const std::optional<uint64_t> begin = AsU64((*off)[0]);
    const std::optional<uint64_t> end = AsU64((*off)[1]);
    if (!begin || !end || *begin > *end) {
      return InvalidArgument(Quoted(key) + ": data_offsets is not [begin, end]");
    }
    if (*end > data.size()) {
      return InvalidArgument(Quoted(key) + ": data_offsets [" + std::to_string(*begin) + "," +
                             std::to_string(*end) + ") run past the end of the data (" +
                             std::to_string(data.size()) + " bytes)");
    }
    const std::optional<uint64_t> numel = CheckedNumel(t.shape);
    if (!numel || *numel > (*end - *begin) || *numel * DTypeSize(t.dtype) != *end - *begin) {
      return InvalidArgument(
          Quoted(key) + ": data_offsets span " + std::to_string(*end - *begin) + " bytes, shape " +
          ShapeString(t.shape) + " in " + std::string(DTypeName(t.dtype)) + " needs " +
          (numel && *numel <= data.size() ? std::to_string(*numel * DTypeSize(t.dtype))
                                          : std::string("more")));
    }
    t.data = data.subspan(*begin, *end - *begin);
    placed.push_back({*begin, *end, view.tensors.size()});
    view.tensors.push_back(std::move(t));
  }
  // The reference implementation requires the tensors to tile the data exactly.
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  uint64_t at = 0;
  for (const Placed& p : placed) {
    const std::string& name = view.tensors[p.index].name;
    if (p.begin < at)
      return InvalidArgument(Quoted(name) + ": data_offsets overlap another tensor");
    if (p.begin > at) {
      return InvalidArgument(Quoted(name) + ": " + std::to_string(p.begin - at) +
                             " unused bytes before its data");
    }
    at = p.end;
  }
  if (at != data.size()) {
    return InvalidArgument("safetensors data has " + std::to_string(data.size() - at) +
                           " bytes after the last tensor");
  }
  std::vector<SafetensorsTensor> ordered;
  ordered.reserve(placed.size());
  for (const Placed& p : placed) ordered.push_back(std::move(view.tensors[p.index]));
  view.tensors = std::move(ordered);
  return view;
}

std::vector<std::byte> ModelToSafetensors(const Model& model,
                                          const std::map<std::string, std::string>& metadata,
                                          DType dtype) {
  std::vector<std::vector<std::byte>> converted(model.spec.size());
  std::vector<SafetensorsEntry> entries;
  for (size_t i = 0; i < model.spec.size(); ++i) {
    const std::span<const float> v = model.tensor(i);
    converted[i].resize(v.size() * DTypeSize(dtype));
    EncodeFloats(v.data(), v.size(), dtype, converted[i].data());
    entries.push_back({model.spec.tensor(i).name, dtype, model.spec.tensor(i).shape, converted[i]});
  }
  std::map<std::string, std::string> meta = metadata;
  meta.emplace("format", "pt");
  // The spec's names are unique and the sizes match, so writing cannot fail.
  return std::move(WriteSafetensors(entries, meta)).value();
}

Result<Model> ModelFromSafetensors(std::span<const std::byte> file, const ModelSpec& spec) {
  Result<SafetensorsView> view = ReadSafetensors(file);
  if (!view.ok()) return view.status();
  for (const SafetensorsTensor& t : view->tensors) {
    if (!spec.Find(t.name)) return InvalidArgument(Quoted(t.name) + ": not in the model");
  }
  Model model(spec);
  for (size_t i = 0; i < spec.size(); ++i) {
    const TensorSpec& ts = spec.tensor(i);
    const SafetensorsTensor* t = view->Find(ts.name);
    if (!t) return InvalidArgument(Quoted(ts.name) + ": missing");
    if (t->shape != ts.shape) {
      return InvalidArgument(Quoted(ts.name) + ": shape " + ShapeString(ts.shape) +
                             " expected, got " + ShapeString(t->shape));
    }
    DecodeFloats(t->data.data(), t->dtype, ts.numel(), model.tensor(i).data());
  }
  return model;
}

Result<Model> ModelFromSafetensors(std::span<const std::byte> file) {
  Result<SafetensorsView> view = ReadSafetensors(file);
  if (!view.ok()) return view.status();
  std::vector<TensorSpec> specs;
  for (const SafetensorsTensor& t : view->tensors) specs.push_back({t.name, t.shape, 0});
  Model model{ModelSpec(std::move(specs))};
  for (size_t i = 0; i < view->tensors.size(); ++i) {
    const SafetensorsTensor& t = view->tensors[i];
    DecodeFloats(t.data.data(), t.dtype, model.spec.tensor(i).numel(), model.tensor(i).data());
  }
  return model;
}

}  // namespace shoal::model
