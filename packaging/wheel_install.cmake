# What `pip wheel .` puts in the wheel (install component python_wheel, the only one
# pyproject.toml installs), relative to the wheel's site-packages:
#   tinyloop_py.<abi>.so, tinyloop_py.pyi     the binding and its stub
#   tinyloop_serve/                           the server: packaging/python/tinyloop_serve (the
#       serve/*.py                            entry point) and app/serve/*.py, unchanged
#   tinyloop_models/<model>/                  the bundled models' files (as the .deb installs
#                                             them under share/tinyloop/models)
# Included from the top-level CMakeLists.txt after every add_subdirectory when SKBUILD is set.
install(TARGETS tinyloop_py LIBRARY DESTINATION . COMPONENT python_wheel)
install(FILES ${PROJECT_SOURCE_DIR}/engine/python/tinyloop_py.pyi DESTINATION . COMPONENT python_wheel)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/packaging/python/tinyloop_serve ${PROJECT_SOURCE_DIR}/packaging/python/tinyloop_models
        DESTINATION . COMPONENT python_wheel FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
# Every module of the server (a new one is picked up at the next configure); loadcheck.py is the
# load-test client (it needs httpx), not part of the server.
file(GLOB _tl_serve_modules CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/app/serve/*.py)
list(FILTER _tl_serve_modules EXCLUDE REGEX "/loadcheck\\.py$")
install(FILES ${_tl_serve_modules} DESTINATION tinyloop_serve/serve COMPONENT python_wheel)

foreach(_tl_bundled tinyloop-kjv tinyloop-digitsum)
  foreach(_tl_file model-f32.tinyloop model-q8.tinyloop model-q4.tinyloop README.md heldout.jsonl)
    if(EXISTS ${PROJECT_SOURCE_DIR}/resources/models/${_tl_bundled}/${_tl_file})
      install(FILES ${PROJECT_SOURCE_DIR}/resources/models/${_tl_bundled}/${_tl_file}
              DESTINATION tinyloop_models/${_tl_bundled} COMPONENT python_wheel)
    endif()
  endforeach()
endforeach()
