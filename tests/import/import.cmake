# `tinyloop import` (Hugging Face checkpoints of Ouro and Huginn-0125): the safetensors reader and
# the hostile-folder refusals (GoogleTests).
file(GLOB TL_IMPORT_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_*.cpp)
foreach(src IN LISTS TL_IMPORT_TEST_SOURCES)
  get_filename_component(n ${src} NAME_WE)
  tl_add_gtest(${n} ${src})
endforeach()

# The tensor-by-tensor check of imported folders (import.tensors_exact) runs in the Python
# test venv, so engine/python/CMakeLists.txt registers it beside the other Python tests (a build
# without the binding, like the sanitizer build, has no venv).

# The published modeling code as the peer (tests/import/test_looped_peer.py): Ouro's
# modeling_ouro.py and Huginn's raven_modeling_minimal.py, kept outside the repository like
# llama.cpp, in TINYLOOP_LOOPED_PEER_DIR (layout in tests/import/looped_peer.py). Without it
# import.looped_peer is reported Skipped, with the reason.
set(TINYLOOP_LOOPED_PEER_DIR "" CACHE PATH "the published code of Ouro and Huginn, and transformers 4.54.x (tests/import/looped_peer.py)")
if(TINYLOOP_LOOPED_PEER_DIR AND EXISTS ${TINYLOOP_LOOPED_PEER_DIR}/ouro/modeling_ouro.py
   AND EXISTS ${TINYLOOP_LOOPED_PEER_DIR}/huginn/raven_modeling_minimal.py)
  add_test(NAME import.looped_peer
    COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${CMAKE_BINARY_DIR}/python TINYLOOP_CLI=$<TARGET_FILE:tinyloop_cli>
      TINYLOOP_LOOPED_PEER_DIR=${TINYLOOP_LOOPED_PEER_DIR}
      ${CMAKE_BINARY_DIR}/pyenv/bin/python -m pytest ${CMAKE_CURRENT_LIST_DIR}/test_looped_peer.py -q -s
      -p no:cacheprovider --basetemp=${CMAKE_BINARY_DIR}/tests/looped-peer-tmp
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(import.looped_peer PROPERTIES TIMEOUT 900)
else()
  add_test(NAME import.looped_peer
    COMMAND ${CMAKE_COMMAND} -E echo
      "SKIPPED: the published code of Ouro and Huginn is not here (TINYLOOP_LOOPED_PEER_DIR='${TINYLOOP_LOOPED_PEER_DIR}' has no ouro/modeling_ouro.py and huginn/raven_modeling_minimal.py; see tests/import/looped_peer.py)")
  set_tests_properties(import.looped_peer PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED:")
endif()

# tools/bench_fullsize.py (the README's full-size speed rows against the published code) at a tiny
# shape, so that it keeps running: the engine side always; the peer side with
# TINYLOOP_LOOPED_PEER_DIR, else the test reports Skipped once the engine side passed. It runs in
# the Python test venv: a build without the binding (the sanitizer build) has none, and no such test.
if(TINYLOOP_BUILD_PYTHON)
  add_test(NAME import.bench_fullsize
    COMMAND ${CMAKE_COMMAND} -E env TINYLOOP_LOOPED_PEER_DIR=${TINYLOOP_LOOPED_PEER_DIR}
      ${CMAKE_BINARY_DIR}/pyenv/bin/python ${CMAKE_CURRENT_LIST_DIR}/bench_fullsize_tiny.py
      $<TARGET_FILE:tinyloop_cli> ${CMAKE_BINARY_DIR}/tests/bench-fullsize-tmp
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(import.bench_fullsize PROPERTIES TIMEOUT 1200 SKIP_REGULAR_EXPRESSION "SKIPPED:")
endif()
