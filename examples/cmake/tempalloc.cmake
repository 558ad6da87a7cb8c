# tempalloc's C library for a CMake project, built with cargo: include this
# file and link `tempalloc::tempalloc` (the static library, tempalloc.h and
# tempalloc.hpp, and the system libraries Rust's standard library needs).
#
#   include(path/to/tempalloc/examples/cmake/tempalloc.cmake)
#   target_link_libraries(app PRIVATE tempalloc::tempalloc)
#
# Needs C or C++ enabled and cargo on the PATH (or -DCARGO=...). Cache
# variables: TEMPALLOC_DIR, the crate (by default the checkout this file sits
# in); TEMPALLOC_PROFILE, the cargo profile (release-capi: LTO,
# panic = "abort", stripped; see docs/capi.md); TEMPALLOC_TARGET_DIR,
# cargo's target dir (by default in the build tree; point it at the crate's
# own `target` to share a build with cargo run by hand). Sets
# TEMPALLOC_STATIC to the library's path, for install rules.
#
# examples/cmake/CMakeLists.txt (a program and install rules) and
# examples/executorch/CMakeLists.txt (the ExecuTorch runner) both include it.
include_guard(GLOBAL)

set(TEMPALLOC_DIR "${CMAKE_CURRENT_LIST_DIR}/../.." CACHE PATH "The tempalloc crate")
set(TEMPALLOC_PROFILE "release-capi" CACHE STRING "The cargo profile of the C library")
set(TEMPALLOC_TARGET_DIR "${CMAKE_BINARY_DIR}/cargo" CACHE PATH "cargo's target dir for the C library")
find_program(CARGO cargo)
if(NOT CARGO)
  message(FATAL_ERROR "cargo not found: install Rust (https://rustup.rs) or pass -DCARGO=")
endif()

# Cargo decides what to rebuild, so it runs on every build (a no-op when
# nothing changed).
set(TEMPALLOC_STATIC "${TEMPALLOC_TARGET_DIR}/${TEMPALLOC_PROFILE}/${CMAKE_STATIC_LIBRARY_PREFIX}tempalloc${CMAKE_STATIC_LIBRARY_SUFFIX}")
add_custom_target(tempalloc_cargo
  COMMAND "${CARGO}" rustc --manifest-path "${TEMPALLOC_DIR}/Cargo.toml"
          --profile "${TEMPALLOC_PROFILE}" --lib --features capi --crate-type staticlib
          --target-dir "${TEMPALLOC_TARGET_DIR}"
  BYPRODUCTS "${TEMPALLOC_STATIC}"
  COMMENT "cargo: tempalloc's C library (${TEMPALLOC_PROFILE})"
  USES_TERMINAL)

find_package(Threads REQUIRED)
add_library(tempalloc STATIC IMPORTED GLOBAL)
add_dependencies(tempalloc tempalloc_cargo)
set_target_properties(tempalloc PROPERTIES
  IMPORTED_LOCATION "${TEMPALLOC_STATIC}"
  INTERFACE_INCLUDE_DIRECTORIES "${TEMPALLOC_DIR}/include")
target_link_libraries(tempalloc INTERFACE Threads::Threads ${CMAKE_DL_LIBS})
if(UNIX AND NOT APPLE)
  target_link_libraries(tempalloc INTERFACE m)
endif()
add_library(tempalloc::tempalloc ALIAS tempalloc)
