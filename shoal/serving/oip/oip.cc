#include "shoal/serving/oip/oip.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "shoal/common/json_escape.h"

namespace shoal::oip {
namespace {

using Json = nlohmann::json;

int64_t Product(std::span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Every string written by hand goes through common's escaper: invalid UTF-8 (a model name from a
// URL, a message quoting a cut-off piece of the request) as U+FFFD, control characters as
// \u00XX so an id round-trips.
void AppendEscaped(std::string& out, std::string_view s) {
  AppendJsonEscaped(out, s, JsonControl::kEscape);
}

void AppendInt(std::string& out, int64_t v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  out.append(buf, p);
}

void AppendFloat(std::string& out, float v) {
  if (!std::isfinite(v)) {  // JSON has no NaN or Inf
    out += "null";
    return;
  }
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  out.append(buf, p);
}

std::string Quoted(std::string_view s) {
  std::string out = "'";
  out.append(s);
  out += '\'';
  return out;
}

// Flattens nested arrays of numbers into `dst` (at most `limit` values; *count counts them all
// up to limit + 1 so "too many" is detected without walking the rest).
Status Flatten(const Json& node, float* dst, int64_t limit, int64_t* count,
               const std::string& input) {
  if (node.is_array()) {
    for (const Json& e : node) {
      if (Status st = Flatten(e, dst, limit, count, input); !st.ok()) return st;
    }
    return {};
  }
  if (!node.is_number()) {
    return InvalidArgument("input " + Quoted(input) + ": data element " + std::to_string(*count) +
                           " is not a number (" + node.dump().substr(0, 40) + ")");
  }
  if (*count >= limit) {
    return InvalidArgument("input " + Quoted(input) + ": too many elements: more than the " +
                           std::to_string(limit) + " its shape holds");
  }
  dst[(*count)++] = node.get<float>();
  return {};
}

}  // namespace

int64_t ModelInfo::input_elements() const { return Product(input_shape); }
int64_t ModelInfo::output_elements() const { return Product(output_shape); }

std::string ShapeText(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    AppendInt(out, shape[i]);
  }
  out += ']';
  return out;
}

std::string ErrorJson(std::string_view message) {
  std::string out = "{\"error\":\"";
  AppendEscaped(out, message);
  out += "\"}\n";
  return out;
}

namespace {

// The general parser. With `fast_count`, `text` is the request with the input's "data" array
// replaced by [] and its `*fast_count` values already in scratch (ScanInputData); any error
// is then re-derived by the caller on the original text, so only success matters here.
Status ParseGeneral(std::span<const std::byte> body, std::optional<size_t> json_length,
                    std::string_view text_override, const size_t* fast_count,
                    const ModelInfo& model, std::vector<float>& scratch, InferRequest* out) {
  out->id.clear();
  out->batch = 0;
  out->shape.clear();
  out->input = {};
  out->binary_output = false;
  const size_t jl = json_length.value_or(body.size());
  if (jl > body.size()) {
    return InvalidArgument("Inference-Header-Content-Length " + std::to_string(jl) +
                           " is larger than the body (" + std::to_string(body.size()) + " bytes)");
  }
  const char* text = reinterpret_cast<const char*>(body.data());
  size_t text_length = jl;
  if (fast_count != nullptr) {
    text = text_override.data();
    text_length = text_override.size();
  }
  Json j;
  try {
    j = Json::parse(text, text + text_length);
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    return InvalidArgument("malformed JSON: " + what);
  }
  if (!j.is_object()) return InvalidArgument("the request must be a JSON object");
  if (auto it = j.find("id"); it != j.end()) {
    if (!it->is_string()) return InvalidArgument("\"id\" must be a string");
    out->id = it->get<std::string>();
  }
  if (auto it = j.find("parameters"); it != j.end() && it->is_object()) {
    if (auto b = it->find("binary_data_output"); b != it->end() && b->is_boolean()) {
      out->binary_output = b->get<bool>();
    }
  }
  auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array()) {
    return InvalidArgument("missing \"inputs\" (an array of tensors)");
  }
  const Json* found = nullptr;
  for (size_t i = 0; i < inputs->size(); ++i) {
    const Json& in = (*inputs)[i];
    if (!in.is_object())
      return InvalidArgument("inputs[" + std::to_string(i) + "] must be an object");
    auto name = in.find("name");
    if (name == in.end() || !name->is_string()) {
      return InvalidArgument("inputs[" + std::to_string(i) + "]: missing \"name\"");
    }
    const std::string& n = name->get_ref<const std::string&>();
    if (n != model.input_name) {
      return InvalidArgument("unknown input " + Quoted(n) + " (the model's input is " +
                             Quoted(model.input_name) + ")");
    }
    if (found != nullptr) return InvalidArgument("input " + Quoted(n) + " is given twice");
    found = &in;
  }
  if (found == nullptr) return InvalidArgument("missing input " + Quoted(model.input_name));
  const Json& in = *found;
  const std::string& name = model.input_name;

