// The control API's FL job routes (/v1/jobs/...) against a fake JobService: status codes, JSON
// bodies, headers, 501 without a service, and mixed Function + FLJob deploys (all or nothing).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "registry_fixture.h"
#include "shoal/control/node/control_api.h"
#include "tests/support/temp_dir.h"

namespace shoal {
namespace {

using nlohmann::json;

class NullRuntime : public RuntimeView {
 public:
  void FunctionsChanged() override { ++changed; }
  FunctionStats Stats(const std::string&) override { return {}; }
  LogChunk Logs(const std::string&, uint64_t, uint64_t) override { return {}; }
  std::string DataPlaneMode() override { return "unix"; }
  int changed = 0;
};

class FakeJobService : public JobService {
 public:
  Status DeployJob(const FlJobSpec& spec) override {
    deployed.push_back(spec);
    if (spec.algorithm_params.count("bogus")) {
      return InvalidArgument("spec.algorithm.params.bogus: not a parameter of " + spec.algorithm);
    }
    jobs[spec.name] = spec;
    return {};
  }
  Status DeleteJob(const std::string& job) override {
    deleted.push_back(job);
    if (!jobs.erase(job)) return NotFound("job '" + job + "' not found");
    return {};
  }
  std::vector<std::string> ListJobs() override {
    std::vector<std::string> out;
    for (const auto& [name, spec] : jobs) out.push_back(name);
    return out;
  }
  Result<std::string> JobStatusJson(const std::string& job,
                                    const StatusClientsPage& page = {}) override {
    last_page = page;
    if (!jobs.count(job)) return NotFound("job '" + job + "' not found");
    json st{
        {"name", job}, {"algorithm", jobs[job].algorithm}, {"state", "running"}, {"version", 3}};
    if (!model.is_null()) st["model"] = model;
    return st.dump();
  }
  Result<std::string> JobNamespace(const std::string& job) override {
    if (!jobs.count(job)) return NotFound("job '" + job + "' not found");
    return jobs[job].tenant;
  }
  Result<JoinResult> Join(const std::string& job, const std::string& client_name,
                          const std::string& join_token) override {
    if (!jobs.count(job)) return NotFound("job '" + job + "' not found");
    last_join = {client_name, join_token};
    if (join_token == "wrong") return PermissionDenied("bad join token");
    return JoinResult{"c7", "tok-7"};
  }
  Result<TaskResult> Task(const std::string& job, const std::string& client_id,
                          const std::string& token) override {
    if (!jobs.count(job)) return NotFound("job '" + job + "' not found");
    if (client_id != "c7") return NotFound("client '" + client_id + "' not found");
    if (token != "tok+7/=") return PermissionDenied("bad token for client " + client_id);
    return next_task;
  }
  Result<ModelBlob> Model(const std::string& job, std::optional<uint64_t> version) override {
    if (!jobs.count(job)) return NotFound("job '" + job + "' not found");
    last_model_version = version;
    if (version && *version > 3)
      return NotFound("version " + std::to_string(*version) + " not kept");
    return ModelBlob{version.value_or(3),
                     std::make_shared<const std::string>(std::string("ST\0\x01bytes", 8))};
  }
  Status Evaluate(const std::string& job, const EvalReport& report) override {
    if (!jobs.count(job)) return NotFound("job '" + job + "' not found");
    reports.push_back(report);
    return {};
  }

  std::map<std::string, FlJobSpec> jobs;
  std::vector<FlJobSpec> deployed;
  std::vector<std::string> deleted;
  std::pair<std::string, std::string> last_join;
  StatusClientsPage last_page;
  TaskResult next_task;
  std::optional<uint64_t> last_model_version;
  std::vector<EvalReport> reports;
  json model;  // the status's "model" object, when set
};

std::string Job(const std::string& name, const std::string& params = "{}") {
  return "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: " + name +
         "\nspec:\n  algorithm: {name: fedasync, params: " + params +
         "}\n  clients: {expected: 4}\n";
}

class FlJobApiTest : public ControlApiFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenRegistry("shoal-fljob-api-test"));
    api_ = std::make_unique<ControlApi>(*reg_, runtime_, &jobs_);
  }

  NullRuntime runtime_;
  FakeJobService jobs_;
};

