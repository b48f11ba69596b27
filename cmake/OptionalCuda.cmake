# CUDA is optional: it is enabled when nvcc is found (on our machines at /usr/local/cuda/bin/nvcc)
# and everything else builds without it. Sets COMPTRAIN_HAVE_CUDA.
set(COMPTRAIN_HAVE_CUDA OFF)
if(NOT COMPTRAIN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Ampere and Hopper unless the user chose: nvcc's own default (sm_75 for CUDA 13) would win
    # if this were set after enable_language.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 has no C++20 dialect flag for nvcc (Modules/Compiler/NVIDIA-CUDA.cmake stops at
    # c++17); set here, at the top level, so every directory's CUDA targets get it.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # nvcc must not contract a*b+c into FMA, so device and host streams are bit-identical.
    set(COMPTRAIN_CUDA_FLAGS -fmad=false)
    set(COMPTRAIN_HAVE_CUDA ON)
    message(STATUS "comptrain: CUDA enabled (${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(COMPTRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "comptrain: COMPTRAIN_CUDA=ON but no CUDA compiler (nvcc) was found")
  else()
    message(STATUS "comptrain: nvcc not found; building without CUDA (CPU code paths only)")
  endif()
else()
  message(STATUS "comptrain: CUDA disabled (COMPTRAIN_CUDA=OFF)")
endif()