  auto dtype = in.find("datatype");
  if (dtype == in.end() || !dtype->is_string()) {
    return InvalidArgument("input " + Quoted(name) + ": missing \"datatype\" (FP32)");
  }
  if (dtype->get_ref<const std::string&>() != "FP32") {
    return InvalidArgument("input " + Quoted(name) + ": wrong datatype " +
                           dtype->get<std::string>() + " (the model takes FP32)");
  }
  auto shape = in.find("shape");
  if (shape == in.end() || !shape->is_array()) {
    return InvalidArgument("input " + Quoted(name) + ": missing \"shape\"");
  }
  for (const Json& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return InvalidArgument("input " + Quoted(name) +
                             ": shape must be an array of non-negative integers, got " +
                             shape->dump().substr(0, 80));
    }
    out->shape.push_back(d.get<int64_t>());
  }
  std::vector<int64_t> expected_shape = {-1};
  expected_shape.insert(expected_shape.end(), model.input_shape.begin(), model.input_shape.end());
  bool shape_ok = out->shape.size() == expected_shape.size();
  for (size_t k = 1; shape_ok && k < expected_shape.size(); ++k) {
    shape_ok = out->shape[k] == expected_shape[k];
  }
  if (!shape_ok) {
    return InvalidArgument("input " + Quoted(name) + ": wrong shape " + ShapeText(out->shape) +
                           " (the model takes " + ShapeText(expected_shape) + ")");
  }
  out->batch = out->shape[0];
  if (out->batch == 0) return InvalidArgument("input " + Quoted(name) + ": batch dimension is 0");
  if (out->batch > model.max_batch) {
    return InvalidArgument("input " + Quoted(name) + ": batch of " + std::to_string(out->batch) +
                           " is over the max batch size " + std::to_string(model.max_batch));
  }
  const int64_t values = out->batch * model.input_elements();
  scratch.resize(static_cast<size_t>(values));

  std::optional<uint64_t> binary_size;
  if (auto params = in.find("parameters"); params != in.end() && params->is_object()) {
    if (auto b = params->find("binary_data_size"); b != params->end()) {
      if (!b->is_number_unsigned()) {
        return InvalidArgument("input " + Quoted(name) +
                               ": binary_data_size must be a non-negative integer");
      }
      binary_size = b->get<uint64_t>();
    }
  }
  if (binary_size) {
    if (!json_length) {
      return InvalidArgument("input " + Quoted(name) +
                             ": binary_data_size needs the Inference-Header-Content-Length "
                             "header");
    }
    if (in.contains("data")) {
      return InvalidArgument("input " + Quoted(name) + ": give either data or binary_data_size");
    }
    const uint64_t need = static_cast<uint64_t>(values) * sizeof(float);
    if (*binary_size != need) {
      return InvalidArgument("input " + Quoted(name) + ": binary_data_size " +
                             std::to_string(*binary_size) + " does not match shape " +
                             ShapeText(out->shape) + " of FP32 (" + std::to_string(need) +
                             " bytes)");
    }
    if (body.size() - jl < need) {
      return InvalidArgument("input " + Quoted(name) + ": binary data of " + std::to_string(need) +
                             " bytes runs past the end of the body (" +
                             std::to_string(body.size() - jl) + " bytes after the JSON)");
    }
    std::memcpy(scratch.data(), body.data() + jl, need);  // the binary part need not be aligned
  } else {
    auto data = in.find("data");
    if (data == in.end()) return InvalidArgument("input " + Quoted(name) + ": missing \"data\"");
    int64_t count = 0;
    if (fast_count != nullptr) {
      count = static_cast<int64_t>(*fast_count);  // the values are in scratch already
    } else if (Status st = Flatten(*data, scratch.data(), values, &count, name); !st.ok()) {
      return st;
    }
    if (count != values) {
      return InvalidArgument("input " + Quoted(name) + ": shape " + ShapeText(out->shape) +
                             " needs " + std::to_string(values) + " values, got " +
                             std::to_string(count));
    }
  }
  out->input = std::span<const float>(scratch.data(), static_cast<size_t>(values));

