# bench-robust: the robust aggregators (median, trimmed mean, multi-Krum, clipped mean, Flag) on
# K ResNet-18-sized updates against the plain fold (FoldPool) and numpy (bench/robust_anchor.py)
# in the same run.
if(TARGET shoal_fl_robust)
  add_executable(bench-robust ${CMAKE_CURRENT_LIST_DIR}/robust.cc)
  target_link_libraries(bench-robust PRIVATE shoal_fl_robust shoal_fold)
  target_compile_definitions(bench-robust
    PRIVATE SHOAL_ROBUST_ANCHOR_PY="${CMAKE_CURRENT_LIST_DIR}/robust_anchor.py")
endif()
