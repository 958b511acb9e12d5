# CPack: a .deb and a .tar.gz of what install() lays down (the CLI, the workbench, the desktop
# entry, the icon, the default presets, and the bundled model when it is present).
# Included from the top-level CMakeLists.txt after every add_subdirectory:
#     include(${PROJECT_SOURCE_DIR}/packaging/CPackConfig.cmake)
# Then:  cmake --build build --target package   (or: cd build && cpack -G "DEB;TGZ")
set(CPACK_PACKAGE_NAME "tinyloop")
set(CPACK_PACKAGE_VENDOR "TinyLoop Workbench authors")
set(CPACK_PACKAGE_CONTACT "TinyLoop Workbench authors <tinyloop@example.org>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Runtime, command line and Qt workbench for weight-shared looped transformers")
set(CPACK_PACKAGE_DESCRIPTION
    "TinyLoop loads .tinyloop checkpoints of weight-shared looped transformers and scores, \
generates and speculates with them on the CPU (and CUDA where built). The Qt 6 workbench shows \
what a looped model does inside: the logit lens across loop depth, early exit, speculative \
acceptance and timing.")
# No Homepage: the project has no public web page or repository address yet, and Debian's
# Homepage field is optional; a placeholder address would send users nowhere.
set(CPACK_RESOURCE_FILE_LICENSE "${PROJECT_SOURCE_DIR}/LICENSE")
set(CPACK_PACKAGE_INSTALL_DIRECTORY "tinyloop")
set(CPACK_GENERATOR "DEB;TGZ")
set(CPACK_SOURCE_GENERATOR "TGZ")
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "__pycache__" "/resources/models/[^/]*/work/")
set(CPACK_PACKAGE_FILE_NAME "tinyloop-${PROJECT_VERSION}-${CMAKE_SYSTEM_NAME}-${CMAKE_SYSTEM_PROCESSOR}")
set(CPACK_STRIP_FILES ON)

# Debian: dependencies from the shared libraries the binaries link (dpkg-shlibdeps).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
if(NOT CPACK_DEBIAN_PACKAGE_DEPENDS)
  include(${CMAKE_CURRENT_LIST_DIR}/debian_depends.cmake)
endif()
# Debian's python3 looks in /usr/lib/python3/dist-packages, not in lib/python3.X/dist-packages
# (where a build configured for /usr/local puts the binding): the package moves it there.
set(CPACK_PRE_BUILD_SCRIPTS ${CMAKE_CURRENT_LIST_DIR}/debian_python_dir.cmake)

include(CPack)
