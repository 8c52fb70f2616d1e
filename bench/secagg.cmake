# bench-secagg: secure aggregation (spec.privacy.secureAggregation) in a real shoald beside its
# plain FedAvg round and beside Flower 1.42's SecAgg+ (bench/secagg_flower.py) on the same
# clients and model size; Shoal's clients are bench/secagg_load.py (the Python SDK).
add_executable(bench-secagg ${CMAKE_CURRENT_LIST_DIR}/secagg.cc)
target_link_libraries(bench-secagg PRIVATE shoal_test_support nlohmann_json::nlohmann_json)
target_compile_definitions(bench-secagg PRIVATE SHOAL_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
foreach(dep shoald shoal-fn shoal)
  if(TARGET ${dep})
    add_dependencies(bench-secagg ${dep})
  endif()
endforeach()
