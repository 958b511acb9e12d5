# CPACK_PRE_BUILD_SCRIPTS (CPackConfig.cmake): runs on CPack's staging folder after the install
# and before the package is made. A .deb installs under /usr, where Debian's python3 imports
# from /usr/lib/python3/dist-packages only; a build configured for the default prefix
# /usr/local put the binding in lib/python3.X/dist-packages (right for `cmake --install`, where
# /usr/local/lib/python3.X/dist-packages is on the path). Move it for the DEB generator.
if(NOT CPACK_GENERATOR STREQUAL "DEB")
  return()
endif()
file(GLOB _tl_versioned LIST_DIRECTORIES true "${CPACK_TEMPORARY_DIRECTORY}/usr/lib/python3.*/dist-packages")
foreach(_tl_dir IN LISTS _tl_versioned)
  file(GLOB _tl_entries RELATIVE ${_tl_dir} "${_tl_dir}/*")
  file(MAKE_DIRECTORY "${CPACK_TEMPORARY_DIRECTORY}/usr/lib/python3/dist-packages")
  foreach(_tl_entry IN LISTS _tl_entries)
    file(RENAME "${_tl_dir}/${_tl_entry}" "${CPACK_TEMPORARY_DIRECTORY}/usr/lib/python3/dist-packages/${_tl_entry}")
  endforeach()
  get_filename_component(_tl_parent ${_tl_dir} DIRECTORY)
  file(REMOVE_RECURSE ${_tl_parent})
  message(STATUS "CPack: moved ${_tl_entries} to /usr/lib/python3/dist-packages (Debian's python3 path)")
endforeach()
