# bench-llm-autoscale: the lm function autoscaled on a BurstGPT-shaped stream replayed live (KPA on
# requests in flight as the anchor, KPA and the learned policy on tokens in flight).
add_executable(bench-llm-autoscale ${CMAKE_CURRENT_LIST_DIR}/llm_autoscale.cc)
target_link_libraries(bench-llm-autoscale PRIVATE shoal_test_support nlohmann_json::nlohmann_json
  Threads::Threads)
target_compile_definitions(bench-llm-autoscale PRIVATE SHOAL_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
