# The .deb's Depends beyond what dpkg-shlibdeps derives from the binaries' libraries (it adds
# libc6, libstdc++6, libgcc-s1, the Qt 6 libraries and QCustomPlot): the Qt and QCustomPlot
# packages again, named so that a package built where dpkg-shlibdeps finds nothing still says
# what it needs, and what no ELF file shows:
#   python3 (>= X.Y), python3 (<< X.Y+1)   the binding tinyloop_py is built for that Python's ABI
#                                          (the interpreter of engine/python, Python_EXECUTABLE)
#   python3-fastapi, python3-starlette, python3-uvicorn, python3-h11, python3-jinja2
#                                          the server (share/tinyloop/serve, `tinyloop serve`)
#   python3-httpx                          its load check (share/tinyloop/serve/loadcheck.py)
# tests/packaging/deb_depends_check.py builds the package and checks these against the imports
# of app/serve/*.py and the libraries ldd reports for the installed binaries.
set(_tl_depends "libqt6widgets6 (>= 6.4), libqt6printsupport6 (>= 6.4), libqcustomplot2.1-qt6")
if(TINYLOOP_BUILD_PYTHON AND Python_EXECUTABLE)
  execute_process(COMMAND ${Python_EXECUTABLE} -c "import sys; print('%d.%d %d.%d' % (sys.version_info[0], sys.version_info[1], sys.version_info[0], sys.version_info[1] + 1))"
                  OUTPUT_VARIABLE _tl_pyver OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _tl_pyrc)
  if(_tl_pyrc EQUAL 0 AND _tl_pyver MATCHES "^([0-9.]+) ([0-9.]+)$")
    string(APPEND _tl_depends ", python3 (>= ${CMAKE_MATCH_1}), python3 (<< ${CMAKE_MATCH_2})")
  endif()
  string(APPEND _tl_depends ", python3-fastapi, python3-starlette, python3-uvicorn, python3-h11, python3-jinja2, python3-httpx")
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${_tl_depends}")
