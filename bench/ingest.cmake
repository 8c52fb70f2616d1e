add_executable(bench-ingest ${CMAKE_CURRENT_LIST_DIR}/ingest.cc)
target_link_libraries(bench-ingest PRIVATE shoal_test_support shoal_model
  nlohmann_json::nlohmann_json)
