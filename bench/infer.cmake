# bench-infer: an executor's batch-1 latency and large-batch throughput (MLP, ResNet-18) with
# torch (eager, CUDA graph, torch.compile) and onnxruntime measured in the same run by
# bench/infer_anchor.py. Needs only the executors and the graph library (GPU-only build too).
if(TARGET shoal_inference)
  add_executable(bench-infer ${CMAKE_CURRENT_LIST_DIR}/infer.cc)
  target_link_libraries(bench-infer PRIVATE shoal_inference)
  target_compile_definitions(bench-infer
    PRIVATE SHOAL_INFER_ANCHOR_PY="${CMAKE_CURRENT_LIST_DIR}/infer_anchor.py")
endif()
