add_executable(bench-pool ${CMAKE_CURRENT_LIST_DIR}/pool.cc)
target_link_libraries(bench-pool PRIVATE shoal_pool)
