// Flower's inflatable objects as the Fleet API carries them (flwr 1.42): every Message, RecordDict,
// record, Array and ArrayChunk travels as one object whose content is
//   "<Type> <child id>,<child id>,... <body length>" 0x00 <body>
// and whose id is the SHA-256 (lower-case hex) of that content. The records' bodies are JSON maps
// of names to child ids (RecordDict, ArrayRecord), an Array's JSON metadata, a chunk's raw bytes,
// or a protobuf (ConfigRecord, MetricRecord, Message).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shoal/common/status.h"

namespace shoal::flower {

// An ArrayChunk carries at most this many bytes of an Array's data (Flower's
// FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE default, 5 MiB).
inline constexpr size_t kMaxArrayChunkBytes = 5 * 1024 * 1024;

std::string ObjectId(std::string_view content);
bool IsObjectId(std::string_view id);

// `children`: ids in the order Flower lists them (unique, first occurrence first).
std::string MakeObject(std::string_view type, const std::vector<std::string>& children,
                       std::string_view body);

struct ObjectView {
  std::string_view type;
  std::vector<std::string_view> children;
  std::string_view body;
};
// The head checked: three space-separated fields, ids that are SHA-256 hex, the body length
// equal to the bytes after the divider.
Result<ObjectView> ParseObject(std::string_view content);

// Python's json.dumps of a str (ensure_ascii): the quoted, escaped string.
std::string JsonString(std::string_view s);

}  // namespace shoal::flower
