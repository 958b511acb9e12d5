# tests/cuda (issue 6): the CUDA back end's tests. Included from tests/CMakeLists.txt.
#
# test_cuda_fallback runs in every build (it checks what auto/cuda/cpu do on this machine).
# The device tests are built when the CUDA back end is; without a device each reports
# "[  SKIPPED ]", which SKIP_REGULAR_EXPRESSION turns into CTest's "Skipped" (not "Passed").
function(tl_add_cuda_gtest name src)
  add_executable(${name} ${src} ${ARGN})
  target_link_libraries(${name} PRIVATE tinyloop_internals_for_tests GTest::gtest GTest::gtest_main nlohmann_json::nlohmann_json)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE TL_SOURCE_DIR="${PROJECT_SOURCE_DIR}" TL_BINARY_DIR="${PROJECT_BINARY_DIR}" TL_CLI_PATH="$<TARGET_FILE:tinyloop_cli>")
  add_dependencies(${name} tinyloop_cli)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600 LABELS cuda
                       SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()

tl_add_cuda_gtest(test_cuda_fallback ${CMAKE_CURRENT_LIST_DIR}/test_cuda_fallback.cpp)
if(TINYLOOP_HAVE_CUDA)
  file(GLOB TL_CUDA_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_cuda_*.cpp)
  list(REMOVE_ITEM TL_CUDA_TEST_SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_fallback.cpp)
  foreach(src IN LISTS TL_CUDA_TEST_SOURCES)
    get_filename_component(n ${src} NAME_WE)
    tl_add_cuda_gtest(${n} ${src})
  endforeach()
endif()

# The CUDA forward's benchmark program (not a test): kernels/cuda/check_on_gpu.sh runs it.
if(TINYLOOP_HAVE_CUDA)
  add_executable(bench_cuda ${CMAKE_CURRENT_LIST_DIR}/bench_cuda.cpp)
  target_link_libraries(bench_cuda PRIVATE tinyloop_internals_for_tests)
endif()