TEST_F(FlJobApiTest, DeployThroughFunctionsRoutesJobsToTheService) {
  auto r = Call("POST", "/v1/functions", Fn("echo") + "---\n" + Job("fmnist", "{alpha: 0.6}"));
  EXPECT_EQ(r.status, 201) << r.body;
  const json j = Body(r);
  ASSERT_EQ(j["functions"].size(), 1u);
  EXPECT_EQ(j["functions"][0]["name"], "echo");
  EXPECT_EQ(j["jobs"], json::parse(R"([{"kind":"FLJob","name":"fmnist","namespace":"default",
                                        "algorithm":"fedasync","action":"created"}])"));
  ASSERT_EQ(jobs_.deployed.size(), 1u);
  EXPECT_EQ(jobs_.deployed[0].algorithm_params.at("alpha"), 0.6);
  EXPECT_EQ(jobs_.deployed[0].manifest, Job("fmnist", "{alpha: 0.6}"));
  EXPECT_TRUE(reg_->Get("echo").has_value());
  EXPECT_EQ(runtime_.changed, 1);

  // The same job again is an update: 200, "configured", and functions untouched.
  auto again = Call("POST", "/v1/functions", Job("fmnist"));
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(Body(again)["jobs"][0]["action"], "configured");
  EXPECT_EQ(Body(again)["functions"], json::array());
  EXPECT_EQ(runtime_.changed, 1);
}

TEST_F(FlJobApiTest, AMixedFileWithOneBadDocumentDeploysNothing) {
  auto r =
      Call("POST", "/v1/functions", Fn("echo") + "---\n" + Job("fmnist") + "---\n" + Fn("BAD"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Body(r)["error"],
            "metadata.name: must be a DNS label (lower-case letters, digits and '-', starting "
            "and ending with a letter or digit, at most 63 characters), got \"BAD\" (line 20)");
  EXPECT_TRUE(jobs_.deployed.empty());
  EXPECT_FALSE(reg_->Get("echo").has_value());
  EXPECT_EQ(runtime_.changed, 0);

  // The coordinator refuses the second job: the first job (new) is deleted again and no
  // function is deployed.
  auto refused = Call("POST", "/v1/functions",
                      Fn("echo") + "---\n" + Job("a") + "---\n" + Job("b", "{bogus: 1}"));
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(Body(refused)["error"], "spec.algorithm.params.bogus: not a parameter of fedasync");
  EXPECT_TRUE(jobs_.jobs.empty());
  EXPECT_EQ(jobs_.deleted, std::vector<std::string>{"a"});
  EXPECT_FALSE(reg_->Get("echo").has_value());
}

TEST_F(FlJobApiTest, PostJobsTakesOnlyFlJobs) {
  auto r = Call("POST", "/v1/jobs", Job("a") + "---\n" + Job("b"));
  EXPECT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(Body(r)["jobs"].size(), 2u);
  EXPECT_EQ(Body(r).contains("functions"), false);
  auto fn = Call("POST", "/v1/jobs", Fn("echo"));
  EXPECT_EQ(fn.status, 400);
  EXPECT_EQ(Body(fn)["error"], "kind: expected FLJob, got Function (line 2)");
  auto bad = Call("POST", "/v1/jobs",
                  "apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata: {name: x}\nspec: {}\n");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Body(bad)["error"], "spec.clients: required");
  EXPECT_EQ(Call("PUT", "/v1/jobs").status, 405);
}

