# Warnings and floating-point settings shared by every comptrain target.
#
# -ffp-contract=off: no fused multiply-add contraction on the host, so that host and device
# (nvcc -fmad=false) evaluate the shared __host__ __device__ compressor stages identically.
function(comptrain_target_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -ffp-contract=off>)
  if(COMPTRAIN_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()
