# Third-party dependencies. The engine needs only a C++ compiler; OpenBLAS makes GEMM fast.

find_package(Threads REQUIRED)

option(TY_WITH_OPENBLAS "Use OpenBLAS for CPU GEMM when found (OFF: the reference kernel)" ON)
find_path(TY_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread)
find_library(TY_OPENBLAS_LIB NAMES openblas)
if(TY_WITH_OPENBLAS AND TY_CBLAS_INCLUDE AND TY_OPENBLAS_LIB)
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

# GoogleTest: Debian's libgtest-dev. Where it is not installed (the lent GPU machines) a source
# tree can be named instead: -DTY_GTEST_SOURCE_DIR=<googletest checkout> (tools/gpu_check.sh
# passes a copy of Debian's /usr/src/googletest).
set(TY_GTEST_SOURCE_DIR "" CACHE PATH "GoogleTest sources, used when the package is missing")
if(TY_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND AND TY_GTEST_SOURCE_DIR)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory(${TY_GTEST_SOURCE_DIR} ${PROJECT_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
    if(NOT TARGET GTest::gtest)  # GoogleTest >= 1.11 defines these itself
      add_library(GTest::gtest ALIAS gtest)
      add_library(GTest::gmock ALIAS gmock)
      add_library(GTest::gtest_main ALIAS gtest_main)
    endif()
  elseif(NOT GTest_FOUND)
    message(FATAL_ERROR "GoogleTest not found: install libgtest-dev libgmock-dev "
                        "(scripts/deps.sh), set TY_GTEST_SOURCE_DIR, or pass -DTY_BUILD_TESTS=OFF")
  endif()
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

# The service (coordinator, worker daemon, service client): gRPC + protobuf, prometheus-cpp and
# SQLite from Debian (libgrpc++-dev, protobuf-compiler-grpc, prometheus-cpp-dev,
# libsqlite3-dev). Optional, so the engine builds without them.
find_package(Protobuf QUIET)
find_package(gRPC CONFIG QUIET)
find_package(prometheus-cpp CONFIG QUIET)
find_package(SQLite3 QUIET)
find_program(TY_GRPC_CPP_PLUGIN grpc_cpp_plugin)
if(Protobuf_FOUND AND TARGET gRPC::grpc++ AND TARGET prometheus-cpp::pull AND SQLite3_FOUND
   AND TY_GRPC_CPP_PLUGIN)
  set(TY_HAVE_SERVICE ON)
else()
  set(TY_HAVE_SERVICE OFF)
  message(STATUS "trainyard: gRPC, protobuf, prometheus-cpp or SQLite missing; the service is not built")
endif()
