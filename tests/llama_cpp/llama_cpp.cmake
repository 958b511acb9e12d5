# llama.cpp parity: `tinyloop export-gguf` files run in llama.cpp give our logits (and, for text,
# our token ids). llama.cpp is never fetched or built here: point TINYLOOP_LLAMA_CPP_DIR at a
# llama.cpp source tree built with CMake into its build/ folder (static libraries, CPU), e.g.
#   cmake -S /work/llama.cpp -B /work/llama.cpp/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
#         -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF && cmake --build /work/llama.cpp/build --target llama
# Without it the test llama_cpp.parity is reported Skipped, with the reason.
set(TINYLOOP_LLAMA_CPP_DIR "" CACHE PATH "a llama.cpp source tree built into its build/ folder (tests/llama_cpp)")
set(_tl_llama_libs
  ${TINYLOOP_LLAMA_CPP_DIR}/build/src/libllama.a
  ${TINYLOOP_LLAMA_CPP_DIR}/build/ggml/src/libggml.a
  ${TINYLOOP_LLAMA_CPP_DIR}/build/ggml/src/libggml-cpu.a
  ${TINYLOOP_LLAMA_CPP_DIR}/build/ggml/src/libggml-base.a)
set(_tl_llama_found FALSE)
if(TINYLOOP_LLAMA_CPP_DIR AND EXISTS ${TINYLOOP_LLAMA_CPP_DIR}/include/llama.h)
  set(_tl_llama_found TRUE)
  foreach(lib IN LISTS _tl_llama_libs)
    if(NOT EXISTS ${lib})
      set(_tl_llama_found FALSE)
    endif()
  endforeach()
endif()

if(_tl_llama_found)
  find_package(OpenMP COMPONENTS CXX)
  # llama_parity: the test's comparison; llama_cpu_time: the side-by-side speed tool (README,
  # Performance), timed in CPU seconds.
  foreach(tool llama_parity llama_cpu_time)
    add_executable(${tool} ${CMAKE_CURRENT_LIST_DIR}/${tool}.cpp)
    target_include_directories(${tool} PRIVATE ${TINYLOOP_LLAMA_CPP_DIR}/include ${TINYLOOP_LLAMA_CPP_DIR}/ggml/include)
    target_link_libraries(${tool} PRIVATE tinyloop ${_tl_llama_libs} Threads::Threads ${CMAKE_DL_LIBS})
    if(OpenMP_CXX_FOUND)
      target_link_libraries(${tool} PRIVATE OpenMP::OpenMP_CXX)
    endif()
  endforeach()
  add_dependencies(llama_parity tinyloop_cli)
  add_test(NAME llama_cpp.parity
    COMMAND ${CMAKE_COMMAND} -DCLI=$<TARGET_FILE:tinyloop_cli> -DPARITY=$<TARGET_FILE:llama_parity>
            -DROOT=${PROJECT_SOURCE_DIR} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/llama_cpp_parity
            -P ${CMAKE_CURRENT_LIST_DIR}/llama_parity.cmake)
  set_tests_properties(llama_cpp.parity PROPERTIES TIMEOUT 300)
else()
  add_test(NAME llama_cpp.parity
    COMMAND ${CMAKE_COMMAND} -E echo
      "SKIPPED: llama.cpp is not built here (TINYLOOP_LLAMA_CPP_DIR='${TINYLOOP_LLAMA_CPP_DIR}' has no include/llama.h and build/ static libraries; see tests/llama_cpp/llama_cpp.cmake)")
  set_tests_properties(llama_cpp.parity PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED:")
endif()
