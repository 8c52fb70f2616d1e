// shoal-lm: runs the shoal-gpt decoder (shoal/serving/lm) on a JSON file of requests without a
// node, stepping the continuous-batching engine by hand so that which requests share a step is
// fixed: each request joins before step `join_step` (default 0). Prints one JSON line per
// request, in input order: its token ids, text, finish reason. What the reference tests and
// bench-llm drive.
// --put STEP:name=file[@alpha] puts an adapter (a new version of that name) before step STEP,
// as an FL job's commit does in the inference function.
//   shoal-lm --base model.safetensors [--adapter name=file[@alpha]]... [--put ...]
//            --requests r.json
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
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
  bool int8 = false;
  app.add_flag("--int8", int8, "int8 linear weights (per-row symmetric)");
  bool compare_int8 = false;
  app.add_flag("--compare-int8", compare_int8,
               "print, per request, the prompt's next-token logits under int8 against fp32: "
               "{max_abs_diff, max_abs_logit, argmax_equal}");
  std::vector<std::string> puts;
  app.add_option("--put", puts, "STEP:name=file[@alpha]: a new adapter version before STEP");
  CLI11_PARSE(app, argc, argv);

  auto base = lm::LoadLmWeightsFile(base_path);
  if (!base.ok()) {
    std::fprintf(stderr, "shoal-lm: %s\n", base.status().message().c_str());
    return 2;
  }
  std::ifstream in(requests_path);
  const Json requests = Json::parse(in, nullptr, false);
  if (!requests.is_array()) {
    std::fprintf(stderr, "shoal-lm: %s is not a JSON list\n", requests_path.c_str());
    return 2;
  }
  if (compare_int8) {
    const lm::LmConfig& c = (*base)->config;
    lm::LmForward fp32(*base);
    lm::LmForward int8_forward(lm::QuantizeInt8(**base));
    for (const Json& r : requests) {
      const std::string prompt = r.value("prompt", "");
      std::vector<int> tokens(prompt.begin(), prompt.end());
      for (int& t : tokens) t = static_cast<unsigned char>(t);
      if (tokens.empty()) tokens.push_back(c.eos);
      std::vector<float> a(static_cast<size_t>(c.vocab_size)), b(a.size());
      lm::KvCache ca(c), cb(c);
      const lm::StepInput ia[] = {{&ca, tokens, nullptr, a.data()}};
      const lm::StepInput ib[] = {{&cb, tokens, nullptr, b.data()}};
      fp32.Step(ia);
      int8_forward.Step(ib);
      float diff = 0, top = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, std::fabs(a[i] - b[i]));
        top = std::max(top, std::fabs(a[i]));
      }
      const bool same = std::max_element(a.begin(), a.end()) - a.begin() ==
                        std::max_element(b.begin(), b.end()) - b.begin();
      std::cout << Json({{"max_abs_diff", diff}, {"max_abs_logit", top}, {"argmax_equal", same}})
                << "\n";
    }
    return 0;
  }
  lm::LmEngine engine(*base, {.max_sequences = max_sequences, .int8 = int8});
  std::map<std::string, uint64_t> versions;
  // name=file[@alpha] into the engine (a new version of that name).
  auto put = [&](const std::string& a) -> bool {
    const size_t eq = a.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "shoal-lm: --adapter %s: want name=file[@alpha]\n", a.c_str());
      return false;
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
      return false;
    }
    auto ad = lm::LoadLoraAdapter(std::as_bytes(std::span(*bytes)), engine.config(), alpha);
    if (!ad.ok()) {
      std::fprintf(stderr, "shoal-lm: %s: %s\n", file.c_str(), ad.status().message().c_str());
      return false;
    }
    auto named = std::make_shared<lm::LoraAdapter>(**ad);
    named->name = a.substr(0, eq);
    named->version = ++versions[named->name];
    engine.PutAdapter(std::move(named));
    return true;
  };
  for (const std::string& a : adapters) {
    if (!put(a)) return 2;
  }
  std::multimap<int, std::string> puts_at;
  for (const std::string& p : puts) {
    const size_t colon = p.find(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "shoal-lm: --put %s: want STEP:name=file[@alpha]\n", p.c_str());
      return 2;
    }
    puts_at.emplace(std::stoi(p.substr(0, colon)), p.substr(colon + 1));
  }
  struct Out {
    std::vector<int> tokens;
    std::string text;
    std::string finish;
    bool done = false;
    uint64_t adapter_version = 0;
  };
  std::vector<Out> outs(requests.size());
  std::vector<int> join(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) join[i] = requests[i].value("join_step", 0);
  size_t submitted = 0;
  std::vector<bool> in_flight(requests.size());
  for (int step = 0;; ++step) {
    for (auto [it, last] = puts_at.equal_range(step); it != last; ++it) {
      if (!put(it->second)) return 2;
    }
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
        o->adapter_version = e.adapter_version;
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
    Json j = {{"tokens", o.tokens},
              {"text", o.text},
              {"finish", o.finish},
              {"adapter_version", o.adapter_version}};
    std::cout << j.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  const lm::EngineStats s = engine.stats();
  std::fprintf(stderr, "shoal-lm: %llu steps, at most %d sequences in one\n",
               static_cast<unsigned long long>(s.steps), s.max_active);
  return 0;
}
