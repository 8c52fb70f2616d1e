// `shoal validate` and `shoal explain`: manifests checked and described locally, with no
// shoald, against the manifest JSON Schema compiled into shoal (api/manifest.schema.json) and
// shoald's own manifest parser (shoal/control/node/manifest_*.cc), which a deploy runs.
#pragma once

#include <string>
#include <vector>

namespace shoal::cli {

// Which checks `validate` runs: the JSON Schema, shoald's parser, or both (the default; the
// schema's errors name every field at once, the parser's also what a schema cannot say).
enum class ValidateAgainst { kBoth, kSchema, kParser };

// Each file (YAML or JSON, one or more documents; "-" for stdin) is checked; each error is
// printed on stderr as "FILE: [document N: ]FIELD: what is wrong and what is accepted". 0 when
// every file is valid, 1 when one is not, 2 when one cannot be read.
int Validate(const std::vector<std::string>& files, ValidateAgainst against);

// The field at `path` ("fljob.spec.aggregation") as `kubectl explain` shows one: its type,
// description, accepted values and default, an object's fields. 1 for an unknown field.
int Explain(const std::string& path);

}  // namespace shoal::cli
