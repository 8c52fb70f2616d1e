# bench-dp: accuracy against ε on Fashion-MNIST (16 clients, FedAvg) for three noise levels,
# Shoal's spec.privacy.dp beside Flower 1.42's DifferentialPrivacyServerSideFixedClipping on the
# same setting (bench/fl_flower_train.py drives both; bench/flower_app is the Flower app).
add_executable(bench-dp ${CMAKE_CURRENT_LIST_DIR}/dp.cc)
target_link_libraries(bench-dp PRIVATE shoal_test_support shoal_fl_privacy
  nlohmann_json::nlohmann_json)
target_compile_definitions(bench-dp PRIVATE SHOAL_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
foreach(dep shoald shoal-fn shoal)
  if(TARGET ${dep})
    add_dependencies(bench-dp ${dep})
  endif()
endforeach()
