add_executable(bench-autoscale ${CMAKE_CURRENT_LIST_DIR}/autoscale.cc)
target_link_libraries(bench-autoscale PRIVATE shoal_autoscale_scenarios)
add_executable(bench-autoscale-live ${CMAKE_CURRENT_LIST_DIR}/autoscale_live.cc)
target_link_libraries(bench-autoscale-live PRIVATE shoal_simulator shoal_test_support
  nlohmann_json::nlohmann_json Threads::Threads)
add_executable(bench-learned-features ${CMAKE_CURRENT_LIST_DIR}/learned_features.cc)
target_link_libraries(bench-learned-features PRIVATE shoal_autoscale_scenarios)
