add_executable(bench-aggregate ${CMAKE_CURRENT_LIST_DIR}/aggregate.cc)
target_link_libraries(bench-aggregate PRIVATE shoal_fold Threads::Threads)
