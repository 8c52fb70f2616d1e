# bench-fl-join: a join's and the job status's cost as one FL job's clients grow (issue 28),
# through a real shoald and the SDK's FlHttpClient.
add_executable(bench-fl-join ${CMAKE_CURRENT_LIST_DIR}/fl_join.cc)
target_link_libraries(bench-fl-join PRIVATE shoal_test_support shoal_client
  nlohmann_json::nlohmann_json)
add_dependencies(bench-fl-join shoald shoal)
