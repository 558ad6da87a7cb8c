# tempalloc's C library for a CMake project, built with cargo (what
# Corrosion-based projects do, without the dependency): one cargo call makes
# the static and the shared library, and this file declares
#
#   tempalloc::static     libtempalloc.a, with the system libraries Rust's
#                         standard library needs
#   tempalloc::shared     libtempalloc.so, under its SONAME
#                         (libtempalloc.so.0.MINOR before 1.0)
#   tempalloc::tempalloc  the static library (what include() gave before)
#
# each with include/ (tempalloc.h, tempalloc.hpp) on its include path. The
# top-level CMakeLists.txt includes it (add_subdirectory of the source tree),
# as does examples/cmake/tempalloc.cmake (include() of a checkout).
#
# Needs C or C++ enabled and cargo on the PATH (or -DCARGO=...). Cache
# variables: TEMPALLOC_DIR, the crate (by default the checkout this file sits
# in); TEMPALLOC_PROFILE, the cargo profile (release-capi: LTO,
# panic = "abort", stripped; see docs/capi.md); TEMPALLOC_TARGET_DIR,
# cargo's target dir (by default in the build tree; point it at the crate's
# own `target` to share a build with cargo run by hand: the cargo command is
# the one docs/capi.md gives, so a library built by hand is not rebuilt).
# TEMPALLOC_FOR_EXECUTABLES (OFF): build the static library as code for an
# executable (`-C relocation-model=pie`, in a target dir of its own under
# TEMPALLOC_TARGET_DIR/pie), which makes a request's thread-local look-up
# a plain load (docs/capi.md); such a library links only into executables.
# Sets TEMPALLOC_STATIC and TEMPALLOC_SHARED to the libraries' paths,
# TEMPALLOC_VERSION to the crate's version and TEMPALLOC_SONAME, for
# install rules.
include_guard(GLOBAL)

set(TEMPALLOC_DIR "${CMAKE_CURRENT_LIST_DIR}/.." CACHE PATH "The tempalloc crate")
get_filename_component(_tempalloc_dir "${TEMPALLOC_DIR}" ABSOLUTE)
set(TEMPALLOC_PROFILE "release-capi" CACHE STRING "The cargo profile of the C library")
set(TEMPALLOC_TARGET_DIR "${CMAKE_BINARY_DIR}/cargo" CACHE PATH "cargo's target dir for the C library")
option(TEMPALLOC_FOR_EXECUTABLES "Build the static library as code for an executable (links only into executables)" OFF)
find_program(CARGO cargo)
if(NOT CARGO)
  message(FATAL_ERROR "cargo not found: install Rust (https://rustup.rs) or pass -DCARGO=")
endif()

# The version is Cargo.toml's, so the SONAME is the one build.rs gives the
# library: before 1.0 a minor version may break the ABI.
file(STRINGS "${_tempalloc_dir}/Cargo.toml" _tempalloc_version_line
     REGEX "^version = \"[0-9]+\\.[0-9]+\\.[0-9]+\"" LIMIT_COUNT 1)
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" TEMPALLOC_VERSION "${_tempalloc_version_line}")
string(REPLACE "." ";" _tempalloc_parts "${TEMPALLOC_VERSION}")
list(GET _tempalloc_parts 0 _tempalloc_major)
list(GET _tempalloc_parts 1 _tempalloc_minor)
if(_tempalloc_major STREQUAL "0")
  set(_tempalloc_abi "0.${_tempalloc_minor}")
else()
  set(_tempalloc_abi "${_tempalloc_major}")
endif()

if(TEMPALLOC_PROFILE STREQUAL "dev")
  set(_tempalloc_profile_dir "debug")
else()
  set(_tempalloc_profile_dir "${TEMPALLOC_PROFILE}")
endif()
set(_tempalloc_out "${TEMPALLOC_TARGET_DIR}/${_tempalloc_profile_dir}")
set(_tempalloc_static_out "${_tempalloc_out}")
if(TEMPALLOC_FOR_EXECUTABLES)
  set(_tempalloc_static_out "${TEMPALLOC_TARGET_DIR}/pie/${_tempalloc_profile_dir}")