TEST_F(FlJobApiTest, ListStatusAndDelete) {
  EXPECT_EQ(Body(Call("GET", "/v1/jobs")), json::parse(R"({"jobs":[]})"));
  ASSERT_EQ(Call("POST", "/v1/jobs", Job("b") + "---\n" + Job("a")).status, 201);
  auto list = Call("GET", "/v1/jobs");
  EXPECT_EQ(list.status, 200);
  EXPECT_EQ(Body(list), json::parse(R"({"jobs":[
      {"name":"a","algorithm":"fedasync","state":"running","version":3},
      {"name":"b","algorithm":"fedasync","state":"running","version":3}]})"));
  auto one = Call("GET", "/v1/jobs/a");
  EXPECT_EQ(one.status, 200);
  EXPECT_EQ(one.body, R"({"algorithm":"fedasync","name":"a","state":"running","version":3})"
                      "\n");
  EXPECT_EQ(jobs_.last_page.from, 0u);
  EXPECT_EQ(jobs_.last_page.limit, StatusClientsPage::kDefaultLimit);
  // The page of clients the status lists: from a client number, up to a limit.
  EXPECT_EQ(Call("GET", "/v1/jobs/a", {}, "clients_from=2000&clients_limit=7").status, 200);
  EXPECT_EQ(jobs_.last_page.from, 2000u);
  EXPECT_EQ(jobs_.last_page.limit, 7u);
  auto too_many = Call("GET", "/v1/jobs/a", {}, "clients_limit=1001");
  EXPECT_EQ(too_many.status, 400);
  EXPECT_EQ(Body(too_many)["error"], "clients_limit: must be an integer from 0 to 1000");
  auto not_number = Call("GET", "/v1/jobs/a", {}, "clients_from=c5");
  EXPECT_EQ(not_number.status, 400);
  EXPECT_EQ(Body(not_number)["error"],
            "clients_from: must be an integer >= 0 (a client number: c<N>)");
  auto missing = Call("GET", "/v1/jobs/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Body(missing)["error"], "job 'nope' not found");
  auto del = Call("DELETE", "/v1/jobs/a");
  EXPECT_EQ(del.status, 200);
  EXPECT_EQ(Body(del), json::parse(R"({"deleted":"a"})"));
  EXPECT_EQ(Call("DELETE", "/v1/jobs/a").status, 404);
  auto wrong = Call("POST", "/v1/jobs/b");
  EXPECT_EQ(wrong.status, 405);
  ASSERT_EQ(wrong.headers.size(), 1u);
  EXPECT_EQ(wrong.headers[0], (std::pair<std::string, std::string>{"Allow", "GET, DELETE"}));
  EXPECT_EQ(Call("GET", "/v1/jobs/b/nothing").status, 404);
}

