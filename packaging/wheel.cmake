# `pip install .` / `pip wheel .` (scikit-build-core reads pyproject.toml and sets SKBUILD): the
# settings that must be made before the first target exists. Included from the top-level
# CMakeLists.txt before its add_subdirectory calls; the wheel's contents: wheel_install.cmake.
#
# ccache when the machine has it (as packaging/setup.sh does for the CMake build): a wheel build
# compiles the engine again, and a rebuild in the same build folder (the wheel test's) is then
# mostly cache hits. A launcher given on the command line is kept.
find_program(TL_CCACHE_PROGRAM ccache)
if(TL_CCACHE_PROGRAM)
  foreach(_tl_lang C CXX CUDA)
    if(NOT CMAKE_${_tl_lang}_COMPILER_LAUNCHER)
      set(CMAKE_${_tl_lang}_COMPILER_LAUNCHER ${TL_CCACHE_PROGRAM})
    endif()
  endforeach()
endif()
message(STATUS "TinyLoop: building the Python wheel (SKBUILD ${SKBUILD_PROJECT_VERSION}), compiler cache: ${TL_CCACHE_PROGRAM}")
