# tempalloc's C library for a CMake project that includes it from a
# checkout (kept for the projects that did; add_subdirectory of the source
# tree, or find_package after an install, is the usual way: docs/capi.md):
#
#   include(path/to/tempalloc/examples/cmake/tempalloc.cmake)
#   target_link_libraries(app PRIVATE tempalloc::tempalloc)
#
# The targets, variables and cache variables are cmake/tempalloc.cmake's.
# examples/cmake/CMakeLists.txt and examples/executorch/CMakeLists.txt
# include it.
include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/tempalloc.cmake")
