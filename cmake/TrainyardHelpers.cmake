# Small helpers shared by every folder: warnings, sanitizers, one library per folder, tests.

if(CMAKE_CXX_COMPILER_LAUNCHER STREQUAL "")
  find_program(TY_CCACHE ccache)
  if(TY_CCACHE)
    set(CMAKE_CXX_COMPILER_LAUNCHER ${TY_CCACHE})
  endif()
endif()

if(TY_SANITIZE)
  if(NOT TY_SANITIZE MATCHES "^(address|undefined|thread)$")
    message(FATAL_ERROR "TY_SANITIZE is '${TY_SANITIZE}'; it must be address, undefined or thread")
  endif()
  set(TY_SANITIZE_FLAGS -fsanitize=${TY_SANITIZE} -fno-omit-frame-pointer)
  if(TY_SANITIZE STREQUAL "undefined")
    list(APPEND TY_SANITIZE_FLAGS -fno-sanitize-recover=undefined)
  endif()
endif()

# Flags for code we write (not for third-party headers).
function(ty_target_flags target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror ${TY_SANITIZE_FLAGS})
  target_link_options(${target} PRIVATE ${TY_SANITIZE_FLAGS})
endfunction()

# ty_library(NAME SOURCES... [DEPS libs...]): one static library per folder, rooted includes.
function(ty_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  ty_target_flags(${name})
  # Sanitizer flags must reach every binary that links us.
  target_link_options(${name} INTERFACE ${TY_SANITIZE_FLAGS})
endfunction()

# ty_test(NAME SOURCES... DEPS libs... [TIMEOUT seconds] [PREFIX text] [LABELS label]
# [RESOURCE_LOCK name]): one gtest binary; each test case is its own ctest entry (named PREFIX +
# the case, for a binary that reuses another's test file), limited to TIMEOUT seconds (default
# 120), with ctest's LABELS and RESOURCE_LOCK (cases sharing a lock never run at once).
include(GoogleTest)
function(ty_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;PREFIX;LABELS;RESOURCE_LOCK" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  if(NOT ARG_SOURCES)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  ty_target_flags(${name})
  # PyTorch reference files (tests/golden), read through testing::GoldenPath.
  target_compile_definitions(${name} PRIVATE TY_GOLDEN_DIR="${PROJECT_SOURCE_DIR}/tests/golden")
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
                       TEST_PREFIX "${ARG_PREFIX}" PROPERTIES TIMEOUT ${ARG_TIMEOUT}
                       LABELS "${ARG_LABELS}" RESOURCE_LOCK "${ARG_RESOURCE_LOCK}")
endfunction()

# Makes `target` and every static library it links position-independent, because the shared
# libraries libtrainyard_nccl.so and libtrainyard_cuda.so link them.
# -fno-semantic-interposition keeps GCC inlining as with -fPIE;
# one section per function lets the library's link drop what it does not call (and so Gloo).
function(ty_make_pic target)
  get_target_property(type ${target} TYPE)
  get_target_property(pic ${target} POSITION_INDEPENDENT_CODE)
  if(NOT type STREQUAL "STATIC_LIBRARY" OR pic)
    return()
  endif()
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${target} PRIVATE -fno-semantic-interposition -ffunction-sections
                                           -fdata-sections)
  get_target_property(deps ${target} LINK_LIBRARIES)
  foreach(dep IN LISTS deps)
    if(TARGET ${dep})
      ty_make_pic(${dep})
    endif()
  endforeach()
endfunction()
