#include "shoal/fl/flower/records.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "shoal/fl/flower/npy.h"
#include "shoal/fl/flower/objects.h"

namespace shoal::flower {

namespace {

using json = nlohmann::json;

std::string Put(std::string content, ObjectMap& objects) {
  std::string id = ObjectId(content);
  objects.try_emplace(id, std::make_shared<const std::string>(std::move(content)));
  return id;
}

// Unique ids in first-occurrence order (a Python dict's keys).
std::vector<std::string> Unique(const std::vector<std::string>& ids) {
  std::vector<std::string> out;
  for (const auto& id : ids) {
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

// A JSON map of names to ids, as json.dumps writes it.
std::string RefsJson(const std::vector<std::pair<std::string, std::string>>& refs) {
  std::string s = "{";
  for (size_t i = 0; i < refs.size(); ++i) {
    if (i > 0) s += ", ";
    s += JsonString(refs[i].first) + ": " + JsonString(refs[i].second);
  }
  s += '}';
  return s;
}

Result<ObjectView> Get(std::string_view id, std::string_view type, const ObjectMap& objects,
                       std::string_view what) {
  auto it = objects.find(id);
  if (it == objects.end()) return InvalidArgument(std::string(what) + ": object missing");
  auto v = ParseObject(*it->second);
  if (!v.ok()) return InvalidArgument(std::string(what) + ": " + v.status().message());
  if (v->type != type) {
    return InvalidArgument(std::string(what) + ": a " + std::string(v->type) + ", not a " +
                           std::string(type));
  }
  return v;
}

}  // namespace

BuiltObject BuildArrayRecord(const model::Model& m, ObjectMap& objects) {
  std::vector<std::pair<std::string, std::string>> refs;
  BuiltObject rec;
  std::vector<std::string> array_ids;
  for (size_t i = 0; i < m.spec.size(); ++i) {
    const auto& t = m.spec.tensor(i);
    const std::string npy = EncodeNpyF32(t.shape, m.tensor(i));
    std::vector<std::string> chunk_ids;
    for (size_t at = 0; at < npy.size() || (at == 0 && npy.empty()); at += kMaxArrayChunkBytes) {
      const std::string_view piece =
          std::string_view(npy).substr(at, std::min(kMaxArrayChunkBytes, npy.size() - at));
      chunk_ids.push_back(Put(MakeObject("ArrayChunk", {}, piece), objects));
      if (npy.empty()) break;
    }
    const std::vector<std::string> unique = Unique(chunk_ids);
    std::string idx = "[";
    for (size_t c = 0; c < chunk_ids.size(); ++c) {
      if (c > 0) idx += ", ";
      idx += std::to_string(std::find(unique.begin(), unique.end(), chunk_ids[c]) - unique.begin());
    }
    idx += ']';
    const std::string body = "{\"dtype\": \"float32\", \"shape\": " + JsonShape(t.shape) +
                             ", \"stype\": \"numpy.ndarray\", \"arraychunk_ids\": " + idx + "}";
    const std::string array_id = Put(MakeObject("Array", unique, body), objects);
    refs.emplace_back(t.name, array_id);
    array_ids.push_back(array_id);
  }
  const std::vector<std::string> unique = Unique(array_ids);
  rec.id = Put(MakeObject("ArrayRecord", unique, RefsJson(refs)), objects);
  rec.tree.set_object_id(rec.id);
  for (const auto& aid : unique) {
    ObjectTree* a = rec.tree.add_children();
    a->set_object_id(aid);
    auto v = ParseObject(*objects.at(aid));
    for (auto c : v->children) a->add_children()->set_object_id(std::string(c));
  }
  return rec;
}

BuiltObject BuildConfigRecord(const ConfigItems& items, ObjectMap& objects) {
  ConfigRecord r;
  for (const auto& [key, value] : items) {
    auto* item = r.add_items();
    item->set_key(key);
    auto* v = item->mutable_value();
    if (const auto* i = std::get_if<int64_t>(&value)) v->set_sint64(*i);
    if (const auto* d = std::get_if<double>(&value)) v->set_double_(*d);
    if (const auto* b = std::get_if<bool>(&value)) v->set_bool_(*b);
    if (const auto* s = std::get_if<std::string>(&value)) v->set_string(*s);
  }
  std::string body;
  r.SerializeToString(&body);
  BuiltObject out;
  out.id = Put(MakeObject("ConfigRecord", {}, body), objects);
  out.tree.set_object_id(out.id);
  return out;
}

BuiltObject BuildRecordDict(const std::vector<std::pair<std::string, BuiltObject>>& records,
                            ObjectMap& objects) {
  std::vector<std::pair<std::string, std::string>> refs;
  std::vector<std::string> ids;
  for (const auto& [name, rec] : records) {
    refs.emplace_back(name, rec.id);
    ids.push_back(rec.id);
  }
  BuiltObject out;
  const std::vector<std::string> unique = Unique(ids);
  out.id = Put(MakeObject("RecordDict", unique, RefsJson(refs)), objects);
  out.tree.set_object_id(out.id);
  for (const auto& id : unique) {
    for (const auto& [name, rec] : records) {
      if (rec.id == id) {
        *out.tree.add_children() = rec.tree;
        break;
      }
    }
  }
  return out;
}

BuiltObject BuildMessage(Metadata& metadata, const BuiltObject& content, ObjectMap& objects) {
  Message m;
  *m.mutable_metadata() = metadata;
  m.mutable_metadata()->clear_message_id();
  std::string body;
  {
    google::protobuf::io::StringOutputStream sink(&body);
    google::protobuf::io::CodedOutputStream out(&sink);
    out.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&out);
  }
  BuiltObject msg;
  msg.id = Put(MakeObject("Message", {content.id}, body), objects);
  msg.tree.set_object_id(msg.id);
  *msg.tree.add_children() = content.tree;
  metadata.set_message_id(msg.id);
  return msg;
}

Result<ReplyContent> ReadReply(std::string_view message_id, const ObjectMap& objects) {
  ReplyContent out;
  auto msg = Get(message_id, "Message", objects, "reply message");
  if (!msg.ok()) return msg.status();
  Message proto;
  if (!proto.ParseFromArray(msg->body.data(), static_cast<int>(msg->body.size()))) {
    return InvalidArgument("reply message: its body is not a Message protobuf");
  }
  if (proto.has_error()) {
    out.has_error = true;
    out.error_code = proto.error().code();
    out.error_reason = proto.error().reason();
    return out;
  }
  if (msg->children.size() != 1) return InvalidArgument("reply message: no content");
  auto rd = Get(msg->children[0], "RecordDict", objects, "reply content");
  if (!rd.ok()) return rd.status();
  const json refs = json::parse(rd->body, nullptr, false);
  if (!refs.is_object()) return InvalidArgument("reply content: not a JSON map");
  for (const auto& [name, idv] : refs.items()) {
    if (!idv.is_string()) return InvalidArgument("reply content: record '" + name + "' has no id");
    const std::string id = idv.get<std::string>();
    auto it = objects.find(id);
    if (it == objects.end()) return InvalidArgument("reply content: record '" + name + "' missing");
    auto rec = ParseObject(*it->second);
    if (!rec.ok()) return InvalidArgument("record '" + name + "': " + rec.status().message());
    if (rec->type == "MetricRecord") {
      MetricRecord mr;
      if (!mr.ParseFromArray(rec->body.data(), static_cast<int>(rec->body.size()))) {
        return InvalidArgument("record '" + name + "': not a MetricRecord protobuf");
      }
      for (const auto& item : mr.items()) {
        const auto& v = item.value();
        if (v.has_double_()) out.metrics[item.key()] = v.double_();
        if (v.has_sint64()) out.metrics[item.key()] = static_cast<double>(v.sint64());
        if (v.has_uint64()) out.metrics[item.key()] = static_cast<double>(v.uint64());
      }
    } else if (rec->type == "ArrayRecord") {
      if (out.has_arrays) return InvalidArgument("reply content: more than one ArrayRecord");
      out.has_arrays = true;
      const json arrays = json::parse(rec->body, nullptr, false);
      if (!arrays.is_object()) return InvalidArgument("record '" + name + "': not a JSON map");
      for (const auto& [tname, aidv] : arrays.items()) {
        const std::string what = "array '" + tname + "'";
        if (!aidv.is_string()) return InvalidArgument(what + ": no id");
        auto arr = Get(aidv.get<std::string>(), "Array", objects, what);
        if (!arr.ok()) return arr.status();
        const json meta = json::parse(arr->body, nullptr, false);
        if (!meta.is_object() || !meta.contains("arraychunk_ids") ||
            !meta["arraychunk_ids"].is_array()) {
          return InvalidArgument(what + ": no arraychunk_ids");
        }
        if (meta.value("stype", "") != "numpy.ndarray") {
          return InvalidArgument(what + ": stype " + meta.value("stype", "?") +
                                 " (only numpy.ndarray is read)");
        }
        // One Array's data is its chunks in order; the numpy bytes are parsed in place when the
        // Array is a single chunk (every array below 5 MiB), else joined once.
        std::string_view data;
        const auto& idx = meta["arraychunk_ids"];
        std::shared_ptr<std::string> joined;
        for (const auto& iv : idx) {
          if (!iv.is_number_unsigned() || iv.get<size_t>() >= arr->children.size()) {
            return InvalidArgument(what + ": a chunk index out of range");
          }
          auto ch = Get(arr->children[iv.get<size_t>()], "ArrayChunk", objects, what + " chunk");
          if (!ch.ok()) return ch.status();
          if (idx.size() == 1) {
            data = ch->body;
          } else {
            if (!joined) joined = std::make_shared<std::string>();
            joined->append(ch->body);
          }
        }
        if (joined) {
          data = *joined;
          out.joined.push_back(joined);
        }
        auto npy = ParseNpyF32(data);
        if (!npy.ok()) return InvalidArgument(what + ": " + npy.status().message());
        out.arrays[tname] = {npy->shape, npy->data};
      }
    }
  }
  return out;
}

}  // namespace shoal::flower