  if (auto outputs = j.find("outputs"); outputs != j.end()) {
    if (!outputs->is_array()) return InvalidArgument("\"outputs\" must be an array");
    for (const Json& o : *outputs) {
      auto n = o.is_object() ? o.find("name") : o.end();
      if (!o.is_object() || n == o.end() || !n->is_string()) {
        return InvalidArgument("outputs: each entry needs a \"name\"");
      }
      if (n->get_ref<const std::string&>() != model.output_name) {
        return InvalidArgument("unknown output " + Quoted(n->get<std::string>()) +
                               " (the model's output is " + Quoted(model.output_name) + ")");
      }
      if (auto p = o.find("parameters"); p != o.end() && p->is_object()) {
        if (auto b = p->find("binary_data"); b != p->end() && b->is_boolean()) {
          out->binary_output = b->get<bool>();
        }
        // Triton's classification extension (not in /v2's extensions; tritonclient's class_count
        // asks for it): answering the raw tensor instead of the top classes would hand the
        // client a different tensor.
        if (auto c = p->find("classification");
            c != p->end() && !(c->is_number_integer() && c->get<int64_t>() == 0)) {
          return InvalidArgument("output " + Quoted(model.output_name) + ": classification " +
                                 c->dump().substr(0, 20) +
                                 " (Triton's classification extension) is not supported: ask "
                                 "for the output itself");
        }
      }
    }
  }
  return {};
}

