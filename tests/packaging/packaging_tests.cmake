# The two ways a user installs TinyLoop besides the build tree (README "Install"), as CTests.
# Included from the top-level CMakeLists.txt after CPackConfig.cmake when the tests are built.
#
# wheel_install: `pip wheel .` from the checkout (scikit-build-core, compiling the engine and
#   the binding in <build>/packaging/wheel/cmake-build, through ccache when present), the
#   wheel installed into a fresh venv, `import tinyloop_py`, the README's Python example, and
#   one official-OpenAI-client request against `tinyloop-serve` (tests/packaging/wheel_install_check.py).
#   Wheels come from ~/.cache/tinyloop-wheels ($TINYLOOP_WHEEL_CACHE), downloaded once per machine.
# deb_depends: `cpack -G DEB` from this build, its Depends checked against the imports of the
#   packaged server and what ldd reports for the packaged binaries (tests/packaging/deb_depends_check.py).
if(NOT TINYLOOP_BUILD_PYTHON)
  return()  # both check the binding: the wheel builds it, the .deb ships it
endif()
add_test(NAME wheel_install
  COMMAND ${CMAKE_COMMAND} -E env CMAKE_BUILD_PARALLEL_LEVEL=2
    ${Python_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/packaging/wheel_install_check.py
    --source ${PROJECT_SOURCE_DIR} --work ${PROJECT_BINARY_DIR}/packaging/wheel --python ${Python_EXECUTABLE})
# Its build uses both cores; cold (no compiler cache) it compiles the engine and the binding.
set_tests_properties(wheel_install PROPERTIES TIMEOUT 1500 PROCESSORS 2)
find_program(TL_DPKG_DEB dpkg-deb)
if(TL_DPKG_DEB)
  add_test(NAME deb_depends
    COMMAND ${Python_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/packaging/deb_depends_check.py
      --build ${PROJECT_BINARY_DIR} --source ${PROJECT_SOURCE_DIR} --work ${PROJECT_BINARY_DIR}/packaging/deb
      --python ${Python_EXECUTABLE})
  set_tests_properties(deb_depends PROPERTIES TIMEOUT 600)
endif()
