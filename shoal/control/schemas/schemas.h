// The published contracts, compiled in from api/*.json (shoal/control/schemas/embed_schemas.cmake):
// the HTTP API as OpenAPI 3.1, which the control listener serves at GET /v1/openapi.json, and the
// manifests (kinds Function and FLJob) as JSON Schema, which `shoal validate` and `shoal explain`
// read.
#pragma once

#include <string_view>

namespace shoal::api {

// api/openapi.json: an OpenAPI 3.1 document (JSON).
std::string_view OpenApiJson();

// api/manifest.schema.json: a JSON Schema (draft 2020-12) of one manifest document.
std::string_view ManifestSchemaJson();

}  // namespace shoal::api
