# The fuzz build (PD2BW_FUZZ=ON, the `fuzz` preset): the readers and the planner instrumented for
# libFuzzer's coverage and checked by AddressSanitizer and UBSan (halting), and one fuzzer per target of
# fuzz/targets.hpp, each also a ctest that runs it for a fixed time (tools/fuzz).
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "PD2BW_FUZZ needs clang (libFuzzer); configure with the fuzz preset (tools/fuzz)")
endif()
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
enable_testing()
add_subdirectory(schemas)
add_subdirectory(planner)
add_subdirectory(fuzz)
message(STATUS "pd2bw: fuzz build (${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION})")
