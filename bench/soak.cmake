# bench-soak (issue 18): run by hand, not in CI: bench-soak [--short | --seconds S].
add_executable(bench-soak ${CMAKE_CURRENT_LIST_DIR}/soak.cc)
target_include_directories(bench-soak PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(bench-soak PRIVATE shoal_test_support nlohmann_json::nlohmann_json)