// JSON number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
bool IsJsonNumber(std::string_view t) {
  size_t i = 0;
  auto digits = [&] {
    const size_t b = i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
    return i > b;
  };
  if (i < t.size() && t[i] == '-') ++i;
  if (i < t.size() && t[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < t.size() && t[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == t.size();
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Parses nested arrays of numbers starting at text[*i] == '[' into scratch (grown as needed);
// false on anything else (strings, objects, malformed input: the general parser then decides).
bool ParseNumberArrays(std::string_view text, size_t* pos, std::vector<float>& scratch,
                       size_t* count) {
  size_t i = *pos;
  const size_t n = text.size();
  auto skip = [&] {
    while (i < n && IsSpace(text[i])) ++i;
  };
  int depth = 0;
  for (;;) {
    // A value.
    skip();
    if (i >= n) return false;
    if (text[i] == '[') {
      ++depth;
      ++i;
      skip();
      if (i < n && text[i] == ']') {
        --depth;
        ++i;
        if (depth == 0) break;
      } else {
        continue;
      }
    } else {
      size_t e = i;
      while (e < n && !IsSpace(text[e]) && text[e] != ',' && text[e] != ']') ++e;
      const std::string_view num = text.substr(i, e - i);
      if (!IsJsonNumber(num)) return false;
      double v = 0;  // as nlohmann does: to double, then to float
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
      if (ec != std::errc() || p != num.data() + num.size()) return false;
      if (*count >= scratch.size()) scratch.resize(std::max<size_t>(1024, scratch.size() * 2));
      scratch[(*count)++] = static_cast<float>(v);
      i = e;
    }
    // After a value: ',' then another value, or ']' closing one level.
    for (;;) {
      skip();
      if (i >= n) return false;
      if (text[i] == ',') {
        ++i;
        skip();
        if (i < n && text[i] == ']') return false;  // [1,]
        break;
      }
      if (text[i] != ']') return false;
      --depth;
      ++i;
      if (depth == 0) {
        *pos = i;
        return true;
      }
    }
  }
  *pos = i;
  return true;
}

// The fast path for the common request: finds the one input's "data" array (inputs[k].data),
// parses its numbers straight into scratch, and writes to `reduced` the request with that
// array replaced by [] so that the general parser only builds a small document. A DOM of a
// 784-value image costs several times more than the request's whole trip through the
// gateway. False whenever anything is unusual; the general path then parses the original.
bool ScanInputData(std::string_view text, std::string& reduced, std::vector<float>& scratch,
                   size_t* count) {
  struct Level {
    bool object;
    bool expect_key;
  };
  constexpr int kMaxDepth = 64;
  Level stack[kMaxDepth];
  int depth = 0;
  std::string_view top_key, last_key;
  bool found = false;
  size_t begin = 0, end = 0;
  size_t i = 0;
  const size_t n = text.size();
  *count = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '"') {
      size_t j = i + 1;
      bool escaped = false;
      while (j < n && text[j] != '"') {
        if (text[j] == '\\') {
          escaped = true;
          ++j;
        }
        ++j;
      }
      if (j >= n) return false;
      if (depth > 0 && stack[depth - 1].object && stack[depth - 1].expect_key) {
        last_key = escaped ? std::string_view("\\") : text.substr(i + 1, j - i - 1);
        stack[depth - 1].expect_key = false;
        if (depth == 1) top_key = last_key;
      }
      i = j + 1;
    } else if (c == '{' || c == '[') {
      if (depth == kMaxDepth) return false;
      stack[depth++] = {c == '{', c == '{'};
      ++i;
    } else if (c == '}' || c == ']') {
      if (depth == 0) return false;
      --depth;
      ++i;
    } else if (c == ',') {
      if (depth > 0 && stack[depth - 1].object) stack[depth - 1].expect_key = true;
      ++i;
    } else if (c == ':') {
      ++i;
      if (depth == 3 && stack[0].object && !stack[1].object && stack[2].object &&
          top_key == "inputs" && last_key == "data") {
        while (i < n && IsSpace(text[i])) ++i;
        if (found || i >= n || text[i] != '[') return false;
        begin = i;
        if (!ParseNumberArrays(text, &i, scratch, count)) return false;
        end = i;
        found = true;
      }
    } else {
      ++i;
    }
  }
  if (!found) return false;
  reduced.assign(text.substr(0, begin));
  reduced += "[]";
  reduced.append(text.substr(end));
  return true;
}

}  // namespace

Status ParseInferRequest(std::span<const std::byte> body, std::optional<size_t> json_length,
                         const ModelInfo& model, std::vector<float>& scratch, InferRequest* out) {
  const size_t jl = json_length.value_or(body.size());
  if (jl <= body.size()) {
    thread_local std::string reduced;
    size_t count = 0;
    const std::string_view text(reinterpret_cast<const char*>(body.data()), jl);
    if (ScanInputData(text, reduced, scratch, &count) &&
        ParseGeneral(body, json_length, reduced, &count, model, scratch, out).ok()) {
      return {};
    }
  }
  // Errors (and unusual requests) take the general path on the original text: the same
  // messages, with positions in the client's bytes.
  return ParseGeneral(body, json_length, {}, nullptr, model, scratch, out);
}

Status ParseInferRequestGeneral(std::span<const std::byte> body, std::optional<size_t> json_length,
                                const ModelInfo& model, std::vector<float>& scratch,
                                InferRequest* out) {
  return ParseGeneral(body, json_length, {}, nullptr, model, scratch, out);
}

void WriteInferResponse(const ModelInfo& model, const InferRequest& request, uint64_t version,
                        std::span<const float> output, std::string& out, size_t* json_length) {
  out.clear();
  out += "{\"model_name\":\"";
  AppendEscaped(out, model.name);
  out += "\",\"model_version\":\"";
  AppendInt(out, static_cast<int64_t>(version));
  out += '"';
  if (!request.id.empty()) {
    out += ",\"id\":\"";
    AppendEscaped(out, request.id);
    out += '"';
  }
  out += ",\"outputs\":[{\"name\":\"";
  AppendEscaped(out, model.output_name);
  out += "\",\"datatype\":\"FP32\",\"shape\":[";
  AppendInt(out, request.batch);
  for (int64_t d : model.output_shape) {
    out += ',';
    AppendInt(out, d);
  }
  out += ']';
  if (request.binary_output) {
    out += ",\"parameters\":{\"binary_data_size\":";
    AppendInt(out, static_cast<int64_t>(output.size_bytes()));
    out += "}}]}";
    *json_length = out.size();
    out.append(reinterpret_cast<const char*>(output.data()), output.size_bytes());
    return;
  }
  out += ",\"data\":[";
  for (size_t i = 0; i < output.size(); ++i) {
    if (i) out += ',';
    AppendFloat(out, output[i]);
  }
  out += "]}]}\n";
  *json_length = out.size();
}

std::string ModelMetadataJson(const ModelInfo& model, uint64_t version) {
  auto tensor = [](const std::string& name, const std::vector<int64_t>& per_sample) {
    std::vector<int64_t> shape = {-1};
    shape.insert(shape.end(), per_sample.begin(), per_sample.end());
    return Json{{"name", name}, {"datatype", "FP32"}, {"shape", shape}};
  };
  Json j = {{"name", model.name},
            {"versions", Json::array({std::to_string(version)})},
            {"platform", model.platform},
            {"inputs", Json::array({tensor(model.input_name, model.input_shape)})},
            {"outputs", Json::array({tensor(model.output_name, model.output_shape)})},
            {"parameters", {{"max_batch_size", model.max_batch}}}};
  // Names from a manifest may hold invalid UTF-8: U+FFFD, as the escaper writes it, not a throw.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace shoal::oip
