# Project-wide warning flags and the sanitizer switch used by the asan preset.
add_library(pd2bw_warnings INTERFACE)
target_compile_options(pd2bw_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>)
if(PD2BW_WERROR)
  target_compile_options(pd2bw_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

option(PD2BW_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
if(PD2BW_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
