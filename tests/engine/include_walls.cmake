# The include walls (ARCHITECTURE.md, "arrows point down only"): no front end has the engine's
# internals or the kernels on its include path. Included from tests/CMakeLists.txt.
#
# include_wall.<target>: compiles, with exactly the include directories the front end's target
# gets, one file that includes the public header (must compile) and one file per forbidden
# header (engine/src's "decode/emit.h", "kernels/kernels.h", "engine/src/decode/emit.h"), each of
# which must fail with "No such file". include_wall.sources: no source under app/, ui/,
# engine/python/ or tools/ names engine/src or kernels/ in an #include (a relative path included).
function(tl_add_include_wall_test front_end)
  add_test(NAME include_wall.${front_end}
    COMMAND ${CMAKE_COMMAND} -DMODE=compile -DCXX=${CMAKE_CXX_COMPILER}
      "-DINCLUDES=$<JOIN:$<TARGET_PROPERTY:${front_end},INCLUDE_DIRECTORIES>,|>"
      "-DIMPLICIT=${CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES}"
      -DWORK=${PROJECT_BINARY_DIR}/include_wall/${front_end}
      -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/include_wall_check.cmake)
  set_tests_properties(include_wall.${front_end} PROPERTIES TIMEOUT 120 LABELS walls)
endfunction()

tl_add_include_wall_test(tinyloop_cli)
tl_add_include_wall_test(tinyloop_analysis)
if(TARGET tinyloop_soak)
  tl_add_include_wall_test(tinyloop_soak)
endif()
if(TARGET tinyloop_ui)
  tl_add_include_wall_test(tinyloop_ui)
endif()
# tinyloop_py is defined after tests/: engine/python/CMakeLists.txt calls tl_add_include_wall_test.

add_test(NAME include_wall.sources
  COMMAND ${CMAKE_COMMAND} -DMODE=sources -DROOT=${PROJECT_SOURCE_DIR} -P ${CMAKE_CURRENT_LIST_DIR}/include_wall_check.cmake)
set_tests_properties(include_wall.sources PROPERTIES TIMEOUT 60 LABELS walls)
