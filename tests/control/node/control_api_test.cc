#include "shoal/control/node/control_api.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "registry_fixture.h"

namespace shoal {
namespace {

using nlohmann::json;

class FakeRuntime : public RuntimeView {
 public:
  void FunctionsChanged() override { ++changed; }
  FunctionStats Stats(const std::string& function) override {
    FunctionStats s;
    if (function == "a") {
      s.desired = 2;
      s.ready = 1;
      s.starting = 1;
      s.inflight = 3;
      s.queued = 4;
      s.rps = 12.5;
      s.p50_ms = 1.25;
      s.p99_ms = 9.5;
      s.requests_total = 100;
      s.errors_total = 2;
      s.cold_starts = 5;
      s.last_cold_start_ms = 42;
      s.bpf_events = 200;
      InstanceInfo i;
      i.id = 0x10001;
      i.pid = 4242;
      i.state = "ready";
      i.inflight = 3;
      i.served = 97;
      i.cold_start_ms = 42;
      s.instances.push_back(i);
      // The compromise detector's view: one anomaly, its instance quarantined.
      InstanceInfo q;
      q.id = 0x10002;
      q.pid = 4243;
      q.state = "quarantined";
      q.quarantine = "anomaly exec: execve /bin/sh; frozen in /sys/fs/cgroup/freezer/q";
      s.instances.push_back(q);
      s.detector = "scoring (baseline of 12 intervals, 12 samples)";
      s.on_anomaly = "quarantine";
      s.anomalies_total = 1;
      s.anomalies.push_back({2.5, 0x10002, "exec", "execve /bin/sh", "quarantined"});
    }
    return s;
  }
  LogChunk Logs(const std::string& function, uint64_t offset, uint64_t max_bytes) override {
    last_log_args = {offset, max_bytes};
    const std::string all = "[" + function + "] line one\n[" + function + "] line two\n";
    LogChunk c;
    if (offset < all.size()) c.text = all.substr(offset, max_bytes);
    c.next_offset = offset + c.text.size();
    return c;
  }
  std::string DataPlaneMode() override { return "unix"; }
  std::vector<TenantPoolInfo> Pools() override {
    return {{"default", "boost", 512 << 20, 3 << 20, 509 << 20, 2, 0},
            {"team-b", "dpdk", 1 << 30, 0, 1 << 30, 0, 7}};
  }

  int changed = 0;
  std::pair<uint64_t, uint64_t> last_log_args;
};

class ControlApiTest : public ControlApiFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenRegistry("shoal-api-test"));
    api_ = std::make_unique<ControlApi>(*reg_, runtime_);
  }

  FakeRuntime runtime_;
};

TEST_F(ControlApiTest, DeployCreatesThenConfigures) {
  auto r = Call("POST", "/v1/functions", Fn("a", "  concurrency: 4\n  scale: {min: 1, max: 2}\n"));
  EXPECT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(runtime_.changed, 1);
  json j = Body(r);
  ASSERT_EQ(j["functions"].size(), 1u);
  const json& f = j["functions"][0];
  EXPECT_EQ(f["action"], "created");
  EXPECT_EQ(f["id"], 1);
  EXPECT_EQ(f["name"], "a");
  EXPECT_EQ(f["namespace"], "default");
  EXPECT_EQ(f["labels"], json::object());
  EXPECT_EQ(f["handler"]["builtin"], "echo");
  EXPECT_EQ(f["concurrency"], 4);
  EXPECT_EQ(f["scale"], (json{{"min", 1}, {"max", 2}}));
  EXPECT_EQ(f["timeout_s"], config_.default_timeout_s);
  EXPECT_EQ(f["keep_alive_s"], config_.default_keep_alive_s);
  EXPECT_EQ(f["max_body_bytes"], config_.max_body_bytes);
  EXPECT_EQ(f["resources"], (json{{"cpu", 0.0}, {"memory_bytes", 0}, {"gpu", 0}}));
  EXPECT_EQ(f["generation"], 1);
  EXPECT_EQ(f["manifest"], Fn("a", "  concurrency: 4\n  scale: {min: 1, max: 2}\n"));

  auto again = Call("POST", "/v1/functions", Fn("a"));
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(Body(again)["functions"][0]["action"], "configured");
  EXPECT_EQ(Body(again)["functions"][0]["generation"], 2);
  EXPECT_EQ(runtime_.changed, 2);
  // A mix of new and existing is a 201.
  auto mixed = Call("POST", "/v1/functions", Fn("a") + "---\n" + Fn("b"));
  EXPECT_EQ(mixed.status, 201);
  EXPECT_EQ(Body(mixed)["functions"][1]["action"], "created");
}

