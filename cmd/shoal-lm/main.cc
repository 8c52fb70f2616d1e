// shoal-lm: runs the shoal-gpt decoder (shoal/serving/lm) on a JSON file of requests without a
// node, stepping the continuous-batching engine by hand so that which requests share a step is
// fixed: each request joins before step `join_step` (default 0). Prints one JSON line per
// request, in input order: its token ids, text, finish reason. What the reference tests and
// bench-llm drive.
//   shoal-lm --base model.safetensors [--adapter name=file[@alpha]]... --requests r.json
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shoal/common/file_io.h"
#include "shoal/serving/lm/lm_engine.h"

using Json = nlohmann::json;
namespace lm = shoal::lm;

int main(int argc, char** argv) {
  CLI::App app("runs the shoal-gpt decoder on a file of requests");
  std::string base_path;
  std::vector<std::string> adapters;
  std::string requests_path;
  int max_sequences = 64;
  app.add_option("--base", base_path, "the base model (shoal-gpt/1 safetensors)")->required();
  app.add_option("--adapter", adapters, "name=file[@alpha]: a LoRA adapter (shoal-lora/1)");
  app.add_option("--requests", requests_path,
                 "JSON list of {prompt, max_tokens, temperature, top_p, seed, stop, adapter, "
                 "join_step}")
      ->required();
  app.add_option("--max-sequences", max_sequences, "sequences stepped together");
  CLI11_PARSE(app, argc, argv);

  auto base = lm::LoadLmWeightsFile(base_path);
  if (!base.ok()) {
    std::fprintf(stderr, "shoal-lm: %s\n", base.status().message().c_str());
    return 2;
  }
  lm::LmEngine engine(*base, {.max_sequences = max_sequences});
  for (const std::string& a : adapters) {
    const size_t eq = a.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "shoal-lm: --adapter %s: want name=file[@alpha]\n", a.c_str());
      return 2;
    }
    std::string file = a.substr(eq + 1);
    std::optional<float> alpha;
    if (const size_t at = file.rfind('@'); at != std::string::npos) {
      alpha = std::stof(file.substr(at + 1));
      file.resize(at);
    }
    auto bytes = shoal::ReadFileBytes(file);
    if (!bytes) {
      std::fprintf(stderr, "shoal-lm: cannot read %s\n", file.c_str());
      return 2;
    }
    auto ad = lm::LoadLoraAdapter(std::as_bytes(std::span(*bytes)), engine.config(), alpha);
    if (!ad.ok()) {
      std::fprintf(stderr, "shoal-lm: %s: %s\n", file.c_str(), ad.status().message().c_str());
      return 2;
    }
    auto named = std::make_shared<lm::LoraAdapter>(**ad);
    named->name = a.substr(0, eq);
    engine.PutAdapter(std::move(named));
  }
  std::ifstream in(requests_path);
  const Json requests = Json::parse(in, nullptr, false);
  if (!requests.is_array()) {
    std::fprintf(stderr, "shoal-lm: %s is not a JSON list\n", requests_path.c_str());
    return 2;
  }
  struct Out {
    std::vector<int> tokens;
    std::string text;
    std::string finish;
    bool done = false;
  };
  std::vector<Out> outs(requests.size());
  std::vector<int> join(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) join[i] = requests[i].value("join_step", 0);
  size_t submitted = 0;
  std::vector<bool> in_flight(requests.size());
  for (int step = 0;; ++step) {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (in_flight[i] || join[i] > step) continue;
      const Json& r = requests[i];
      lm::GenerationRequest g;
      g.prompt = r.value("prompt", "");
      g.max_tokens = r.value("max_tokens", 16);
      g.sampling.temperature = r.value("temperature", 0.0f);
      g.sampling.top_p = r.value("top_p", 1.0f);
      g.sampling.seed = r.value("seed", uint64_t{0});
      // A stop sequence as a string, or as a list of byte values (bytes that are not UTF-8).
      for (const Json& stop : r.value("stop", Json::array())) {
        if (stop.is_string()) {
          g.stop.push_back(stop.get<std::string>());
        } else {
          std::string bytes;
          for (const Json& b : stop) bytes.push_back(static_cast<char>(b.get<int>()));
          g.stop.push_back(bytes);
        }
      }
      g.adapter = r.value("adapter", "");
      Out* o = &outs[i];
      shoal::Status st = engine.Submit(std::move(g), [o](const lm::GenerationEvent& e) {
        o->tokens.push_back(e.token);
        o->text.append(e.text);
        if (e.done) {
          o->finish = lm::FinishReasonName(e.finish);
          o->done = true;
        }
      });
      if (!st.ok()) {
        o->finish = "error: " + st.message();
        o->done = true;
      }
      in_flight[i] = true;
      ++submitted;
    }
    if (!engine.StepOnce() && submitted == requests.size()) break;
  }
  for (const Out& o : outs) {
    Json j = {{"tokens", o.tokens}, {"text", o.text}, {"finish", o.finish}};
    std::cout << j.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  const lm::EngineStats s = engine.stats();
  std::fprintf(stderr, "shoal-lm: %llu steps, at most %d sequences in one\n",
               static_cast<unsigned long long>(s.steps), s.max_active);
  return 0;
}
