# bench-train: the client's local-training throughput against the same MLP in numpy.
if(TARGET shoal_client_train)
  add_executable(bench-train ${CMAKE_CURRENT_LIST_DIR}/train.cc)
  target_link_libraries(bench-train PRIVATE shoal_client_train)
  target_compile_definitions(bench-train PRIVATE
    SHOAL_TRAIN_ANCHOR="${CMAKE_CURRENT_LIST_DIR}/train_anchor.py")
endif()
