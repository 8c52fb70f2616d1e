# bench-quant-accuracy: Fashion-MNIST FedAvg with int8 and int4 updates against f32 (points lost),
# through a real shoald and shoal-client.
add_executable(bench-quant-accuracy ${CMAKE_CURRENT_LIST_DIR}/quant_accuracy.cc)
target_link_libraries(bench-quant-accuracy PRIVATE shoal_test_support)
if(TARGET shoal-client)
  add_dependencies(bench-quant-accuracy shoal-client)
endif()