TEST_F(ControlApiTest, OneFunctionPerInferenceModelName) {
  auto infer = [](const std::string& name, const std::string& model) {
    return "apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: " + name +
           "\nspec:\n  handler: inference\n  inference:\n    modelName: " + model +
           "\n    source: {flJob: j}\n";
  };
  ASSERT_EQ(Call("POST", "/v1/functions", infer("a", "m")).status, 201);
  auto clash = Call("POST", "/v1/functions", infer("b", "m"));
  EXPECT_EQ(clash.status, 409);
  EXPECT_EQ(Body(clash)["error"],
            "spec.inference.modelName: model 'm' is already served by function 'a'");
  EXPECT_EQ(Call("POST", "/v1/functions", infer("b", "n") + "---\n" + infer("c", "n")).status, 409);
  // A redeploy of the same function keeps or renames its own model.
  EXPECT_EQ(Call("POST", "/v1/functions", infer("a", "m")).status, 200);
  EXPECT_EQ(Call("POST", "/v1/functions", infer("a", "m2")).status, 200);
  EXPECT_EQ(Call("POST", "/v1/functions", infer("b", "m")).status, 201);
  EXPECT_EQ(reg_->List().size(), 2u);
}

TEST_F(ControlApiTest, BadManifestIs400WithTheParsersMessage) {
  auto r = Call("POST", "/v1/functions", Fn("a", "  scale: {min: 2, max: 1}\n"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Body(r),
            (json{{"error", "spec.scale.max: must be >= spec.scale.min (2 > 1) (line 8)"}}));
  EXPECT_EQ(runtime_.changed, 0);
  EXPECT_TRUE(reg_->List().empty());
  EXPECT_EQ(Call("POST", "/v1/functions", "").status, 400);
}

TEST_F(ControlApiTest, ListAndGetCarryStatus) {
  ASSERT_EQ(Call("POST", "/v1/functions", Fn("a") + "---\n" + Fn("b")).status, 201);
  auto list = Call("GET", "/v1/functions");
  EXPECT_EQ(list.status, 200);
  json l = Body(list);
  ASSERT_EQ(l["functions"].size(), 2u);
  EXPECT_EQ(l["functions"][0]["name"], "a");
  const json& st = l["functions"][0]["status"];
  EXPECT_EQ(st["desired"], 2);
  EXPECT_EQ(st["ready"], 1);
  EXPECT_EQ(st["inflight"], 3);
  EXPECT_EQ(st["queued"], 4);
  EXPECT_EQ(st["rps"], 12.5);
  EXPECT_EQ(st["cold_starts"], 5);
  EXPECT_FALSE(st.contains("instances"));
  EXPECT_EQ(l["functions"][1]["status"]["ready"], 0);

  auto one = Call("GET", "/v1/functions/a");
  EXPECT_EQ(one.status, 200);
  json o = Body(one);
  EXPECT_EQ(o["name"], "a");
  EXPECT_EQ(o["id"], 1);
  ASSERT_EQ(o["status"]["instances"].size(), 2u);  // the second is quarantined (TopAndNode)
  EXPECT_EQ(o["status"]["instances"][0], (json{{"id", 0x10001},
                                               {"pid", 4242},
                                               {"state", "ready"},
                                               {"inflight", 3},
                                               {"served", 97},
                                               {"age_s", 0.0},
                                               {"cold_start_ms", 42.0},
                                               {"start_path", ""},
                                               {"start_note", ""},
                                               {"restarts", 0},
                                               {"quarantine", ""}}));
  EXPECT_EQ(Call("GET", "/v1/functions/a/").status, 200);  // trailing slash

  auto missing = Call("GET", "/v1/functions/zz");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Body(missing), (json{{"error", "function 'zz' not found"}}));
}

