# GPU kernels: every kernels/*.cu, written once against kernels/gpu_compat.h, built into
# ds_kernels_gpu by nvcc (DELTASERVE_CUDA) or by the HIP clang (DELTASERVE_HIP). Included from
# kernels/CMakeLists.txt when either option is on; the CPU references stay in ds_kernels.
#
#   CUDA: -DDELTASERVE_CUDA=ON [-DDELTASERVE_CUDA_ARCHS="90;80;86;89"]
#         (nvcc from CMAKE_CUDA_COMPILER, else PATH, else /usr/local/cuda/bin/nvcc)
#   HIP:  -DDELTASERVE_HIP=ON [-DDELTASERVE_HIP_ARCHS="gfx906;gfx90a"]
#         (CMAKE_HIP_COMPILER: ROCm's clang++, e.g. Debian's clang++-15 with hipcc installed)
# With DELTASERVE_TESTS, the GPU parity test program gpu_kernel_tests is built from
# tests/gpu/*_test.cu (it needs a device to run; see tests/gpu/README.md).
if(DELTASERVE_CUDA AND DELTASERVE_HIP)
  message(FATAL_ERROR "DELTASERVE_CUDA and DELTASERVE_HIP are exclusive: configure one build folder each")
endif()

file(GLOB DS_GPU_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cu)
file(GLOB DS_GPU_TEST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/gpu/*_test.cu)

if(DELTASERVE_CUDA)
  set(DELTASERVE_CUDA_ARCHS "90;80;86;89" CACHE STRING "CUDA architectures of ds_kernels_gpu")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${DELTASERVE_CUDA_ARCHS})
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(DELTASERVE_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
    if(DELTASERVE_NVCC)
      set(CMAKE_CUDA_COMPILER ${DELTASERVE_NVCC})
    endif()
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  add_library(ds_kernels_gpu STATIC ${DS_GPU_SOURCES})
  set_target_properties(ds_kernels_gpu PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                                  POSITION_INDEPENDENT_CODE ON)
  target_compile_options(ds_kernels_gpu PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra -Werror=all-warnings>)
  target_link_libraries(ds_kernels_gpu PUBLIC ds_kernels CUDA::cudart_static)
  set(DS_GPU_LANGUAGE CUDA)
elseif(DELTASERVE_HIP)
  set(DELTASERVE_HIP_ARCHS "gfx906;gfx90a" CACHE STRING "AMD GPU targets of ds_kernels_gpu")
  if(NOT DEFINED CMAKE_HIP_ARCHITECTURES)
    set(CMAKE_HIP_ARCHITECTURES ${DELTASERVE_HIP_ARCHS})
  endif()
  enable_language(HIP)
  set_source_files_properties(${DS_GPU_SOURCES} ${DS_GPU_TEST_SOURCES} PROPERTIES LANGUAGE HIP)
  add_library(ds_kernels_gpu STATIC ${DS_GPU_SOURCES})
  set_target_properties(ds_kernels_gpu PROPERTIES HIP_STANDARD 17 HIP_STANDARD_REQUIRED ON
                                                  POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(ds_kernels_gpu PUBLIC ds_kernels)
  set(DS_GPU_LANGUAGE HIP)
endif()

if(DELTASERVE_TESTS AND DS_GPU_TEST_SOURCES)
  add_executable(gpu_kernel_tests ${DS_GPU_TEST_SOURCES})
  set_target_properties(gpu_kernel_tests PROPERTIES ${DS_GPU_LANGUAGE}_STANDARD 17)
  target_link_libraries(gpu_kernel_tests PRIVATE ds_kernels_gpu ds_kernels)
  # Not a ctest test: CI has no GPU. Run it on a device (tests/gpu/README.md).
endif()
