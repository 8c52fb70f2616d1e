// Flower's messages as objects (objects.h): the instructions Shoal sends a SuperNode (a `train` or
// `evaluate` Message whose RecordDict holds the global model as an ArrayRecord and a
// ConfigRecord, as flwr's FedAvg sends them) and the replies it reads back (an ArrayRecord and a
// MetricRecord, or an Error).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shoal/common/status.h"
#include "shoal/fl/flower/fleet.pb.h"
#include "shoal/fl/wire/model_spec.h"

namespace shoal::flower {

using ObjectMap = std::map<std::string, std::shared_ptr<const std::string>, std::less<>>;

// An object and the tree under it (ids only).
struct BuiltObject {
  std::string id;
  ObjectTree tree;
};

// The global model as an ArrayRecord: every tensor a numpy float32 Array in chunks of at most
// kMaxArrayChunkBytes. Its objects are added to `objects`.
BuiltObject BuildArrayRecord(const model::Model& m, ObjectMap& objects);

// A ConfigRecord value: int (sint64), float (double), bool or string, as Python types map.
using ConfigValue = std::variant<int64_t, double, bool, std::string>;
using ConfigItems = std::vector<std::pair<std::string, ConfigValue>>;
BuiltObject BuildConfigRecord(const ConfigItems& items, ObjectMap& objects);

// RecordDict {name: record} (in order).
BuiltObject BuildRecordDict(const std::vector<std::pair<std::string, BuiltObject>>& records,
                            ObjectMap& objects);

// The Message over `content`; `metadata.message_id` is set to the message's object id.
BuiltObject BuildMessage(Metadata& metadata, const BuiltObject& content, ObjectMap& objects);

// A reply's content as Shoal uses it.
struct ReplyContent {
  bool has_error = false;
  int64_t error_code = 0;
  std::string error_reason;
  // The ArrayRecord's float32 tensors by name: their shapes and raw little-endian bytes.
  struct Tensor {
    std::vector<uint64_t> shape;
    std::string_view data;  // into the reply's objects
  };
  std::map<std::string, Tensor, std::less<>> arrays;
  bool has_arrays = false;
  std::map<std::string, double, std::less<>> metrics;  // the MetricRecord's scalars
  // Arrays of several chunks, joined (a one-chunk array's data stays in its object).
  std::vector<std::shared_ptr<const std::string>> joined;
};

// Reads the reply whose Message object is `message_id` from `objects` (every object of its tree
// present and checked). kInvalidArgument names what does not conform.
Result<ReplyContent> ReadReply(std::string_view message_id, const ObjectMap& objects);

}  // namespace shoal::flower