TEST_F(ControlApiTest, DeleteTellsTheRuntime) {
  ASSERT_EQ(Call("POST", "/v1/functions", Fn("a")).status, 201);
  auto d = Call("DELETE", "/v1/functions/a");
  EXPECT_EQ(d.status, 200);
  EXPECT_EQ(Body(d), (json{{"deleted", "a"}}));
  EXPECT_EQ(runtime_.changed, 2);
  auto again = Call("DELETE", "/v1/functions/a");
  EXPECT_EQ(again.status, 404);
  EXPECT_EQ(Body(again), (json{{"error", "function 'a' not found"}}));
  EXPECT_EQ(runtime_.changed, 2);
  EXPECT_EQ(Body(Call("GET", "/v1/functions"))["functions"], json::array());
}

TEST_F(ControlApiTest, LogsAreTextWithTheNextOffset) {
  ASSERT_EQ(Call("POST", "/v1/functions", Fn("a")).status, 201);
  auto r = Call("GET", "/v1/functions/a/logs", {}, "offset=4&max=8");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(r.body, "line one");
  EXPECT_EQ(runtime_.last_log_args, (std::pair<uint64_t, uint64_t>{4, 8}));
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0], (std::pair<std::string, std::string>{"X-Shoal-Next-Offset", "12"}));
  auto all = Call("GET", "/v1/functions/a/logs");
  EXPECT_EQ(all.body, "[a] line one\n[a] line two\n");
  EXPECT_EQ(runtime_.last_log_args.first, 0u);
  EXPECT_EQ(Call("GET", "/v1/functions/a/logs", {}, "offset=x").status, 400);
  EXPECT_EQ(Body(Call("GET", "/v1/functions/a/logs", {}, "offset=x")),
            (json{{"error", "offset: must be an integer"}}));
  auto missing = Call("GET", "/v1/functions/zz/logs");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Body(missing), (json{{"error", "function 'zz' not found"}}));
}

// Cluster mode: the cluster's functions placed on this node are listed, described and shown in
// top beside the node's own, marked, and cannot be deleted here.
TEST_F(ControlApiTest, TheClustersFunctionsPlacedHereAreShownAndNotDeletedHere) {
  ASSERT_EQ(Call("POST", "/v1/functions", Fn("own")).status, 201);
  api_->SetClusterFunctions([this] {
    auto parsed = ParseFunctionManifests(Fn("shared") + "---\n" + Fn("own"), config_);
    EXPECT_TRUE(parsed.ok());
    for (auto& s : *parsed) s.id = 2048;
    return *parsed;
  });
  json list = Body(Call("GET", "/v1/functions"))["functions"];
  ASSERT_EQ(list.size(), 2u) << list.dump();  // "own" once: the node's own wins
  EXPECT_EQ(list[0]["name"], "own");
  EXPECT_FALSE(list[0].contains("cluster"));
  EXPECT_EQ(list[1]["name"], "shared");
  EXPECT_EQ(list[1]["cluster"], true);
  EXPECT_EQ(list[1]["id"], 2048);
  auto one = Call("GET", "/v1/functions/shared");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(Body(one)["cluster"], true);
  json top = Body(Call("GET", "/v1/top"))["functions"];
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[1]["name"], "shared");
  EXPECT_EQ(top[1]["cluster"], true);
  EXPECT_FALSE(top[0].contains("cluster"));
  EXPECT_EQ(Call("GET", "/v1/functions/shared/logs").status, 200);
  auto del = Call("DELETE", "/v1/functions/shared");
  EXPECT_EQ(del.status, 409);
  EXPECT_EQ(Body(del)["error"],
            "function 'shared' is the cluster's (deployed through shoal-controller): delete it "
            "there");
  EXPECT_EQ(Call("GET", "/v1/functions/nowhere").status, 404);
  EXPECT_EQ(Call("DELETE", "/v1/functions/own").status, 200);
}