TEST_F(FlJobApiTest, JoinTaskModelEval) {
  ASSERT_EQ(Call("POST", "/v1/jobs", Job("fmnist")).status, 201);
  auto join = Call("POST", "/v1/jobs/fmnist/join", R"({"name":"phone-1","token":"pre"})");
  EXPECT_EQ(join.status, 200) << join.body;
  EXPECT_EQ(Body(join), json::parse(R"({"client_id":"c7","token":"tok-7"})"));
  EXPECT_EQ(jobs_.last_join, (std::pair<std::string, std::string>{"phone-1", "pre"}));
  EXPECT_EQ(Call("POST", "/v1/jobs/fmnist/join").status, 200);  // empty body: both optional
  EXPECT_EQ(jobs_.last_join, (std::pair<std::string, std::string>{"", ""}));
  auto denied = Call("POST", "/v1/jobs/fmnist/join", R"({"token":"wrong"})");
  EXPECT_EQ(denied.status, 403);
  EXPECT_EQ(Body(denied)["error"], "bad join token");
  auto notjson = Call("POST", "/v1/jobs/fmnist/join", "name=x");
  EXPECT_EQ(notjson.status, 400);
  EXPECT_EQ(Body(notjson)["error"],
            R"(body: must be a JSON object like {"name": "...", "token": "..."})");
  EXPECT_EQ(Body(Call("POST", "/v1/jobs/fmnist/join", R"({"name":3})"))["error"],
            "name: must be a string");
  EXPECT_EQ(Call("POST", "/v1/jobs/nope/join").status, 404);
  EXPECT_EQ(Call("GET", "/v1/jobs/fmnist/join").status, 405);

  // Task: the token travels in the query, %-decoded.
  const std::string q = "client=c7&token=tok%2B7%2F%3D";
  jobs_.next_task.kind = TaskResult::Kind::kTrain;
  jobs_.next_task.model_version = 5;
  jobs_.next_task.local_steps = 100;
  jobs_.next_task.learning_rate = 0.1;
  jobs_.next_task.batch_size = 32;
  auto train = Call("GET", "/v1/jobs/fmnist/task", {}, q);
  EXPECT_EQ(train.status, 200) << train.body;
  EXPECT_EQ(Body(train), json::parse(R"({"kind":"train","model_version":5,"local_steps":100,
                                         "learning_rate":0.1,"batch_size":32})"));
  jobs_.next_task = TaskResult{};
  jobs_.next_task.retry_after_ms = 250;
  EXPECT_EQ(Body(Call("GET", "/v1/jobs/fmnist/task", {}, q)),
            json::parse(R"({"kind":"wait","retry_after_ms":250})"));
  jobs_.next_task.kind = TaskResult::Kind::kDone;
  EXPECT_EQ(Body(Call("GET", "/v1/jobs/fmnist/task", {}, q)), json::parse(R"({"kind":"done"})"));
  auto bad_token = Call("GET", "/v1/jobs/fmnist/task", {}, "client=c7&token=x");
  EXPECT_EQ(bad_token.status, 403);
  EXPECT_EQ(Body(bad_token)["error"], "bad token for client c7");
  EXPECT_EQ(Call("GET", "/v1/jobs/fmnist/task", {}, "client=c9&token=x").status, 404);
  auto no_client = Call("GET", "/v1/jobs/fmnist/task", {}, "token=x");
  EXPECT_EQ(no_client.status, 400);
  EXPECT_EQ(Body(no_client)["error"], "client: required (?client=ID&token=T)");
  EXPECT_EQ(Call("GET", "/v1/jobs/nope/task", {}, q).status, 404);

  // Model: raw safetensors bytes and the version header.
  auto model = Call("GET", "/v1/jobs/fmnist/model");
  EXPECT_EQ(model.status, 200);
  EXPECT_EQ(model.content_type, "application/octet-stream");
  // The coordinator's bytes themselves, shared with the reply (no copy).
  ASSERT_NE(model.shared_body, nullptr);
  EXPECT_EQ(*model.shared_body, std::string("ST\0\x01bytes", 8));
  EXPECT_TRUE(model.body.empty());
  EXPECT_EQ(model.headers,
            (std::vector<std::pair<std::string, std::string>>{{"X-Shoal-Model-Version", "3"}}));
  EXPECT_FALSE(jobs_.last_model_version.has_value());
  auto v2 = Call("GET", "/v1/jobs/fmnist/model", {}, "version=2");
  EXPECT_EQ(v2.headers[0].second, "2");
  EXPECT_EQ(jobs_.last_model_version, std::optional<uint64_t>(2));
  EXPECT_EQ(Call("GET", "/v1/jobs/fmnist/model", {}, "version=9").status, 404);
  auto badv = Call("GET", "/v1/jobs/fmnist/model", {}, "version=latest");
  EXPECT_EQ(badv.status, 400);
  EXPECT_EQ(Body(badv)["error"], "version: must be an integer");

  // Eval.
  auto ev = Call(
      "POST", "/v1/jobs/fmnist/eval",
      R"({"client_id":"c7","token":"tok-7","version":3,"accuracy":0.8125,"loss":0.5,"samples":1000})");
  EXPECT_EQ(ev.status, 200) << ev.body;
  EXPECT_EQ(Body(ev), json::parse(R"({"ok":true})"));
  ASSERT_EQ(jobs_.reports.size(), 1u);
  EXPECT_EQ(jobs_.reports[0].client_id, "c7");
  EXPECT_EQ(jobs_.reports[0].token, "tok-7");
  EXPECT_EQ(jobs_.reports[0].version, 3u);
  EXPECT_EQ(jobs_.reports[0].accuracy, 0.8125);
  EXPECT_EQ(jobs_.reports[0].loss, 0.5);
  EXPECT_EQ(jobs_.reports[0].samples, 1000u);
  const std::vector<std::pair<std::string, std::string>> bad_reports = {
      {R"({"version":3,"accuracy":0.8,"loss":0.5})", "client_id: required"},
      {R"({"client_id":"c7","accuracy":0.8,"loss":0.5})", "version: required"},
      {R"({"client_id":"c7","version":-1,"accuracy":0.8,"loss":0.5})",
       "version: must be an integer >= 0"},
      {R"({"client_id":"c7","version":3,"accuracy":"high","loss":0.5})",
       "accuracy: must be a number"},
      {R"({"client_id":"c7","version":3,"accuracy":0.8})", "loss: required"},
      {"[1]",
       R"(body: must be a JSON object {"client_id", "token", "version", "accuracy", "loss", "samples"})"},
  };
  for (const auto& [body, message] : bad_reports) {
    auto b = Call("POST", "/v1/jobs/fmnist/eval", body);
    EXPECT_EQ(b.status, 400) << body;
    EXPECT_EQ(Body(b)["error"], message) << body;
  }
  EXPECT_EQ(jobs_.reports.size(), 1u);
  EXPECT_EQ(Call("POST", "/v1/jobs/nope/eval",
                 R"({"client_id":"c7","version":3,"accuracy":0.8,"loss":0.5})")
                .status,
            404);
}

