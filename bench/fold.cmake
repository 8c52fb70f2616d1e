# bench-fold: the aggregation fold's bandwidth per dtype and thread count, with numpy in place
# (bench/fold_anchor.py), OpenBLAS saxpy (dlopen, Debian libopenblas0-pthread) and memcpy measured
# in the same run.
if(TARGET shoal_fold)
  add_executable(bench-fold ${CMAKE_CURRENT_LIST_DIR}/fold.cc ${CMAKE_CURRENT_LIST_DIR}/fold_formats.cc)
  target_link_libraries(bench-fold PRIVATE shoal_fold shoal_model ${CMAKE_DL_LIBS})
  target_compile_definitions(bench-fold
    PRIVATE SHOAL_FOLD_ANCHOR_PY="${CMAKE_CURRENT_LIST_DIR}/fold_anchor.py")
endif()
