// Tokens in flight as the engine counts and reports them (EngineLoad, the autoscaler's
// language-model signal): a queued sequence counts its prompt and its decode budget
// (min(max_tokens, n_ctx - prompt)), a running one the tokens it may still decode, a finished one
// nothing. Stepped by hand (no scheduler thread) on a tiny all-zero model: every logit is 0, so
// greedy decoding picks token 0 every step and no sequence ends before its budget.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "shoal/serving/lm/lm_engine.h"

namespace shoal::lm {
namespace {

std::shared_ptr<const LmWeights> ZeroModel(int n_ctx) {
  auto w = std::make_shared<LmWeights>();
  w->config.d_model = 8;
  w->config.n_layer = 1;
  w->config.n_head = 2;
  w->config.n_ctx = n_ctx;
  w->storage.assign(static_cast<size_t>(257 + n_ctx) * 8 * 4, 0.0f);  // one zero buffer
  const float* z = w->storage.data();
  w->wte = z;
  w->wpe = z;
  w->lnf_w = z;
  w->lnf_b = z;
  LayerWeights l{};
  l.ln1_w = l.ln1_b = l.ln2_w = l.ln2_b = z;
  l.w = {z, z, z, z};
  l.b = {z, z, z, z};
  w->layers.push_back(l);
  return w;
}

GenerationRequest Req(int prompt_bytes, int max_tokens) {
  GenerationRequest r;
  r.prompt.assign(static_cast<size_t>(prompt_bytes), 'a');
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

TEST(LmEngineLoad, TokensInFlightForConcurrentRequests) {
  EngineOptions o;
  o.max_sequences = 2;  // the third request queues behind the first two
  o.threads = 1;
  LmEngine engine(ZeroModel(16), o);
  std::vector<EngineLoad> reports;
  engine.SetLoadSink([&](const EngineLoad& l) { reports.push_back(l); });
  std::map<int, int> tokens;  // request -> tokens it got
  auto sink = [&](int i) {
    return [&, i](const GenerationEvent& e) { tokens[i] += e.token >= 0; };
  };

  ASSERT_TRUE(engine.Submit(Req(5, 4), sink(0)).ok());   // 5 + 4
  ASSERT_TRUE(engine.Submit(Req(7, 6), sink(1)).ok());   // 7 + 6
  ASSERT_TRUE(engine.Submit(Req(13, 9), sink(2)).ok());  // 13 + min(9, 16 - 13) = 13 + 3
  ASSERT_EQ(reports.size(), 3u);  // one per Submit: 9, 22, 38 tokens, all queued
  EXPECT_EQ(reports[0], (EngineLoad{9, 0, 1}));
  EXPECT_EQ(reports[1], (EngineLoad{22, 0, 2}));
  EXPECT_EQ(reports[2], (EngineLoad{38, 0, 3}));

  // Each step: the first two prefilled and one token each, the third still queued.
  const std::vector<EngineLoad> expected = {
      {3 + 5 + 16, 2, 1},  // step 1: prompts done, 3 and 5 left to decode
      {2 + 4 + 16, 2, 1}, {1 + 3 + 16, 2, 1},
      {0 + 2 + 16, 1, 1},  // request 0 finished (4 tokens): the third joins at the next step
      {1 + 2, 2, 0},       // its prompt prefilled, 2 of its 3 left
      {0 + 1, 1, 0},       // request 1 finished (6 tokens)
      {0, 0, 0},           // request 2 finished (3 tokens: the context's bound)
  };
  for (size_t step = 0; step < expected.size(); ++step) {
    ASSERT_TRUE(engine.StepOnce());
    EXPECT_EQ(reports.back(), expected[step]) << "after step " << step + 1;
    EXPECT_EQ(engine.stats().load, expected[step]) << "after step " << step + 1;
  }
  EXPECT_FALSE(engine.StepOnce());
  EXPECT_EQ(reports.size(), 3 + expected.size());
  EXPECT_EQ(tokens[0], 4);
  EXPECT_EQ(tokens[1], 6);
  EXPECT_EQ(tokens[2], 3);
}

TEST(LmEngineLoad, AStopSequenceGivesBackTheBudgetItDidNotUse) {
  EngineOptions o;
  o.threads = 1;
  LmEngine engine(ZeroModel(64), o);
  GenerationRequest r = Req(4, 20);
  r.stop = {std::string(2, '\0')};  // the zero model's greedy text: "\0\0..." stops at token 2
  ASSERT_TRUE(engine.Submit(std::move(r), [](const GenerationEvent&) {}).ok());
  EXPECT_EQ(engine.stats().load, (EngineLoad{24, 0, 1}));
  ASSERT_TRUE(engine.StepOnce());
  EXPECT_EQ(engine.stats().load, (EngineLoad{19, 1, 0}));
  ASSERT_TRUE(engine.StepOnce());
  EXPECT_EQ(engine.stats().load, (EngineLoad{0, 0, 0}));
}

}  // namespace
}  // namespace shoal::lm
