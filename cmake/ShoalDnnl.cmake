# oneDNN for the CPU executor (shoal/serving/cpu) and the lm's linears (shoal/serving/lm): 3.2
# from the project venv's PyPI wheels (requirements/test.lock: onednn-devel-cpu-gomp, headers and
# CMake config; onednn-cpu-gomp, libdnnl.so.3; CPU only, GNU OpenMP), never Debian's 2.6, whose
# f32 kernels ran this machine's convolutions and matmuls at ~0.4x onnxruntime's. SHOAL_DNNL_ROOT
# names another prefix (include/, lib/libdnnl.so.3, lib/cmake/dnnl). Binaries and the handler
# modules find libdnnl.so.3 through their RUNPATH (the prefix's lib/) or, in the OCI image,
# /opt/shoal/lib (scripts/image copies it there). Without it the CPU executor and the lm are off.
get_filename_component(_shoal_venv "${SHOAL_PYTHON}" DIRECTORY)
get_filename_component(_shoal_venv "${_shoal_venv}" DIRECTORY)
set(SHOAL_DNNL_ROOT "${_shoal_venv}" CACHE PATH
    "Prefix holding oneDNN 3 (include/, lib/cmake/dnnl): the project venv's oneDNN wheels")
find_package(dnnl 3.2 CONFIG QUIET PATHS "${SHOAL_DNNL_ROOT}/lib/cmake/dnnl" NO_DEFAULT_PATH)
find_package(OpenMP QUIET)
if(dnnl_FOUND AND OpenMP_CXX_FOUND)
  get_target_property(_shoal_dnnl_lib DNNL::dnnl IMPORTED_LOCATION_RELEASE)
  message(STATUS "oneDNN: ${dnnl_VERSION} from ${_shoal_dnnl_lib} (SHOAL_DNNL_ROOT "
                 "${SHOAL_DNNL_ROOT}: the venv's onednn-cpu-gomp wheel)")
else()
  message(WARNING "oneDNN: no oneDNN 3.2 under ${SHOAL_DNNL_ROOT}: the CPU executor and the lm "
                  "are off. scripts/lib.sh installs it into the venv from requirements/test.lock "
                  "(`source scripts/lib.sh && install_python test`)")
endif()