TEST(FlJobApiDisabledTest, WithoutAServiceJobRoutesAre501AndNothingIsDeployed) {
  const shoal::testing::TempDir tmp("shoal-fljob-api-test");
  NodeConfig config;
  config.state_dir = tmp.path();
  auto reg = FunctionRegistry::Open(config);
  ASSERT_TRUE(reg.ok());
  NullRuntime runtime;
  ControlApi api(**reg, runtime);  // the constructor without a JobService
  const std::string expected = R"({"error":"FL jobs are not enabled on this node"})"
                               "\n";
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/jobs"},
                                                        {"POST", "/v1/jobs"},
                                                        {"GET", "/v1/jobs/x"},
                                                        {"DELETE", "/v1/jobs/x"},
                                                        {"POST", "/v1/jobs/x/join"},
                                                        {"GET", "/v1/jobs/x/task"},
                                                        {"GET", "/v1/jobs/x/model"},
                                                        {"POST", "/v1/jobs/x/eval"}}) {
    auto r = api.Handle(method, path, "", "", kAdmin);
    EXPECT_EQ(r.status, 501) << method << " " << path;
    EXPECT_EQ(r.body, expected) << method << " " << path;
  }
  auto mixed =
      api.Handle("POST", "/v1/functions", "", Fn("echo") + "---\n" + Job("fmnist"), kAdmin);
  EXPECT_EQ(mixed.status, 501);
  EXPECT_EQ(mixed.body, expected);
  EXPECT_FALSE((*reg)->Get("echo").has_value());
  EXPECT_EQ(runtime.changed, 0);
  // Functions alone still deploy.
  EXPECT_EQ(api.Handle("POST", "/v1/functions", "", Fn("echo"), kAdmin).status, 201);
}

