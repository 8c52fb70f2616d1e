# bench-infer: an executor's batch-1 latency and batch throughput (MLP, ResNet-18) against
# onnxruntime, torch eager and torch.compile (plus torch's CUDA graph on cuda) running the same
# graph, written with Shoal's SaveOnnx, measured in the same run by bench/infer_anchor.py. Needs
# only the executors and the graph library (GPU-only build too: there it has no ONNX writer and
# prints its own figures without anchors).
if(TARGET shoal_inference)
  add_executable(bench-infer ${CMAKE_CURRENT_LIST_DIR}/infer.cc)
  target_link_libraries(bench-infer PRIVATE shoal_inference)
  target_compile_definitions(bench-infer
    PRIVATE SHOAL_INFER_ANCHOR_PY="${CMAKE_CURRENT_LIST_DIR}/infer_anchor.py")
  if(TARGET shoal_inference_onnx)
    target_link_libraries(bench-infer PRIVATE shoal_inference_onnx)
    target_compile_definitions(bench-infer PRIVATE SHOAL_BENCH_INFER_ONNX=1)
  endif()
endif()
