add_executable(bench-commit-stall ${CMAKE_CURRENT_LIST_DIR}/commit_stall.cc)
target_link_libraries(bench-commit-stall PRIVATE shoal_test_support shoal_model shoal_proto
  nlohmann_json::nlohmann_json Threads::Threads)
