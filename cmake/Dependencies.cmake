# Finds Pylon's dependencies (Debian packages by name); optional parts switch off cleanly.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)  # nlohmann-json3-dev
# Gloo: the CPU collectives of the distributed (FSDP) layer (libgloo-dev; CMake package Gloo,
# imported target `gloo`). Without it one CPU rank still trains; several ranks need it.
find_package(Gloo)
set(PYLON_HAVE_GLOO ${Gloo_FOUND})
if(NOT PYLON_HAVE_GLOO)
  message(WARNING "Gloo not found (apt install libgloo-dev): CPU training is limited to one rank")
endif()

# CBLAS for the CPU reference GEMMs. Without it, reference loops.
# OpenBLAS's OpenMP build (libopenblas-openmp-dev) comes first: it runs on libgomp's thread pool,
# the one our OpenMP loops use. The pthread build's own threads fight OpenMP's spinning workers
# for the cores (a CPU step measured 3x slower on 2 cores). The build tree's RUNPATH points at
# that build, ahead of the system's libopenblas.so.0 alternative.
set(PYLON_HAVE_BLAS OFF)
if(PYLON_BLAS)
  find_library(PYLON_OPENBLAS_OPENMP_LIB openblas
               PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
  find_path(PYLON_OPENBLAS_OPENMP_INCLUDE cblas.h
            PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
  if(PYLON_OPENBLAS_OPENMP_LIB AND PYLON_OPENBLAS_OPENMP_INCLUDE)
    add_library(pylon_openblas INTERFACE)
    target_link_libraries(pylon_openblas INTERFACE ${PYLON_OPENBLAS_OPENMP_LIB})
    target_include_directories(pylon_openblas SYSTEM INTERFACE ${PYLON_OPENBLAS_OPENMP_INCLUDE})
    set(PYLON_HAVE_BLAS ON)
    set(PYLON_BLAS_NAME "OpenBLAS (OpenMP)")
  else()
    find_package(PkgConfig)
    if(PkgConfig_FOUND)
      pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)
    endif()
    if(OPENBLAS_FOUND)
      add_library(pylon_openblas INTERFACE)
      target_link_libraries(pylon_openblas INTERFACE PkgConfig::OPENBLAS)
      set(PYLON_HAVE_BLAS ON)
      set(PYLON_BLAS_NAME "OpenBLAS (${OPENBLAS_LIBRARIES}; libopenblas-openmp-dev is faster here)")
    else()
      message(WARNING "OpenBLAS not found (apt install libopenblas-openmp-dev): CPU GEMMs use reference loops")
    endif()
  endif()
endif()

# xxHash (libxxhash-dev): XXH3 checksums of checkpoint files and edge-model tensors. Required.
# Through pkg-config, else by its header and library where pkg-config is absent.
find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(XXHASH IMPORTED_TARGET libxxhash)
endif()
add_library(pylon_xxhash INTERFACE)
if(TARGET PkgConfig::XXHASH)
  target_link_libraries(pylon_xxhash INTERFACE PkgConfig::XXHASH)
else()
  find_path(PYLON_XXHASH_INCLUDE xxhash.h)
  find_library(PYLON_XXHASH_LIBRARY xxhash)
  if(NOT PYLON_XXHASH_INCLUDE OR NOT PYLON_XXHASH_LIBRARY)
    message(FATAL_ERROR "xxHash not found: install libxxhash-dev (scripts/install-deps.sh does)")
  endif()
  target_include_directories(pylon_xxhash SYSTEM INTERFACE ${PYLON_XXHASH_INCLUDE})
  target_link_libraries(pylon_xxhash INTERFACE ${PYLON_XXHASH_LIBRARY})
endif()

# SentencePiece for `pylon tokenize` and generation (libsentencepiece-dev).
set(PYLON_HAVE_SENTENCEPIECE OFF)
find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(SENTENCEPIECE IMPORTED_TARGET sentencepiece)
  if(SENTENCEPIECE_FOUND)
    set(PYLON_HAVE_SENTENCEPIECE ON)
  endif()
endif()
if(NOT PYLON_HAVE_SENTENCEPIECE)
  message(WARNING "SentencePiece not found (apt install libsentencepiece-dev): no tokenizer")
endif()

# Hugging Face tokenizer.json files (byte-level BPE): PCRE2 runs their split patterns
# (libpcre2-dev >= 10.40, the first with \p{White_Space}; JIT), libunistring their NFC normalizer
# (libunistring-dev). Without PCRE2 such files are refused with a line saying so; without
# libunistring, those with NFC.
set(PYLON_HAVE_PCRE2 OFF)
if(PkgConfig_FOUND)
  pkg_check_modules(PCRE2 IMPORTED_TARGET libpcre2-8>=10.40)
  if(PCRE2_FOUND)
    set(PYLON_HAVE_PCRE2 ON)
  endif()
endif()
if(NOT PYLON_HAVE_PCRE2)
  message(WARNING "PCRE2 >= 10.40 not found (apt install libpcre2-dev): tokenizer.json files are refused")
endif()
find_path(PYLON_UNISTRING_INCLUDE uninorm.h)
find_library(PYLON_UNISTRING_LIB unistring)
if(PYLON_UNISTRING_INCLUDE AND PYLON_UNISTRING_LIB)
  set(PYLON_HAVE_UNISTRING ON)
else()
  set(PYLON_HAVE_UNISTRING OFF)
  message(WARNING "libunistring not found (apt install libunistring-dev): tokenizer.json files with NFC are refused")
endif()

# Optional GPU / distributed parts. AUTO = on when found; ON = required.
function(pylon_optional var found)
  if(${var} STREQUAL "ON" AND NOT ${found})
    message(FATAL_ERROR "${var}=ON but its dependency was not found")
  endif()
  if(${var} STREQUAL "OFF")
    set(${found} OFF PARENT_SCOPE)
  endif()
endfunction()

set(PYLON_HAVE_CUDA OFF)
if(NOT PYLON_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit)
    set(PYLON_HAVE_CUDA ${CUDAToolkit_FOUND})
  endif()
endif()
pylon_optional(PYLON_CUDA PYLON_HAVE_CUDA)

# NCCL: the GPU collectives of FSDP (libnccl-dev, or the copy inside the CUDA toolkit). Without it
# the CUDA backend trains on one GPU only.
set(PYLON_HAVE_NCCL OFF)
if(PYLON_HAVE_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(PYLON_HAVE_NCCL ON)
  else()
    message(WARNING "NCCL not found (apt install libnccl-dev): --device cuda is limited to one GPU")
  endif()
endif()

# CUPTI (the CUDA toolkit's extras): device traces for `train --profile` on CUDA.
set(PYLON_HAVE_CUPTI OFF)
if(PYLON_HAVE_CUDA AND NOT PYLON_CUPTI STREQUAL "OFF" AND TARGET CUDA::cupti)
  set(PYLON_HAVE_CUPTI ON)
endif()
pylon_optional(PYLON_CUPTI PYLON_HAVE_CUPTI)

# Vulkan: headers + loader (libvulkan-dev) and glslc (SPIR-V compiled at build time). The
# cooperative-matrix GEMM needs a glslc that knows GL_KHR_cooperative_matrix (Debian 12's does not):
# PYLON_GLSLC_COOPMAT names one (a command line, e.g. trixie's glslc run through its own loader);
# it is probe-compiled and the coopmat shader is left out, with a message, when it fails.
set(PYLON_HAVE_VULKAN OFF)
set(PYLON_HAVE_VULKAN_COOPMAT OFF)
set(PYLON_HAVE_VULKAN_COOPMAT2 OFF)
set(PYLON_GLSLC_COOPMAT "" CACHE STRING "glslc command able to compile GL_KHR_cooperative_matrix")
if(NOT PYLON_VULKAN STREQUAL "OFF")
  find_package(Vulkan COMPONENTS glslc)
  if(Vulkan_FOUND AND Vulkan_glslc_FOUND)
    set(PYLON_HAVE_VULKAN ON)
  elseif(Vulkan_FOUND)
    message(WARNING "Vulkan found but not glslc (apt install glslc): no Vulkan backend")
  endif()
endif()
pylon_optional(PYLON_VULKAN PYLON_HAVE_VULKAN)
if(PYLON_HAVE_VULKAN)
  set(_probe_src ${CMAKE_CURRENT_LIST_DIR}/../src/ops/vulkan/shaders/coopmat_probe.comp.in)
  set(_glslc_coopmat ${PYLON_GLSLC_COOPMAT})
  if(NOT _glslc_coopmat)
    set(_glslc_coopmat ${Vulkan_GLSLC_EXECUTABLE})
  endif()
  separate_arguments(_glslc_coopmat)
  configure_file(${_probe_src} ${CMAKE_BINARY_DIR}/coopmat_probe.comp COPYONLY)
  execute_process(COMMAND ${_glslc_coopmat} --target-env=vulkan1.2 -o ${CMAKE_BINARY_DIR}/coopmat_probe.spv
                          ${CMAKE_BINARY_DIR}/coopmat_probe.comp
                  RESULT_VARIABLE _probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(_probe_rc EQUAL 0)
    set(PYLON_HAVE_VULKAN_COOPMAT ON)
    set(PYLON_GLSLC_COOPMAT_COMMAND ${_glslc_coopmat})
  else()
    message(STATUS "Vulkan: glslc cannot compile GL_KHR_cooperative_matrix: the coopmat GEMM is left "
                   "out (set PYLON_GLSLC_COOPMAT to a glslc that can)")
  endif()
  # NVIDIA's workgroup-scope matrices (GL_NV_cooperative_matrix2, SPIR-V 1.6): a second probe with
  # the same glslc; without it the coopmat2 GEMM is left out and the coopmat one serves.
  if(PYLON_HAVE_VULKAN_COOPMAT)
    configure_file(${CMAKE_CURRENT_LIST_DIR}/../src/ops/vulkan/shaders/coopmat2_probe.comp.in
                   ${CMAKE_BINARY_DIR}/coopmat2_probe.comp COPYONLY)
    execute_process(COMMAND ${_glslc_coopmat} --target-env=vulkan1.3 -o ${CMAKE_BINARY_DIR}/coopmat2_probe.spv
                            ${CMAKE_BINARY_DIR}/coopmat2_probe.comp
                    RESULT_VARIABLE _probe2_rc OUTPUT_QUIET ERROR_QUIET)
    if(_probe2_rc EQUAL 0)
      set(PYLON_HAVE_VULKAN_COOPMAT2 ON)
    else()
      message(STATUS "Vulkan: glslc cannot compile GL_NV_cooperative_matrix2: the coopmat2 GEMM is left out")
    endif()
  endif()
endif()

set(PYLON_HAVE_MPI OFF)
if(NOT PYLON_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C)
  set(PYLON_HAVE_MPI ${MPI_C_FOUND})
endif()
pylon_optional(PYLON_MPI PYLON_HAVE_MPI)

# The text libraries the tokenizers and readers use (SentencePiece, PCRE2, libunistring), each
# when found, linked into `target` with its PYLON_HAVE_* definition: pylon_lib and the fuzzers' copy
# of the parsers take them alike.
function(pylon_link_text_libraries target)
  if(PYLON_HAVE_SENTENCEPIECE)
    target_link_libraries(${target} PUBLIC PkgConfig::SENTENCEPIECE)
    target_compile_definitions(${target} PUBLIC PYLON_HAVE_SENTENCEPIECE=1)
  endif()
  if(PYLON_HAVE_PCRE2)
    target_link_libraries(${target} PRIVATE PkgConfig::PCRE2)
    target_compile_definitions(${target} PRIVATE PYLON_HAVE_PCRE2=1)
  endif()
  if(PYLON_HAVE_UNISTRING)
    target_include_directories(${target} SYSTEM PRIVATE ${PYLON_UNISTRING_INCLUDE})
    target_link_libraries(${target} PRIVATE ${PYLON_UNISTRING_LIB})
    target_compile_definitions(${target} PRIVATE PYLON_HAVE_UNISTRING=1)
  endif()
endfunction()
