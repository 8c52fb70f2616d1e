add_executable(bench-round ${CMAKE_CURRENT_LIST_DIR}/round.cc)
target_link_libraries(bench-round PRIVATE shoal_test_support shoal_model shoal_proto
  nlohmann_json::nlohmann_json Threads::Threads)
