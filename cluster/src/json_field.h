// Reading a field of a record etcd holds (a JSON object), with errors that name the record and
// the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "shoal/common/status.h"

namespace shoal::cluster {

template <typename T>
Status JsonField(const nlohmann::json& j, const char* what, const char* name, T* out) {
  auto it = j.find(name);
  if (it == j.end())
    return InvalidArgument(std::string(what) + ": field '" + name + "' is missing");
  try {
    *out = it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return InvalidArgument(std::string(what) + ": field '" + name + "' has the wrong type (" +
                           it->type_name() + ")");
  }
  return Status::Ok();
}

}  // namespace shoal::cluster
