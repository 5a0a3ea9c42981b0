# Project-wide warning flags and the sanitizer switch used by the asan preset.
add_library(pd2bw_warnings INTERFACE)
target_compile_options(pd2bw_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>)
# CUDA sources: the host compiler's warnings on our code, and nvcc's own (device code) as errors.
target_compile_options(pd2bw_warnings INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
if(PD2BW_WERROR)
  # ptxas too: a kernel that spills registers or uses local memory (a stack frame) fails the build, so the
  # register budget a kernel's __launch_bounds__ promises is kept without spilling.
  target_compile_options(pd2bw_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
                                                  $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings>
                                                  $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills,-warn-lmem-usage,-Werror>)
endif()

option(PD2BW_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
if(PD2BW_SANITIZE)
  # -O1 keeps the sanitized tests quick (training loops run tens of times faster than at -O0); Debug's
  # assertions stay on because NDEBUG is not defined.
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -O1)
  add_link_options(-fsanitize=address,undefined)
endif()