// /v1/jobs/{job}/flower/supernodes reach the Flower service's allow-list (method, job, node id and
// body as sent): viewers read it, only writers change it; 501 without the service.
TEST_F(FlJobApiTest, FlowerSupernodeRoutes) {
  ASSERT_EQ(Call("POST", "/v1/jobs", Job("fmnist")).status, 201);
  EXPECT_EQ(Call("GET", "/v1/jobs/fmnist/flower/supernodes").status, 501);
  std::vector<std::string> seen;
  api_->SetFlowerSupernodes([&seen](std::string_view m, const std::string& job, std::string_view id,
                                    std::string_view body) {
    seen.push_back(std::string(m) + " " + job + " [" + std::string(id) + "] " + std::string(body));
    HttpReply r;
    r.status = 200;
    r.content_type = "application/json";
    r.body = "{}";
    return r;
  });
  const auth::Principal viewer{"t1", "v", auth::Role::kViewer, "", ""};
  const auto as_viewer = [&](std::string_view method, std::string_view path) {
    return api_->Handle(method, path, "", "{}", viewer).status;
  };
  EXPECT_EQ(as_viewer("GET", "/v1/jobs/fmnist/flower/supernodes"), 200);
  EXPECT_EQ(as_viewer("POST", "/v1/jobs/fmnist/flower/supernodes"), 403);
  EXPECT_EQ(as_viewer("DELETE", "/v1/jobs/fmnist/flower/supernodes/7"), 403);
  EXPECT_EQ(Call("POST", "/v1/jobs/fmnist/flower/supernodes", R"({"publicKey":"k"})").status, 200);
  EXPECT_EQ(Call("DELETE", "/v1/jobs/fmnist/flower/supernodes/7").status, 200);
  EXPECT_EQ(seen,
            (std::vector<std::string>{"GET fmnist [] {}", R"(POST fmnist [] {"publicKey":"k"})",
                                      "DELETE fmnist [7] "}));
}

}  // namespace
TEST_F(FlJobApiTest, ModelAsOnnx) {
  ASSERT_EQ(Call("POST", "/v1/jobs", Job("fmnist")).status, 201);
  auto bad = Call("GET", "/v1/jobs/fmnist/model", {}, "format=pt");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Body(bad)["error"], "format: must be safetensors or onnx, not 'pt'");
  // Without an exporter (the gateway's API: no long work on its loops) onnx is refused.
  auto none = Call("GET", "/v1/jobs/fmnist/model", {}, "format=onnx");
  EXPECT_EQ(none.status, 400);
  EXPECT_EQ(Body(none)["error"],
            "format: onnx is served on the control listener (control_listen_host:control_port), "
            "not here; this listener serves safetensors");
  EXPECT_EQ(Call("GET", "/v1/jobs/fmnist/model", {}, "format=safetensors").status, 200);

  // The exporter gets the job's status and the version's bytes.
  std::string got_status;
  std::string got_bytes;
  api_->SetOnnxExport([&](std::string_view status, std::string_view bytes) -> Result<std::string> {
    got_status = status;
    got_bytes = bytes;
    if (jobs_.model.is_null()) return InvalidArgument("its status names no model architecture");
    return std::string("ONNX!");
  });
  auto unnamed = Call("GET", "/v1/jobs/fmnist/model", {}, "format=onnx");
  EXPECT_EQ(unnamed.status, 500);
  EXPECT_EQ(Body(unnamed)["error"], "job fmnist: its status names no model architecture");
  jobs_.model = {{"architecture", "mlp"}, {"hidden", 32}};
  auto onnx = Call("GET", "/v1/jobs/fmnist/model", {}, "version=2&format=onnx");
  EXPECT_EQ(onnx.status, 200) << onnx.body;
  EXPECT_EQ(onnx.content_type, "application/octet-stream");
  EXPECT_EQ(onnx.body, "ONNX!");
  EXPECT_EQ(onnx.headers,
            (std::vector<std::pair<std::string, std::string>>{{"X-Shoal-Model-Version", "2"}}));
  EXPECT_EQ(json::parse(got_status)["model"], jobs_.model);
  EXPECT_EQ(got_bytes, std::string("ST\0\x01bytes", 8));
  EXPECT_EQ(Call("GET", "/v1/jobs/nope/model", {}, "format=onnx").status, 404);
}

TEST_F(FlJobApiTest, UiInfoNamesTheServer) {
  auto r = Call("GET", "/v1/ui-info");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(Body(r)["server"], "shoald");
  EXPECT_EQ(Body(r)["version"], kShoalVersion);
  EXPECT_EQ(Call("POST", "/v1/ui-info").status, 405);
}

}  // namespace shoal
