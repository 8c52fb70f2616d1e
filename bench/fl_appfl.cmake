# bench-fl-appfl: Shoal's FedCompass against APPFL 1.12's (fidelity replay and time to accuracy).
add_executable(bench-fl-appfl ${CMAKE_CURRENT_LIST_DIR}/fl_appfl.cc)
target_link_libraries(bench-fl-appfl PRIVATE shoal_test_support shoal_client shoal_fl_algorithms
  shoal_model)
target_compile_definitions(bench-fl-appfl PRIVATE SHOAL_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
