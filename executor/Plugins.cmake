# The plugins: the cuda backend (libpd2bw_cuda.so), the mpi transport with MPI's process group
# (libpd2bw_mpi.so) and the nccl transport (libpd2bw_nccl.so). Each is an OBJECT library of its sources
# and entry point (src/plugin/*_entry.cpp) that test executables link directly beside pd2bw_executor,
# wrapped in a shared library that pd2bw loads with dlopen (src/plugin/loader.cpp) beside itself. The
# shared libraries link none of the core: they resolve its symbols against the pd2bw executable, which
# exports them (tools/CMakeLists.txt), so that one copy of the core, its registries and its exception
# types serves the executable and every plugin.
set(PD2BW_PLUGIN_DIR ${CMAKE_BINARY_DIR}/tools)
set(PD2BW_SRC ${CMAKE_CURRENT_SOURCE_DIR}/src)
set(PD2BW_PLUGIN_TARGETS "")

# The OBJECT library `target` of a plugin's sources, compiled as the core is (headers, warnings, no FMA).
function(pd2bw_plugin_objects target)
  add_library(${target} OBJECT ${ARGN})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} PRIVATE ${PD2BW_SRC} $<TARGET_PROPERTY:pd2bw_executor,INTERFACE_INCLUDE_DIRECTORIES>
                             $<TARGET_PROPERTY:pd2bw_schemas,INTERFACE_INCLUDE_DIRECTORIES>
                             $<TARGET_PROPERTY:pd2bw_pipeline,INTERFACE_INCLUDE_DIRECTORIES>)
  target_link_libraries(${target} PUBLIC fmt::fmt Threads::Threads PRIVATE nlohmann_json::nlohmann_json pd2bw_warnings)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
endfunction()

# The shared library libpd2bw_<name>.so of the OBJECT library `objects`, beside pd2bw.
function(pd2bw_plugin name objects)
  add_library(pd2bw_${name} SHARED)
  target_link_libraries(pd2bw_${name} PRIVATE ${objects})
  set_target_properties(pd2bw_${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PD2BW_PLUGIN_DIR}
                        BUILD_RPATH "\$ORIGIN" INSTALL_RPATH "\$ORIGIN")
  set(PD2BW_PLUGIN_TARGETS ${PD2BW_PLUGIN_TARGETS} pd2bw_${name} PARENT_SCOPE)
endfunction()

# On the emulated device the plugins compile against emu/include; the cuda plugin carries the whole
# emulator (one device, one runtime per process) and the nccl plugin uses it from there.
function(pd2bw_use_emu_headers target)
  target_include_directories(${target} PRIVATE $<TARGET_PROPERTY:pd2bw_emu,INTERFACE_INCLUDE_DIRECTORIES>)
  target_compile_definitions(${target} PRIVATE $<TARGET_PROPERTY:pd2bw_emu,INTERFACE_COMPILE_DEFINITIONS>)
endfunction()

