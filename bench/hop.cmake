add_executable(bench-hop ${CMAKE_CURRENT_LIST_DIR}/hop.cc)
target_link_libraries(bench-hop PRIVATE shoal_dataplane)
