# bench-detect (issue 18): the behaviour probes' cost on bench-invoke's load, false alarms under
# it, and detection latency per attack kind (needs libshoal-attack.so from tests/integration).
add_executable(bench-detect ${CMAKE_CURRENT_LIST_DIR}/detect.cc)
target_include_directories(bench-detect PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(bench-detect PRIVATE shoal_test_support shoal_ebpf shoal_detect_monitor)
target_include_directories(bench-detect PRIVATE ${CMAKE_SOURCE_DIR}/tests/support)
if(TARGET shoal-attack)
  add_dependencies(bench-detect shoal-attack)
endif()
