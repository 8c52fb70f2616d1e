add_executable(bench-autoscale ${CMAKE_CURRENT_LIST_DIR}/autoscale.cc)
target_link_libraries(bench-autoscale PRIVATE shoal_autoscale_scenarios)
