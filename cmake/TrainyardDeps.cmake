# Third-party dependencies. The engine needs only a C++ compiler; OpenBLAS makes GEMM fast.

find_package(Threads REQUIRED)

find_path(TY_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread)
find_library(TY_OPENBLAS_LIB NAMES openblas)
if(TY_CBLAS_INCLUDE AND TY_OPENBLAS_LIB)
  set(TY_HAVE_OPENBLAS ON)
  add_library(ty_openblas INTERFACE)
  target_include_directories(ty_openblas SYSTEM INTERFACE ${TY_CBLAS_INCLUDE})
  target_link_libraries(ty_openblas INTERFACE ${TY_OPENBLAS_LIB})
  target_compile_definitions(ty_openblas INTERFACE TY_HAVE_OPENBLAS=1)
else()
  set(TY_HAVE_OPENBLAS OFF)
  add_library(ty_openblas INTERFACE)
  message(STATUS "trainyard: OpenBLAS not found; GEMM uses the reference kernel")
endif()

if(TY_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TY_BUILD_BENCH)
  find_package(benchmark QUIET)
endif()

# Gloo (Debian's libgloo-dev): CPU collectives for worker/dist. Optional so the engine still
# builds with a compiler alone (the GPU check machines have CUDA but no Gloo).
find_package(Gloo CONFIG QUIET)
if(TARGET gloo)
  set(TY_HAVE_GLOO ON)
else()
  set(TY_HAVE_GLOO OFF)
  message(STATUS "trainyard: Gloo not found; worker/dist builds without GlooProcessGroup")
endif()
