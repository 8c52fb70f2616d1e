// The control API behind every `/v1/...` path: deploy, list, describe and delete functions,
// read their logs, and the node's load (`shoal top`); deploy and drive FL jobs (/v1/jobs/...)
// through the node's JobService; create, list and revoke tokens (/v1/tokens). Every request
// comes with the Principal its bearer token proved (the listener authenticates; 401 is its
// job); each route checks that principal's role here (403 naming the token and what it lacks)
// before it reads or changes anything. Pure request -> reply; JSON in and out (model downloads
// excepted), errors as {"error": "..."} with the matching HTTP status.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shoal/control/node/manifest.h"
#include "shoal/control/node/registry.h"
#include "shoal/interfaces/http_reply.h"
#include "shoal/interfaces/job_service.h"
#include "shoal/interfaces/runtime_view.h"
#include "shoal/security/auth/role.h"
#include "shoal/security/auth/token_store.h"

namespace shoal {

inline constexpr const char* kShoalVersion = "0.1.0";

class ControlApi {
 public:
  // `jobs` may be null: the node then answers every FL job route with 501; `tokens` likewise
  // for /v1/tokens.
  ControlApi(FunctionRegistry& registry, RuntimeView& runtime, JobService* jobs = nullptr,
             auth::TokenStore* tokens = nullptr);

  // A job's model version as ONNX bytes from the job's status JSON (its architecture and
  // widths) and the version's safetensors: inference::JobModelAsOnnx, which the controller
  // library does not link.
  using OnnxExport = std::function<Result<std::string>(std::string_view job_status_json,
                                                       std::string_view safetensors)>;
  // Lets GET /v1/jobs/{job}/model?format=onnx convert (without it that answers 501). Only for
  // an API whose caller may run long work: the control listener's threads, not a gateway loop.
  void SetOnnxExport(OnnxExport e) { onnx_export_ = std::move(e); }

  // Cluster mode: the cluster's functions placed on this node (the controller deployed them;
  // this node's instance manager runs them beside its own). They are listed, described, shown
  // in top and their logs read as the node's own, marked "cluster": true; deploying or deleting
  // one here is refused (the controller owns them).
  using ClusterFunctions = std::function<std::vector<FunctionSpec>()>;
  void SetClusterFunctions(ClusterFunctions f) { cluster_functions_ = std::move(f); }

  // The Flower jobs' SuperNode allow-lists (shoal/fl/flower's FleetService::Supernodes):
  // /v1/jobs/{job}/flower/supernodes (GET: viewers; POST: writers) and .../{node_id} (DELETE:
  // writers). Without it those routes answer 501.
  using FlowerSupernodes =
      std::function<HttpReply(std::string_view method, const std::string& job,
                              std::string_view node_id, std::string_view body)>;
  void SetFlowerSupernodes(FlowerSupernodes f) { flower_supernodes_ = std::move(f); }

  // `path` starts with /v1/; `query` is the part after '?', without it; `who` made the request.
  HttpReply Handle(std::string_view method, std::string_view path, std::string_view query,
                   std::string_view body, const auth::Principal& who);

  // What the console's overview shows, in one JSON object on one line: the node (as GET
  // /v1/node), the functions `who` may list with their live status (as GET /v1/functions) and
  // the FL jobs in summary (name, algorithm, state, version, the latest evaluated accuracy and
  // loss, best accuracy, clients, updates). GET /v1/events sends it every interval; 403 unless
  // `who` may read the node.
  HttpReply Snapshot(const auth::Principal& who);

 private:
  HttpReply Deploy(std::string_view body, const auth::Principal& who);
  // A function of this node: its registry's, or one of the cluster's placed here.
  std::optional<FunctionSpec> FindFunction(const std::string& name) const;
  // Every function of this node, the registry's first; `cluster` (if given) says which are
  // the cluster's.
  std::vector<FunctionSpec> AllFunctions(std::vector<bool>* cluster = nullptr) const;
  HttpReply Tokens(std::string_view method, std::string_view path, std::string_view rest,
                   std::string_view body);
  // The job's namespace; kNotFound for an unknown job.
  Result<std::string> JobNamespace(const std::string& job);
  // Routes below /v1/jobs; `rest` is the path after "jobs" ("", "/name", "/name/task", ...).
  HttpReply Jobs(std::string_view method, std::string_view path, std::string_view rest,
                 std::string_view query, std::string_view body, const auth::Principal& who);
  HttpReply DeployJobsOnly(std::string_view body, const auth::Principal& who);
  // Deploys every spec through the job service; when one is refused, the jobs this call created
  // are deleted again (re-deployed ones keep their new generation). Returns, per spec, whether
  // the job was new.
  Result<std::vector<bool>> DeployJobSpecs(const std::vector<FlJobSpec>& specs);
  void DeleteCreatedJobs(const std::vector<FlJobSpec>& specs, const std::vector<bool>& created);
  HttpReply ListJobs(const auth::Principal& who);
  HttpReply JobStatus(const std::string& job, std::string_view query = {});
  HttpReply DeleteJob(const std::string& job);
  HttpReply Join(const std::string& job, std::string_view body);
  HttpReply Task(const std::string& job, std::string_view query);
  HttpReply Model(const std::string& job, std::string_view query);
  HttpReply Evaluate(const std::string& job, std::string_view body);
  HttpReply SecureAggregation(const std::string& job, std::string_view step, std::string_view query,
                              std::string_view body);
  HttpReply ListFunctions(const auth::Principal& who);
  HttpReply GetFunction(const std::string& name);
  // GET /v1/functions/fl.<job>: the job's leaf aggregators (live status and instances only).
  HttpReply GetLeafFunction(const std::string& name, const std::string& ns);
  HttpReply DeleteFunction(const std::string& name);
  HttpReply Logs(const std::string& name, std::string_view query);
  HttpReply Top();
  HttpReply Node();

  FunctionRegistry& registry_;
  RuntimeView& runtime_;
  JobService* jobs_;
  auth::TokenStore* tokens_;
  ClusterFunctions cluster_functions_;
  OnnxExport onnx_export_;
  FlowerSupernodes flower_supernodes_;
};

}  // namespace shoal
