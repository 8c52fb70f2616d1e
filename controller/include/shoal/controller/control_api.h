// The control API behind every `/v1/...` path of the gateway: deploy, list, describe and delete
// functions, read their logs, and the node's load (`shoal top`); deploy and drive FL jobs
// (/v1/jobs/...) through the node's JobService. Pure request -> reply; JSON in and out (model
// downloads excepted), errors as {"error": "..."} with the matching HTTP status.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shoal/controller/job_service.h"
#include "shoal/controller/manifest.h"
#include "shoal/controller/registry.h"
#include "shoal/controller/runtime_view.h"

namespace shoal {

inline constexpr const char* kShoalVersion = "0.1.0";

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class ControlApi {
 public:
  // `jobs` may be null: the node then answers every FL job route with 501.
  ControlApi(FunctionRegistry& registry, RuntimeView& runtime, JobService* jobs = nullptr);

  // `path` starts with /v1/; `query` is the part after '?', without it.
  HttpReply Handle(std::string_view method, std::string_view path, std::string_view query,
                   std::string_view body);

 private:
  HttpReply Deploy(std::string_view body);
  // Routes below /v1/jobs; `rest` is the path after "jobs" ("", "/name", "/name/task", ...).
  HttpReply Jobs(std::string_view method, std::string_view path, std::string_view rest,
                 std::string_view query, std::string_view body);
  HttpReply DeployJobsOnly(std::string_view body);
  // Deploys every spec through the job service; when one is refused, the jobs this call created
  // are deleted again (re-deployed ones keep their new generation). Returns, per spec, whether
  // the job was new.
  Result<std::vector<bool>> DeployJobSpecs(const std::vector<FlJobSpec>& specs);
  void DeleteCreatedJobs(const std::vector<FlJobSpec>& specs, const std::vector<bool>& created);
  HttpReply ListJobs();
  HttpReply JobStatus(const std::string& job);
  HttpReply DeleteJob(const std::string& job);
  HttpReply Join(const std::string& job, std::string_view body);
  HttpReply Task(const std::string& job, std::string_view query);
  HttpReply Model(const std::string& job, std::string_view query);
  HttpReply Evaluate(const std::string& job, std::string_view body);
  HttpReply ListFunctions();
  HttpReply GetFunction(const std::string& name);
  HttpReply DeleteFunction(const std::string& name);
  HttpReply Logs(const std::string& name, std::string_view query);
  HttpReply Top();
  HttpReply Node();

  FunctionRegistry& registry_;
  RuntimeView& runtime_;
  JobService* jobs_;
};

}  // namespace shoal
