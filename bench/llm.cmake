# bench-llm: the lm inference function (OpenAI-compatible SSE streams) against the same weights in
# transformers' GPT2LMHeadModel.generate behind a minimal threaded HTTP server (bench/llm_anchor.py)
# on the same threads: decode tokens/s, time to first token and prefill tokens/s at 1, 8 and 32
# concurrent streams.
add_executable(bench-llm ${CMAKE_CURRENT_LIST_DIR}/llm.cc)
target_link_libraries(bench-llm PRIVATE shoal_test_support nlohmann_json::nlohmann_json
  Threads::Threads)
target_compile_definitions(bench-llm PRIVATE SHOAL_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
