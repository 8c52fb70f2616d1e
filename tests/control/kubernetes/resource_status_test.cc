// The manifest a custom resource deploys as (it parses as the same FLJob), and the status the
// operator writes for each Shoal state, conditions keeping their transition times.
#include "shoal/control/kubernetes/resource_status.h"

#include <gtest/gtest.h>

#include "shoal/control/node/manifest.h"

namespace shoal::kubernetes {
namespace {

using json = nlohmann::json;

const json kFlJob = json::parse(R"({
  "apiVersion": "shoal.dev/v1", "kind": "FLJob",
  "metadata": {"name": "digits", "namespace": "team-a", "generation": 3, "uid": "u1",
               "resourceVersion": "42", "managedFields": [{"manager": "kubectl"}]},
  "spec": {"algorithm": {"name": "fedavg"}, "clients": {"expected": 2},
           "training": {"learningRate": 0.05}},
  "status": {"state": "Running"}})");

TEST(ResourceManifest, KeepsNameNamespaceAndSpecOnly) {
  const json m = json::parse(ManifestOf(kFlJob));
  EXPECT_EQ(m, json::parse(R"({"apiVersion": "shoal.dev/v1", "kind": "FLJob",
    "metadata": {"name": "digits", "namespace": "team-a"},
    "spec": {"algorithm": {"name": "fedavg"}, "clients": {"expected": 2},
             "training": {"learningRate": 0.05}}})"));
  auto parsed = ParseManifests(ManifestOf(kFlJob), NodeConfig{});
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ASSERT_EQ(parsed->jobs.size(), 1u);
  EXPECT_EQ(parsed->jobs[0].name, "digits");
  EXPECT_EQ(parsed->jobs[0].tenant, "team-a");
  EXPECT_EQ(parsed->jobs[0].clients, 2u);
}

TEST(ResourceManifest, AParserErrorIsTheUsersMessage) {
  json bad = kFlJob;
  bad["spec"]["clients"]["quorum"] = 5;  // > expected: a rule the schema cannot say
  auto parsed = ParseManifests(ManifestOf(bad), NodeConfig{});
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("quorum"), std::string::npos)
      << parsed.status().message();
}

const json* Condition(const json& status, const std::string& type) {
  for (const auto& c : status["conditions"]) {
    if (c["type"] == type) return &c;
  }
  return nullptr;
}

TEST(ResourceStatus, FlJobStatesAndColumns) {
  Observed o;
  o.generation = 3;
  json s = StatusFor("FLJob", o, json::object(), "2026-01-01T00:00:00Z");
  EXPECT_EQ(s["state"], "Pending");
  EXPECT_EQ(s["observedGeneration"], 3);
  EXPECT_EQ((*Condition(s, "Ready"))["status"], "False");
  EXPECT_EQ((*Condition(s, "Progressing"))["status"], "True");

  o.job = json::parse(R"({"state": "running", "version": 7, "top": "n1",
    "clients": {"expected": 2, "joined": 2},
    "versions": [{"version": 6, "accuracy": 0.5}, {"version": 7, "accuracy": null}]})");
  json running = StatusFor("FLJob", o, s, "2026-01-01T00:00:09Z");
  EXPECT_EQ(running["state"], "Running");
  EXPECT_EQ(running["version"], 7);
  EXPECT_EQ(running["accuracy"], 0.5);  // the newest version that has one
  EXPECT_EQ(running["clients"], 2);
  EXPECT_EQ(running["top"], "n1");
  EXPECT_EQ((*Condition(running, "Ready"))["status"], "True");
  EXPECT_EQ((*Condition(running, "Ready"))["lastTransitionTime"], "2026-01-01T00:00:09Z");
  // Progressing stayed True: its transition time is the first one.
  EXPECT_EQ((*Condition(running, "Progressing"))["lastTransitionTime"], "2026-01-01T00:00:00Z");
  // Nothing changed: the same status (so the operator writes nothing).
  EXPECT_EQ(StatusFor("FLJob", o, running, "2026-01-01T00:01:00Z"), running);

  (*o.job)["state"] = "done";
  json done = StatusFor("FLJob", o, running, "2026-01-01T00:02:00Z");
  EXPECT_EQ(done["state"], "Succeeded");
  EXPECT_EQ((*Condition(done, "Progressing"))["status"], "False");
  EXPECT_EQ((*Condition(done, "Failed"))["status"], "False");
}

TEST(ResourceStatus, RefusedDeployIsFailedWithTheMessage) {
  Observed o;
  o.generation = 2;
  o.deploy_error = "spec.clients.quorum: must be <= spec.clients.expected (5 > 2)";
  o.deploy_reason = "InvalidManifest";
  json s = StatusFor("FLJob", o, json::object(), "2026-01-01T00:00:00Z");
  EXPECT_EQ(s["state"], "Failed");
  EXPECT_EQ(s["message"], o.deploy_error);
  EXPECT_EQ((*Condition(s, "Failed"))["status"], "True");
  EXPECT_EQ((*Condition(s, "Failed"))["reason"], "InvalidManifest");
  EXPECT_EQ((*Condition(s, "Failed"))["message"], o.deploy_error);
  EXPECT_EQ((*Condition(s, "Ready"))["status"], "False");
}

TEST(ResourceStatus, FunctionReadyOverDesired) {
  Observed o;
  o.generation = 1;
  o.ready = 1;
  o.desired = 2;
  json s = StatusFor("Function", o, json::object(), "2026-01-01T00:00:00Z");
  EXPECT_EQ(s["ready"], 1);
  EXPECT_EQ(s["desired"], 2);
  EXPECT_FALSE(s.contains("state"));
  EXPECT_EQ((*Condition(s, "Ready"))["status"], "False");
  EXPECT_EQ((*Condition(s, "Ready"))["message"], "1/2 ready");
  o.ready = 2;
  EXPECT_EQ((*Condition(StatusFor("Function", o, s, "t"), "Ready"))["status"], "True");
}

}  // namespace
}  // namespace shoal::kubernetes