# The CUDA backend (src/cuda/*.cu): cuBLASLt for the GEMMs (cuBLAS as its fallback), kernels of its own.
if(PD2BW_HAVE_CUDA)
  file(GLOB PD2BW_CUDA_SOURCES CONFIGURE_DEPENDS ${PD2BW_SRC}/cuda/*.cu)
  pd2bw_plugin_objects(pd2bw_cuda_objects ${PD2BW_CUDA_SOURCES} ${PD2BW_SRC}/plugin/cuda_entry.cpp)
  target_compile_definitions(pd2bw_cuda_objects PRIVATE PD2BW_HAVE_CUDA=1)
  pd2bw_plugin(cuda pd2bw_cuda_objects)
  if(PD2BW_CUDA_EMULATED)
    # The same .cu files as host C++ against the emulated device (emu/): its runtime, cuBLASLt and NCCL.
    set_source_files_properties(${PD2BW_CUDA_SOURCES} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS
                                "-xc++;${PD2BW_EMU_DEVICE_FLAGS}")
    # The attention kernels (every dtype x threads-per-row x mask instantiation of long unrolled loops) take
    # clang over 20 CPU-minutes to optimise at -O1 under ASan, UBSan and the race detector's load and store
    # tracing, and 5 s at -O0; their emulated tests use micro sizes, so -O0 costs them little.
    set_source_files_properties(${PD2BW_SRC}/cuda/attention.cu PROPERTIES COMPILE_OPTIONS
                                "-xc++;${PD2BW_EMU_DEVICE_FLAGS};-O0")
    pd2bw_use_emu_headers(pd2bw_cuda_objects)
    set_target_properties(pd2bw_emu PROPERTIES POSITION_INDEPENDENT_CODE ON)
    add_dependencies(pd2bw_cuda pd2bw_emu)
    # -Bsymbolic-functions: the .cu files' calls (the race detector's load and store hooks among them) bind
    # to the emulator's functions in this library, whatever the executable exports under the same names.
    target_link_options(pd2bw_cuda PRIVATE "SHELL:-Wl,--whole-archive $<TARGET_FILE:pd2bw_emu> -Wl,--no-whole-archive"
                        "LINKER:-Bsymbolic-functions")
    target_link_libraries(pd2bw_cuda PRIVATE Threads::Threads $<$<BOOL:${PD2BW_HAVE_MPI}>:MPI::MPI_CXX>)
  else()
    # One CUDA runtime in a process: the static one (a plugin that runs wherever the driver does), or the
    # shared one that the nccl plugin links too when it is built.
    if(PD2BW_HAVE_NCCL)
      target_link_libraries(pd2bw_cuda_objects PUBLIC CUDA::cudart CUDA::cublasLt CUDA::cublas)
    else()
      target_link_libraries(pd2bw_cuda_objects PUBLIC CUDA::cudart_static CUDA::cublasLt CUDA::cublas)
    endif()
    target_compile_options(pd2bw_cuda_objects PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  endif()
endif()

# The mpi transport and the process group of multi-process jobs (src/mpi/).
if(PD2BW_HAVE_MPI)
  file(GLOB PD2BW_MPI_SOURCES CONFIGURE_DEPENDS ${PD2BW_SRC}/mpi/*.cpp)
  pd2bw_plugin_objects(pd2bw_mpi_objects ${PD2BW_MPI_SOURCES} ${PD2BW_SRC}/plugin/mpi_entry.cpp)
  target_link_libraries(pd2bw_mpi_objects PUBLIC MPI::MPI_CXX)
  pd2bw_plugin(mpi pd2bw_mpi_objects)
endif()

# The nccl transport (src/nccl/): NCCL, bootstrapped over MPI. Its plugin links the mpi plugin (the Port,
# the peer watch) and the cuda plugin (one CUDA runtime; on the emulated device, the emulator).
if(PD2BW_HAVE_NCCL)
  file(GLOB PD2BW_NCCL_SOURCES CONFIGURE_DEPENDS ${PD2BW_SRC}/nccl/*.cpp)
  pd2bw_plugin_objects(pd2bw_nccl_objects ${PD2BW_NCCL_SOURCES} ${PD2BW_SRC}/plugin/nccl_entry.cpp)
  target_link_libraries(pd2bw_nccl_objects PUBLIC MPI::MPI_CXX)
  if(PD2BW_CUDA_EMULATED)
    pd2bw_use_emu_headers(pd2bw_nccl_objects)
  else()
    target_include_directories(pd2bw_nccl_objects PRIVATE ${PD2BW_NCCL_INCLUDE})
    target_link_libraries(pd2bw_nccl_objects PUBLIC CUDA::cudart ${PD2BW_NCCL_LIBRARY})
  endif()
  pd2bw_plugin(nccl pd2bw_nccl_objects)
  target_link_libraries(pd2bw_nccl PRIVATE pd2bw_mpi pd2bw_cuda)
endif()
set(PD2BW_PLUGIN_TARGETS ${PD2BW_PLUGIN_TARGETS} PARENT_SCOPE)
