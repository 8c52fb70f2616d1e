if(TARGET shoal_inference)
  add_executable(bench-infer-http ${CMAKE_CURRENT_LIST_DIR}/infer_http.cc)
  target_link_libraries(bench-infer-http PRIVATE shoal_test_support shoal_inference shoal_model
    shoal_client_train)
endif()
