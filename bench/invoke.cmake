add_executable(bench-invoke ${CMAKE_CURRENT_LIST_DIR}/invoke.cc)
target_link_libraries(bench-invoke PRIVATE shoal_test_support)
add_executable(bench-coldstart ${CMAKE_CURRENT_LIST_DIR}/coldstart.cc)
target_link_libraries(bench-coldstart PRIVATE shoal_test_support)