endif()
set(TEMPALLOC_STATIC "${_tempalloc_static_out}/${CMAKE_STATIC_LIBRARY_PREFIX}tempalloc${CMAKE_STATIC_LIBRARY_SUFFIX}")
set(TEMPALLOC_SHARED "${_tempalloc_out}/${CMAKE_SHARED_LIBRARY_PREFIX}tempalloc${CMAKE_SHARED_LIBRARY_SUFFIX}")
# ELF platforms but Android (which loads by file name) get build.rs's SONAME;
# elsewhere the linker's default name is the file's.
if(UNIX AND NOT APPLE AND NOT ANDROID)
  set(TEMPALLOC_SONAME "${CMAKE_SHARED_LIBRARY_PREFIX}tempalloc${CMAKE_SHARED_LIBRARY_SUFFIX}.${_tempalloc_abi}")
else()
  set(TEMPALLOC_SONAME "${CMAKE_SHARED_LIBRARY_PREFIX}tempalloc${CMAKE_SHARED_LIBRARY_SUFFIX}")
endif()

# Cargo decides what to rebuild, so it runs on every build (a no-op when
# nothing changed). Both crate types in one call: one LTO build, not two;
# for executables, the static library in a second call, with its own
# target dir (its code differs, so the two builds never undo each other).
# A program linked to the shared library asks for its SONAME: the link
# beside it lets such a program run from the build tree.
set(_tempalloc_cargo "${CARGO}" rustc --manifest-path "${_tempalloc_dir}/Cargo.toml"
    --profile "${TEMPALLOC_PROFILE}" --lib --features capi)
if(TEMPALLOC_FOR_EXECUTABLES)
  set(_tempalloc_crate_types cdylib)
  set(_tempalloc_static_cmd
    COMMAND ${_tempalloc_cargo} --crate-type staticlib --target-dir "${TEMPALLOC_TARGET_DIR}/pie"
            -- -C relocation-model=pie)
else()
  set(_tempalloc_crate_types staticlib,cdylib)
  set(_tempalloc_static_cmd)
endif()
set(_tempalloc_link_cmd)
if(NOT TEMPALLOC_SONAME STREQUAL "${CMAKE_SHARED_LIBRARY_PREFIX}tempalloc${CMAKE_SHARED_LIBRARY_SUFFIX}")
  set(_tempalloc_link_cmd
    COMMAND "${CMAKE_COMMAND}" -E create_symlink
            "${CMAKE_SHARED_LIBRARY_PREFIX}tempalloc${CMAKE_SHARED_LIBRARY_SUFFIX}"
            "${_tempalloc_out}/${TEMPALLOC_SONAME}")
endif()
add_custom_target(tempalloc_cargo ALL
  COMMAND ${_tempalloc_cargo} --crate-type ${_tempalloc_crate_types} --target-dir "${TEMPALLOC_TARGET_DIR}"
  ${_tempalloc_static_cmd}
  ${_tempalloc_link_cmd}
  BYPRODUCTS "${TEMPALLOC_STATIC}" "${TEMPALLOC_SHARED}"
  COMMENT "cargo: tempalloc's C library (${TEMPALLOC_PROFILE})"
  USES_TERMINAL)

find_package(Threads REQUIRED)

add_library(tempalloc_static STATIC IMPORTED GLOBAL)
add_dependencies(tempalloc_static tempalloc_cargo)
set_target_properties(tempalloc_static PROPERTIES
  IMPORTED_LOCATION "${TEMPALLOC_STATIC}"
  INTERFACE_INCLUDE_DIRECTORIES "${_tempalloc_dir}/include")
target_link_libraries(tempalloc_static INTERFACE Threads::Threads ${CMAKE_DL_LIBS})
if(UNIX AND NOT APPLE)
  target_link_libraries(tempalloc_static INTERFACE m)
endif()

add_library(tempalloc_shared SHARED IMPORTED GLOBAL)
add_dependencies(tempalloc_shared tempalloc_cargo)
set_target_properties(tempalloc_shared PROPERTIES
  IMPORTED_LOCATION "${TEMPALLOC_SHARED}"
  IMPORTED_SONAME "${TEMPALLOC_SONAME}"
  INTERFACE_INCLUDE_DIRECTORIES "${_tempalloc_dir}/include")

add_library(tempalloc::static ALIAS tempalloc_static)
add_library(tempalloc::shared ALIAS tempalloc_shared)
add_library(tempalloc::tempalloc ALIAS tempalloc_static)
