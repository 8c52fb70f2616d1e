# Decides whether the CUDA parts build (GPU fold, CUDA executor, their tests and benchmarks).
#   SHOAL_WITH_CUDA=AUTO (default): on when CMake finds nvcc (PATH, $CUDACXX, $CUDA_PATH/bin or
#                   /usr/local/cuda/bin), off otherwise. ON: nvcc is required. OFF: never.
#   CMAKE_CUDA_ARCHITECTURES: default 90 (H100/H200); e.g. "80;90" adds A100. Each extra
#                   architecture is one more device compile of every .cu file.
# After this file, SHOAL_WITH_CUDA is a plain ON/OFF variable (shadowing the cache entry), so
# `if(SHOAL_WITH_CUDA)` anywhere below means "the CUDA parts are being built".
set(SHOAL_WITH_CUDA AUTO CACHE STRING "Build the CUDA parts: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE SHOAL_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(_shoal_cuda_request "${SHOAL_WITH_CUDA}")
set(SHOAL_WITH_CUDA OFF)

if(_shoal_cuda_request)  # AUTO or ON (any CMake true value); OFF/FALSE/0 skip the search
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(SHOAL_NVCC nvcc HINTS ENV CUDA_PATH ENV CUDA_HOME PATH_SUFFIXES bin
                 PATHS /usr/local/cuda/bin)
    if(SHOAL_NVCC)
      set(CMAKE_CUDA_COMPILER "${SHOAL_NVCC}" CACHE FILEPATH "nvcc")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (90: H100/H200)" FORCE)
    endif()
    enable_language(CUDA)
    # CMake 3.25's FindCUDAToolkit sets a property on CUDA::nvToolsExt without checking that it
    # found that library, which CUDA 13 (NVIDIA's wheels among them) no longer ships: nvtx3 is
    # header-only. Name nvtx3's interop library for it so the module completes; Shoal links
    # neither.
    if(NOT DEFINED CUDA_nvToolsExt_LIBRARY)
      get_filename_component(_shoal_nvcc_dir "${CMAKE_CUDA_COMPILER}" DIRECTORY)
      find_library(CUDA_nvToolsExt_LIBRARY NAMES nvToolsExt nvtx3interop libnvtx3interop.so.1
                   HINTS "${_shoal_nvcc_dir}/../lib64" "${_shoal_nvcc_dir}/../lib" NO_DEFAULT_PATH)
    endif()
    find_package(CUDAToolkit REQUIRED)
    # CMake 3.25 does not know nvcc's C++20 flag (CUDA takes CXX_STANDARD, 20 here); nvcc 12+
    # has it. Newer CMake versions define these themselves.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION OR
       CMAKE_CUDA20_STANDARD_COMPILE_OPTION STREQUAL "")
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    if(CCACHE_PROGRAM)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
    endif()
    set(SHOAL_WITH_CUDA ON)
    # For .cu files (target_compile_options(... ${SHOAL_CUDA_FLAGS})): warnings are errors in
    # device and host code alike, line info for profilers.
    set(SHOAL_CUDA_FLAGS $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
        $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
    if(SHOAL_WERROR)
      list(APPEND SHOAL_CUDA_FLAGS $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
    endif()
  elseif(_shoal_cuda_request STREQUAL "ON")
    message(FATAL_ERROR "SHOAL_WITH_CUDA=ON but no CUDA compiler (nvcc) was found; set "
                        "CMAKE_CUDA_COMPILER or CUDACXX")
  endif()
endif()

if(SHOAL_WITH_CUDA)
  # cuDNN: the toolkit's (Debian: /usr/local/cuda), SHOAL_CUDNN_ROOT, or PyTorch's pip wheel
  # (nvidia/cudnn in site-packages: headers plus libcudnn.so.9, no unversioned symlink).
  set(SHOAL_CUDNN_ROOT "" CACHE PATH "Where cuDNN 9 is (include/cudnn.h, lib/libcudnn.so*)")
  set(_cudnn_hints ${SHOAL_CUDNN_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  if(EXISTS "${SHOAL_PYTHON}")
    execute_process(
      COMMAND ${SHOAL_PYTHON} -c "import nvidia.cudnn, os; print(list(nvidia.cudnn.__path__)[0])"
      OUTPUT_VARIABLE _pip_cudnn OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_pip_cudnn)
      list(APPEND _cudnn_hints ${_pip_cudnn})
    endif()
  endif()
  find_path(SHOAL_CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(SHOAL_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
               HINTS ${_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(SHOAL_CUDNN_INCLUDE_DIR AND SHOAL_CUDNN_LIBRARY)
    add_library(shoal_cudnn INTERFACE)
    target_include_directories(shoal_cudnn INTERFACE ${SHOAL_CUDNN_INCLUDE_DIR})
    target_link_libraries(shoal_cudnn INTERFACE ${SHOAL_CUDNN_LIBRARY})
    set(SHOAL_HAVE_CUDNN ON)
  else()
    set(SHOAL_HAVE_CUDNN OFF)
  endif()
  message(STATUS "Shoal CUDA parts: ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
                 "${CMAKE_CUDA_ARCHITECTURES}, cuDNN: ${SHOAL_HAVE_CUDNN} ${SHOAL_CUDNN_LIBRARY})")
else()
  message(STATUS "Shoal CUDA parts: OFF (SHOAL_WITH_CUDA=${_shoal_cuda_request})")
endif()

# Tests of the CUDA parts: GoogleTest where it is installed, else the small stand-in in
# tests/support/minitest (same macros; exits 77, ctest's SKIP_RETURN_CODE, when its tests were
# skipped), so the GPU-only build needs nothing beyond CUDA and CMake. Registered with ctest
# either way; a test skipped for want of a device shows as "Skipped", never "Passed".
function(shoal_add_gpu_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS})
  # gpu_test_skip.h: skip only without a device; SHOAL_REQUIRE_GPU=1 makes every skip a failure.
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/support)
  if(TARGET GTest::gtest_main)
    target_link_libraries(${name} PRIVATE GTest::gtest_main)
    include(GoogleTest)
    # One label: a list value would be split into separate PROPERTIES arguments. GoogleTest's
    # "[  SKIPPED ]" is mapped to ctest's Skipped by gtest_discover_tests itself.
    gtest_discover_tests(${name} PROPERTIES LABELS gpu TIMEOUT 600)
  else()
    target_link_libraries(${name} PRIVATE shoal_minitest)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77)
  endif()
endfunction()
