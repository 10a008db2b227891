# GPU kernels: every kernels/<op>/*.cu, written once against kernels/gpu/gpu_compat.h, built into
# ds_kernels_gpu by nvcc (DELTASERVE_CUDA) or by the HIP clang (DELTASERVE_HIP). Included from
# kernels/CMakeLists.txt when either option is on; the CPU references stay in ds_kernels.
#
#   CUDA: -DDELTASERVE_CUDA=ON [-DDELTASERVE_CUDA_ARCHS="90;80;86;89"]
#         (nvcc from CMAKE_CUDA_COMPILER, else PATH, else /usr/local/cuda/bin/nvcc)
#   HIP:  -DDELTASERVE_HIP=ON [-DDELTASERVE_HIP_ARCHS="gfx906;gfx90a"] (hipcc from PATH or /opt/rocm/bin)
# With DELTASERVE_TESTS, the GPU parity test program gpu_kernel_tests is built from
# tests/gpu/*_test.cu (it needs a device to run; see tests/gpu/README.md).
if(DELTASERVE_CUDA AND DELTASERVE_HIP)
  message(FATAL_ERROR "DELTASERVE_CUDA and DELTASERVE_HIP are exclusive: configure one build folder each")
endif()

file(GLOB DS_GPU_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cu ${CMAKE_CURRENT_SOURCE_DIR}/*/*.cu)
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
  # A measuring build: every launch stamps its start and its grid dependency wait
  # (kernels/gpu/gpu_timeline.h; `deltaserve bench --timeline` prints the in-step table). Never a product build.
  option(DELTASERVE_GPU_TIMELINE "Stamp each kernel launch's start and wait on the device (measuring build)" OFF)
  if(DELTASERVE_GPU_TIMELINE)
    target_compile_definitions(ds_kernels_gpu PRIVATE DS_GPU_TIMELINE)
  endif()
  set(DS_GPU_LANGUAGE CUDA)
elseif(DELTASERVE_HIP)
  # hipcc drives the HIP clang directly: CMake's HIP language needs the hip-lang package under
  # <rocm>/lib/cmake, which Debian's multiarch ROCm 5.2 does not provide. Each .cu becomes one
  # object (device code embedded, no device link), archived into ds_kernels_gpu.
  set(DELTASERVE_HIP_ARCHS "gfx906;gfx90a" CACHE STRING "AMD GPU targets of ds_kernels_gpu")
  find_program(DELTASERVE_HIPCC hipcc PATHS /opt/rocm/bin REQUIRED)
  find_library(DELTASERVE_AMDHIP64 amdhip64 PATHS /opt/rocm/lib REQUIRED)
  file(GLOB DS_GPU_HEADERS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.h ${CMAKE_CURRENT_SOURCE_DIR}/*/*.h ${PROJECT_SOURCE_DIR}/tests/gpu/*.h)
  set(DS_HIP_ARCH_FLAGS)
  foreach(arch ${DELTASERVE_HIP_ARCHS})
    list(APPEND DS_HIP_ARCH_FLAGS --offload-arch=${arch})
  endforeach()
  function(ds_hipcc_objects out_var)
    set(objects)
    foreach(src ${ARGN})
      get_filename_component(name ${src} NAME_WE)
      set(obj ${CMAKE_CURRENT_BINARY_DIR}/hip/${name}.o)
      add_custom_command(OUTPUT ${obj}
        COMMAND ${DELTASERVE_HIPCC} -std=c++17 -O3 -fPIC -x hip ${DS_HIP_ARCH_FLAGS} -Wall -Werror
                -I${PROJECT_SOURCE_DIR} -c ${src} -o ${obj}
        DEPENDS ${src} ${DS_GPU_HEADERS} COMMENT "hipcc ${name}.cu" VERBATIM)
      list(APPEND objects ${obj})
    endforeach()
    set(${out_var} ${objects} PARENT_SCOPE)
  endfunction()
  ds_hipcc_objects(DS_GPU_OBJECTS ${DS_GPU_SOURCES})
  add_library(ds_kernels_gpu STATIC ${DS_GPU_OBJECTS})
  set_target_properties(ds_kernels_gpu PROPERTIES LINKER_LANGUAGE CXX)
  # Host code that includes kernels/*_gpu.h with g++ selects the HIP side of gpu_compat.h.
  target_compile_definitions(ds_kernels_gpu INTERFACE __HIP_PLATFORM_AMD__)
  target_link_libraries(ds_kernels_gpu PUBLIC ds_kernels ${DELTASERVE_AMDHIP64})
  set(DS_GPU_LANGUAGE HIP)
endif()

if(DELTASERVE_TESTS AND DS_GPU_TEST_SOURCES)
  if(DS_GPU_LANGUAGE STREQUAL "HIP")
    ds_hipcc_objects(DS_GPU_TEST_OBJECTS ${DS_GPU_TEST_SOURCES})
    add_executable(gpu_kernel_tests ${DS_GPU_TEST_OBJECTS})
    set_target_properties(gpu_kernel_tests PROPERTIES LINKER_LANGUAGE CXX)
  else()
    add_executable(gpu_kernel_tests ${DS_GPU_TEST_SOURCES})
    set_target_properties(gpu_kernel_tests PROPERTIES CUDA_STANDARD 17)
  endif()
  target_link_libraries(gpu_kernel_tests PRIVATE ds_kernels_gpu ds_kernels)
  # Not a ctest test: CI has no GPU. Run it on a device (tests/gpu/README.md).
endif()
