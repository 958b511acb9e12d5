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
# The host-side checks of the CUDA back end (device helpers against the CPU kernels, the capture
# rules on a strict fake context, the VRAM accounting, the greedy agreement rule): plain C++,
# they run in every build, GPU or not.
tl_add_cuda_gtest(test_cuda_host ${CMAKE_CURRENT_LIST_DIR}/test_cuda_host.cpp)
if(TINYLOOP_HAVE_CUDA)
  file(GLOB TL_CUDA_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_cuda_*.cpp)
  list(REMOVE_ITEM TL_CUDA_TEST_SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_fallback.cpp
       ${CMAKE_CURRENT_LIST_DIR}/test_cuda_host.cpp)
  foreach(src IN LISTS TL_CUDA_TEST_SOURCES)
    get_filename_component(n ${src} NAME_WE)
    tl_add_cuda_gtest(${n} ${src})
  endforeach()
endif()

# The CUDA forward's benchmark program (not a test): kernels/cuda/check_on_gpu.sh runs it.
if(TINYLOOP_HAVE_CUDA)
  add_executable(bench_cuda ${CMAKE_CURRENT_LIST_DIR}/bench_cuda.cpp)
  target_link_libraries(bench_cuda PRIVATE tinyloop_internals_for_tests)
  # The ptxas audit: no spill and no stack frame in the hot kernels, read from the build's own
  # ptxas -v reports (kernels/CMakeLists.txt keeps them in TL_PTXAS_LOG_DIR).
  add_test(NAME cuda_ptxas_audit COMMAND bash ${PROJECT_SOURCE_DIR}/kernels/cuda/ptxas_audit.sh ${TL_PTXAS_LOG_DIR})
  set_tests_properties(cuda_ptxas_audit PROPERTIES LABELS "cuda" TIMEOUT 60)
endif()
# The device check script rehearsed end to end with its device part stubbed (TL_DEVICE_STUB=1):
# the log, the overall timeout, the per-binary groups and the table, in seconds, on any machine.
add_test(NAME cuda_device_check_rehearsal
         COMMAND bash ${PROJECT_SOURCE_DIR}/kernels/cuda/check_on_gpu.sh --rehearse ${PROJECT_BINARY_DIR}/cuda-rehearsal)
set_tests_properties(cuda_device_check_rehearsal PROPERTIES LABELS "cuda" TIMEOUT 120)
