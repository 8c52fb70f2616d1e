# GPU benchmarks, built with the CUDA parts (cmake/ShoalCuda.cmake). bench-gpu-aggregate: the
# fold on the device vs torch/Triton/cuBLAS anchors (bench/gpu_aggregate_anchor.py) and the
# device's own copy bandwidths, measured in the same run.
if(SHOAL_WITH_CUDA AND TARGET shoal_gpu_fold)
  add_executable(bench-gpu-aggregate ${CMAKE_CURRENT_LIST_DIR}/gpu_aggregate.cc)
  target_link_libraries(bench-gpu-aggregate PRIVATE shoal_gpu_fold)
  target_compile_definitions(bench-gpu-aggregate PRIVATE
    SHOAL_GPU_AGGREGATE_ANCHOR_PY="${CMAKE_CURRENT_LIST_DIR}/gpu_aggregate_anchor.py")
endif()
