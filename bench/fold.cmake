# bench-fold: the aggregation fold's bandwidth per dtype and thread count, with numpy's
# `acc += w * x.astype(np.float32)` (bench/fold_anchor.py) and memcpy measured in the same run.
if(TARGET shoal_fold)
  add_executable(bench-fold ${CMAKE_CURRENT_LIST_DIR}/fold.cc)
  target_link_libraries(bench-fold PRIVATE shoal_fold)
  target_compile_definitions(bench-fold
    PRIVATE SHOAL_FOLD_ANCHOR_PY="${CMAKE_CURRENT_LIST_DIR}/fold_anchor.py")
endif()
