// FLJob and Function custom resources (shoal.dev/v1) as shoal-controller's operator reads and
// writes them: the Shoal manifest a resource deploys as (its Kubernetes namespace is the Shoal
// tenant), and the status subresource it writes back (state, version, accuracy, clients or
// ready/desired instances, and the Ready, Progressing and Failed conditions). No I/O here.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace shoal::kubernetes {

// The manifest text (JSON, which the YAML manifest parser reads) of a custom resource:
// apiVersion, kind, metadata.name, metadata.namespace and the spec as the API server stored
// them. kind is "FLJob" or "Function".
std::string ManifestOf(const nlohmann::json& resource);

// What the operator knows of one resource's deploy and its Shoal state, turned into a status.
struct Observed {
  int64_t generation = 0;     // the resource's metadata.generation last deployed (or refused)
  std::string deploy_error;   // the manifest error of that deploy; "" when it was accepted
  std::string deploy_reason;  // the error's Kubernetes reason (InvalidManifest, Unavailable)
  // An FLJob's status as shoal-controller serves it (GET /v1/jobs/<name>); none until its
  // top has published one.
  std::optional<nlohmann::json> job;
  // A Function's instances: ready over the nodes placed to run it, desired by the placement.
  std::optional<int64_t> ready, desired;
};

// The status object to write for `kind` ("FLJob" or "Function"), keeping each condition's
// lastTransitionTime from `previous` (the resource's current status) where its status did not
// change; `now` is an RFC 3339 time.
nlohmann::json StatusFor(const std::string& kind, const Observed& observed,
                         const nlohmann::json& previous, const std::string& now);

// The current time as RFC 3339 (UTC, seconds).
std::string Rfc3339Now();

}  // namespace shoal::kubernetes
