# Hardening (issue 9), included at the end of tests/CMakeLists.txt so that tl_add_gtest exists:
# the bad-input, corrupt-file, thread and fuzz-regression GoogleTests (always built with the
# tests), the soak program tools/soak (target tinyloop_soak, not a test) and, with
# -DTINYLOOP_FUZZ=ON, the libFuzzer targets in tests/fuzz.
file(GLOB TL_HARDENING_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_*.cpp)
foreach(src IN LISTS TL_HARDENING_SOURCES)
  get_filename_component(n ${src} NAME_WE)
  tl_add_gtest(${n} ${src})
endforeach()

if(NOT TARGET tinyloop_soak)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tools/soak ${PROJECT_BINARY_DIR}/tools/soak)
endif()

if(TINYLOOP_FUZZ)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/fuzz ${PROJECT_BINARY_DIR}/tests/fuzz)
endif()
