// shoal: the command line for a Shoal node. Every command is one or a few HTTP requests to
// shoald's control API (/v1/..., its own listener) or its gateway (/fn/...), with the bearer
// token of the config file or $SHOAL_TOKEN (cli_config.h).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "shoal/cli/cli_config.h"
#include "shoal/cli/command_support.h"
#include "shoal/cli/commands.h"
#include "shoal/cli/manifest_commands.h"
#include "shoal/cli/sim.h"
#include "shoal/common/command_line.h"

int main(int argc, char** argv) {
  using namespace shoal::cli;
  CLI::App app{"shoal: deploy, inspect and invoke functions and FL jobs on a Shoal node"};
  app.require_subcommand(1);
  app.fallthrough();
  std::string server, gateway;
  app.add_option("--server", server,
                 "the control API's URL (default: $SHOAL_SERVER, the config file's server, or "
                 "http://127.0.0.1:8081)");
  app.add_option("--gateway", gateway,
                 "the gateway's URL, for invoke (default: $SHOAL_GATEWAY, the config file's "
                 "gateway, or http://127.0.0.1:8080)");

  std::vector<std::string> files;
  auto* deploy = app.add_subcommand("deploy", "deploy (or update) functions from manifests");
  deploy
      ->add_option("-f,--filename", files,
                   "manifest file (YAML or JSON; Function and FLJob documents), - for stdin, or "
                   "a directory of them (repeatable; each file is applied all or nothing)")
      ->required()
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);

  std::string name, output;
  std::string get_name;
  auto* get = app.add_subcommand(
      "get", "list functions, or show one; `get nodes [NAME]` lists the cluster's nodes");
  get->add_option("name", name, "function name, or `nodes`");
  get->add_option("node", get_name, "with `nodes`: one node's name");
  get->add_option("-o,--output", output, "wide, json or yaml")
      ->check(CLI::IsMember({"wide", "json", "yaml"}));

  auto* describe = app.add_subcommand("describe", "show one function and its instances");
  describe->add_option("name", name, "function name")->required();

  InvokeOptions invoke_opts;
  auto* invoke = app.add_subcommand("invoke", "call a function (response body to stdout)");
  invoke->add_option("name", invoke_opts.name, "function name")->required();
  auto* data = invoke->add_option("-d,--data", invoke_opts.data, "request body, or @FILE");
  invoke->add_option("-X,--request", invoke_opts.method,
                     "HTTP method (default POST with -d, else GET)");
  invoke->add_option("--path", invoke_opts.path, "sub-path below /fn/NAME/ (may carry ?query)");
  invoke
      ->add_option("-H,--header", invoke_opts.headers, "request header 'Name: value' (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);

  bool follow = false;
  auto* logs = app.add_subcommand("logs", "print a function's instance logs");
  logs->add_option("name", name, "function name")->required();
  logs->add_flag("-f,--follow", follow, "keep printing new lines");

  auto* del = app.add_subcommand("delete", "delete a function (its instances stop)");
  del->add_option("name", name, "function name")->required();

  WatchOptions top_opts{.watch = false};
  std::string top_output;
  auto* top = app.add_subcommand("top", "per-function load: instances, in-flight, req/s, latency");
  top->add_flag("-w,--watch", top_opts.watch,
                "refresh until Ctrl-C (in place on a terminal, one table after another elsewhere)");
  top->add_option("--interval", top_opts.interval_s, "seconds between refreshes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  top->add_option("-o,--output", top_output, "json: the /v1/top answer, one object a line")
      ->check(CLI::IsMember({"json"}));

  std::string job, model_out;
  std::optional<uint64_t> model_version;
  auto* fl = app.add_subcommand("fl", "federated-learning jobs (kind FLJob)");
  fl->require_subcommand(1);
  auto* fl_status =
      fl->add_subcommand("status", "a job's version, clients and accuracy per version");
  fl_status->add_option("job", job, "job name")->required();
  WatchOptions watch_opts;
  std::string watch_output;
  auto* fl_watch = fl->add_subcommand(
      "watch",
      "a progress bar toward the job's target accuracy or rounds until it is done (plain lines "
      "when stdout is not a terminal)");
  fl_watch->add_option("job", job, "job name")->required();
  fl_watch->add_option("--interval", watch_opts.interval_s, "seconds between polls")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  fl_watch
      ->add_option("-o,--output", watch_output,
                   "json: one JSON object per new version or evaluation, one a line")
      ->check(CLI::IsMember({"json"}));
  std::string model_format = "safetensors";
  auto* fl_model =
      fl->add_subcommand("model", "download a job's global model (safetensors or ONNX)");
  fl_model->add_option("job", job, "job name")->required();
  fl_model->add_option("--format", model_format, "safetensors (default) or onnx")
      ->check(CLI::IsMember({"safetensors", "onnx"}));
  fl_model->add_option("-o,--output", model_out, "file to write")->required();
  fl_model->add_option("--version", model_version, "model version (default: the latest)");
  auto* fl_list = fl->add_subcommand("list", "list FL jobs");
  auto* fl_delete = fl->add_subcommand("delete", "delete an FL job");
  fl_delete->add_option("job", job, "job name")->required();
  std::string supernode_arg;
  auto* fl_sn = fl->add_subcommand(
      "supernode", "a Flower job's SuperNode allow-list (spec.flower.supernodeAuth)");
  fl_sn->require_subcommand(1);
  auto* fl_sn_register = fl_sn->add_subcommand(
      "register", "allow a SuperNode's public key (as flwr supernode register)");
  fl_sn_register->add_option("job", job, "job name")->required();
  fl_sn_register
      ->add_option("public-key", supernode_arg,
                   "the node's public key file (ssh-keygen -t ecdsa -b 384's .pub, or PEM)")
      ->required();
  auto* fl_sn_list = fl_sn->add_subcommand("list", "the job's SuperNodes: id, status, key");
  fl_sn_list->add_option("job", job, "job name")->required();
  auto* fl_sn_unregister = fl_sn->add_subcommand(
      "unregister", "remove a SuperNode: its next call is refused and flower-supernode stops");
  fl_sn_unregister->add_option("job", job, "job name")->required();
  fl_sn_unregister->add_option("node-id", supernode_arg, "the node id `list` shows")->required();

  TokenOptions token_opts;
  std::string token_id;
  auto* token = app.add_subcommand("token", "bearer tokens of the control API (admin only)");
  token->require_subcommand(1);
  auto* token_create = token->add_subcommand(
      "create", "create a token; prints it once on stdout (it is stored hashed)");
  token_create
      ->add_option("--role", token_opts.role, "admin, deployer, viewer, invoker or fl-client")
      ->required()
      ->check(CLI::IsMember({"admin", "deployer", "viewer", "invoker", "fl-client"}));
  token_create->add_option("-n,--namespace", token_opts.ns, "the namespace (deployer, invoker)");
  token_create->add_option("--job", token_opts.job, "the FL job (fl-client)");
  token_create->add_option("--name", token_opts.name, "a name to recognise it by");
  auto* token_list = token->add_subcommand("list", "list tokens (never their secrets)");
  auto* token_revoke = token->add_subcommand("revoke", "revoke a token: it stops working at once");
  token_revoke->add_option("id", token_id, "the token's id (from token list)")->required();

  SimOptions sim_opts;
  auto* sim = app.add_subcommand("sim", "run the autoscaling simulator locally (no shoald needed)");
  sim->add_option("--policy", sim_opts.policy, "kpa, rl-q, shoal or learned")
      ->capture_default_str();
  sim->add_option("--workload", sim_opts.workload, "bursty, diurnal, timer, fl or zipf")
      ->capture_default_str();
  sim->add_option("--trace", sim_opts.trace,
                  "replay a trace: per-invocation CSV (timestamp,function,duration) or Azure "
                  "Functions 2019 per-minute counts");
  sim->add_option("--seed", sim_opts.seed)->capture_default_str();
  sim->add_option("--duration-scale", sim_opts.duration_scale, "stretch or shorten the workload")
      ->capture_default_str();

  SimTrainOptions train_opts;
  auto* train = sim->add_subcommand("train", "train the learned policy in the simulator");
  train->add_option("--out", train_opts.out, "the policy file to write")->capture_default_str();
  train->add_option("--seed", train_opts.seed, "first training seed")->capture_default_str();
  train->add_option("--seeds", train_opts.seeds, "runs per family")->capture_default_str();
  train
      ->add_option("--sizing-seeds", train_opts.sizing_seeds,
                   "runs per family for the busy-time sizing table, each once per sizing "
                   "action (0: no sizing table)")
      ->capture_default_str();
  train->add_option("--families", train_opts.families,
                    "comma-separated: poisson, diurnal, zipf, timer, bursty, fl, azure "
                    "(default: all but fl and zipf, held out)");
  train->add_option("--duration-scale", train_opts.duration_scale)->capture_default_str();
  train->add_flag("!--no-eval", train_opts.evaluate, "skip the generalisation table");

  std::vector<std::string> validate_files;
  std::string validate_against = "both";
  auto* validate = app.add_subcommand(
      "validate",
      "check manifests locally (no shoald): the manifest JSON Schema and shoald's parser; each "
      "error names the field and what is accepted. Example: shoal validate -f fljob.yaml");
  validate->add_option("-f,--filename", validate_files, "manifest file (YAML or JSON), - for stdin")
      ->required()
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  validate
      ->add_option("--against", validate_against,
                   "both (default), schema (api/manifest.schema.json) or parser (shoald's)")
      ->check(CLI::IsMember({"both", "schema", "parser"}));
  std::string explain_path;
  auto* explain = app.add_subcommand(
      "explain",
      "describe a manifest field: type, description, accepted values, default, its fields. "
      "Example: shoal explain fljob.spec.aggregation");
  explain->add_option("field", explain_path, "KIND[.field...]: function... or fljob...")
      ->required();

  shoal::SetExamples(&app,
                     {"shoal deploy -f deploy/examples/echo.yaml", "shoal invoke echo -d 'hello'",
                      "shoal get -o wide", "shoal fl watch fmnist",
                      "shoal --server https://ctl.example:8081 get   # another node"});
  shoal::SetExamples(deploy, {"shoal deploy -f deploy/examples/echo.yaml",
                              "shoal deploy -f deploy/examples/   # every manifest in a folder",
                              "cat fljob.yaml | shoal deploy -f -"});
  shoal::SetExamples(get, {"shoal get", "shoal get echo -o yaml", "shoal get nodes"});
  shoal::SetExamples(describe, {"shoal describe echo"});
  shoal::SetExamples(invoke, {"shoal invoke echo -d 'hello, shoal'",
                              "shoal invoke resize -d @photo.jpg -H 'Content-Type: image/jpeg'",
                              "shoal invoke api -X GET --path 'items?limit=5'"});
  shoal::SetExamples(logs, {"shoal logs echo", "shoal logs echo -f"});
  shoal::SetExamples(del, {"shoal delete echo"});
  shoal::SetExamples(top, {"shoal top", "shoal top -w --interval 2", "shoal top -o json"});
  shoal::SetExamples(fl, {"shoal fl list", "shoal fl watch fmnist",
                          "shoal fl model fmnist --format onnx -o fmnist.onnx"});
  shoal::SetExamples(fl_status, {"shoal fl status fmnist"});
  shoal::SetExamples(fl_watch, {"shoal fl watch fmnist", "shoal fl watch fmnist -o json"});
  shoal::SetExamples(fl_model, {"shoal fl model fmnist -o fmnist.safetensors",
                                "shoal fl model fmnist --format onnx --version 12 -o v12.onnx"});
  shoal::SetExamples(fl_list, {"shoal fl list"});
  shoal::SetExamples(fl_delete, {"shoal fl delete fmnist"});
  shoal::SetExamples(fl_sn_register, {"shoal fl supernode register fmnist keys/node-1.pub"});
  shoal::SetExamples(fl_sn_list, {"shoal fl supernode list fmnist"});
  shoal::SetExamples(fl_sn_unregister, {"shoal fl supernode unregister fmnist 4213790152"});
  shoal::SetExamples(token, {"shoal token create --role fl-client --job fmnist", "shoal token list",
                             "shoal token revoke 3"});
  shoal::SetExamples(token_create, {"FL_TOKEN=$(shoal token create --role fl-client --job fmnist)",
                                    "shoal token create --role deployer -n team-a --name ci"});
  shoal::SetExamples(token_list, {"shoal token list"});
  shoal::SetExamples(token_revoke, {"shoal token revoke 3"});
  shoal::SetExamples(sim, {"shoal sim --policy shoal --workload bursty",
                           "shoal sim --policy learned --trace invocations.csv"});
  shoal::SetExamples(train, {"shoal sim train --out policy.json --seeds 4"});
  shoal::SetExamples(validate, {"shoal validate -f fljob.yaml",
                                "shoal validate -f deploy/examples/echo.yaml --against schema"});
  shoal::SetExamples(explain, {"shoal explain fljob.spec.aggregation", "shoal explain function"});
  if (auto rc = shoal::ParseCommandLine(app, argc, argv)) return *rc;
  if (train->parsed()) return SimTrain(train_opts);
  if (validate->parsed()) {
    return Validate(validate_files, validate_against == "schema"   ? ValidateAgainst::kSchema
                                    : validate_against == "parser" ? ValidateAgainst::kParser
                                                                   : ValidateAgainst::kBoth);
  }
  if (explain->parsed()) return Explain(explain_path);
  if (sim->parsed()) return Simulate(sim_opts);

  auto cfg = LoadCliConfig();
  if (!cfg.ok()) {
    std::fprintf(stderr, "shoal: %s\n", cfg.status().message().c_str());
    return 2;
  }
  if (!server.empty()) cfg->server = server;
  if (!gateway.empty()) cfg->gateway = gateway;
  HttpClient client(cfg->server, cfg->token, cfg->ca);
  HttpClient gateway_client(cfg->gateway, cfg->token);
  int rc = 0;
  if (deploy->parsed()) {
    rc = Deploy(client, files);
  } else if (get->parsed()) {
    if (name == "nodes" || name == "node" || name == "no") {
      rc = GetNodes(client, get_name, output);
    } else if (name == "functions" || name == "function" || name == "fn") {
      rc = Get(client, get_name, output);
    } else if (!get_name.empty()) {
      std::fprintf(stderr, "shoal: get: '%s %s': give one function name, or `nodes [NAME]`\n",
                   name.c_str(), get_name.c_str());
      rc = 2;
    } else {
      rc = Get(client, name, output);
    }
  } else if (describe->parsed()) {
    rc = Describe(client, name);
  } else if (invoke->parsed()) {
    invoke_opts.has_data = data->count() > 0;
    rc = Invoke(gateway_client, invoke_opts);
  } else if (logs->parsed()) {
    rc = Logs(client, name, follow);
  } else if (del->parsed()) {
    rc = DeleteAndReport(client, "/v1/functions/" + name, "function/" + name + " deleted");
  } else if (top->parsed()) {
    top_opts.json = top_output == "json";
    rc = Top(client, top_opts);
  } else if (fl_status->parsed()) {
    rc = FlStatus(client, job);
  } else if (fl_watch->parsed()) {
    watch_opts.json = watch_output == "json";
    rc = FlWatch(client, job, watch_opts);
  } else if (fl_model->parsed()) {
    rc = FlModel(client, job, model_out, model_version, model_format);
  } else if (fl_list->parsed()) {
    rc = FlList(client);
  } else if (fl_delete->parsed()) {
    rc = DeleteAndReport(client, "/v1/jobs/" + job, "fljob/" + job + " deleted");
  } else if (fl_sn_register->parsed()) {
    rc = FlSupernodeRegister(client, job, supernode_arg);
  } else if (fl_sn_list->parsed()) {
    rc = FlSupernodeList(client, job);
  } else if (fl_sn_unregister->parsed()) {
    rc = FlSupernodeUnregister(client, job, supernode_arg);
  } else if (token_create->parsed()) {
    rc = TokenCreate(client, token_opts);
  } else if (token_list->parsed()) {
    rc = TokenList(client);
  } else if (token_revoke->parsed()) {
    rc = DeleteAndReport(client, "/v1/tokens/" + token_id, "token " + token_id + " revoked");
  }
  return rc;
}
