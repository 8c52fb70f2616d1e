# bench-serve: OIP v2 serving, Shoal against KServe 0.21's Python model server
# (bench/serve_kserve.py, run under the project's Python) on the same ONNX file.
add_executable(bench-serve ${CMAKE_CURRENT_LIST_DIR}/serve.cc)
target_link_libraries(bench-serve PRIVATE shoal_test_support nlohmann_json::nlohmann_json)
target_compile_definitions(bench-serve PRIVATE SHOAL_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