TEST_F(ControlApiTest, TopAndNode) {
  ASSERT_EQ(Call("POST", "/v1/functions", Fn("a") + "---\n" + Fn("b")).status, 201);
  auto t = Call("GET", "/v1/top");
  EXPECT_EQ(t.status, 200);
  json j = Body(t);
  EXPECT_EQ(j["dataplane"], "unix");
  ASSERT_EQ(j["functions"].size(), 2u);
  EXPECT_EQ(j["functions"][0],
            (json{{"name", "a"},
                  {"desired", 2},
                  {"ready", 1},
                  {"starting", 1},
                  {"inflight", 3},
                  {"queued", 4},
                  {"rps", 12.5},
                  {"p50_ms", 1.25},
                  {"p99_ms", 9.5},
                  {"requests_total", 100},
                  {"errors_total", 2},
                  {"cold_starts", 5},
                  {"last_cold_start_ms", 42.0},
                  {"bpf_events", 200},
                  // The autoscaler's view (the fake runtime reports the reactive scaler).
                  {"policy", "none"},
                  {"actual", 0},
                  {"prewarm_starts", 0},
                  {"cold_starts_avoided", 0},
                  // The compromise detector: anomalies found, instances kept quarantined.
                  {"anomalies_total", 1},
                  {"quarantined", 1}}));
  EXPECT_EQ(j["functions"][1]["anomalies_total"], 0);
  EXPECT_EQ(j["functions"][1]["quarantined"], 0);
  // describe's JSON: the detector's state, action and anomalies; the instance's quarantine.
  json st = Body(Call("GET", "/v1/functions/a"))["status"];
  EXPECT_EQ(st["detector"], (json{{"state", "scoring (baseline of 12 intervals, 12 samples)"},
                                  {"on_anomaly", "quarantine"},
                                  {"anomalies_total", 1},
                                  {"anomalies", json::array({{{"age_s", 2.5},
                                                              {"instance", 0x10002},
                                                              {"kind", "exec"},
                                                              {"evidence", "execve /bin/sh"},
                                                              {"action", "quarantined"}}})}}));
  EXPECT_EQ(st["instances"][1]["state"], "quarantined");
  EXPECT_EQ(st["instances"][1]["quarantine"],
            "anomaly exec: execve /bin/sh; frozen in /sys/fs/cgroup/freezer/q");
  EXPECT_FALSE(Body(Call("GET", "/v1/functions/b"))["status"].contains("detector"));
  auto n = Call("GET", "/v1/node");
  EXPECT_EQ(n.status, 200);
  json nj = Body(n);
  EXPECT_EQ(nj["dataplane"], "unix");
  EXPECT_EQ(nj["version"], "0.1.0");
  EXPECT_EQ(nj["functions"], 2);
  EXPECT_EQ(nj["pools"], json::parse(R"([
    {"tenant": "default", "backend": "boost", "capacity_bytes": 536870912,
     "used_bytes": 3145728, "free_bytes": 533725184, "live_buffers": 2, "alloc_failures": 0},
    {"tenant": "team-b", "backend": "dpdk", "capacity_bytes": 1073741824, "used_bytes": 0,
     "free_bytes": 1073741824, "live_buffers": 0, "alloc_failures": 7}])"));
}

TEST_F(ControlApiTest, UnknownRoutesAndWrongMethods) {
  EXPECT_EQ(Call("GET", "/v1/nothing").status, 404);
  EXPECT_EQ(Body(Call("GET", "/v1/nothing")), (json{{"error", "no route /v1/nothing"}}));
  EXPECT_EQ(Call("GET", "/v1/functions/a/b").status, 404);
  auto m = Call("PUT", "/v1/functions");
  EXPECT_EQ(m.status, 405);
  ASSERT_EQ(m.headers.size(), 1u);
  EXPECT_EQ(m.headers[0].first, "Allow");
  EXPECT_EQ(m.headers[0].second, "GET, POST");
  EXPECT_NE(Body(m)["error"].get<std::string>().find("PUT"), std::string::npos);
  EXPECT_EQ(Call("POST", "/v1/functions/a").status, 405);
  EXPECT_EQ(Call("DELETE", "/v1/top").status, 405);
  EXPECT_EQ(Call("POST", "/v1/node").status, 405);
  EXPECT_EQ(Call("POST", "/v1/functions/a/logs").status, 405);
  EXPECT_EQ(runtime_.changed, 0);
}

}  // namespace
}  // namespace shoal
