# bench-fl-flower: FedAvg's server side beside Flower 1.42's SuperLink (bench/fl_flower_load.py
# drives both; bench/flower_app is the Flower app it submits), and with --train the same
# Fashion-MNIST training on both (bench/fl_flower_train.py).
add_executable(bench-fl-flower ${CMAKE_CURRENT_LIST_DIR}/fl_flower.cc)
target_link_libraries(bench-fl-flower PRIVATE shoal_test_support nlohmann_json::nlohmann_json)
target_compile_definitions(bench-fl-flower PRIVATE SHOAL_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
foreach(dep shoald shoal-fn shoal)
  if(TARGET ${dep})
    add_dependencies(bench-fl-flower ${dep})
  endif()
endforeach()
