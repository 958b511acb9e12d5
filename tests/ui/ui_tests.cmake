# Qt Test executables for the workbench, run offscreen under CTest. Included from ui/CMakeLists.txt.
find_package(Qt6 REQUIRED COMPONENTS Test)
enable_testing()
set(TL_UI_TESTS
  test_engine_host
  test_config_panel
  test_presets
  test_lens_heatmap
  test_session_export
  test_session_reopen
  test_config_refusals
  test_token_shading
  test_main_window
  test_plots
  test_analysis_views
  test_captions_glossary
  test_tour
  test_zoom
  test_screen_fit
  test_layout_audit

  test_plot_readability
  test_model_recommendation
  test_front_end_runs
  test_open_hf_folder)
set(TL_UI_TESTS_BUILT)
foreach(t IN LISTS TL_UI_TESTS)
  if(NOT EXISTS ${PROJECT_SOURCE_DIR}/tests/ui/${t}.cpp)
    continue()
  endif()
  list(APPEND TL_UI_TESTS_BUILT ${t})
  add_executable(${t} ${PROJECT_SOURCE_DIR}/tests/ui/${t}.cpp)
  target_link_libraries(${t} PRIVATE tinyloop_ui Qt6::Test)
  target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/tests/ui)
  target_compile_definitions(${t} PRIVATE TL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  set_target_properties(${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/ui)
  add_test(NAME ui.${t} COMMAND ${t})
  set_tests_properties(ui.${t} PROPERTIES
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;XDG_CONFIG_HOME=${PROJECT_BINARY_DIR}/tests/ui/xdg-${t}"
    TIMEOUT 300 LABELS ui
    # QSKIP exits 0: CTest shows the program as skipped when Qt Test's totals count a skip and
    # no failure (a failure still fails: the expression needs "0 failed").
    SKIP_REGULAR_EXPRESSION "Totals: [0-9]+ passed, 0 failed, [1-9][0-9]* skipped")
endforeach()
# test_front_end_runs runs the command line (tinyloop generate --json) beside the workbench.
if(TARGET test_front_end_runs)
  target_compile_definitions(test_front_end_runs PRIVATE TL_CLI="$<TARGET_FILE:tinyloop_cli>")
  add_dependencies(test_front_end_runs tinyloop_cli)
endif()
# test_open_hf_folder writes its Hugging Face folder with tests/import's fixture.
if(TARGET test_open_hf_folder)
  target_include_directories(test_open_hf_folder PRIVATE ${PROJECT_SOURCE_DIR}/tests/import)
endif()
add_custom_target(tinyloop_ui_tests DEPENDS ${TL_UI_TESTS_BUILT})

# The program itself (target tinyloop_workbench, app/workbench/CMakeLists.txt) with no display at
# all (not even QT_QPA_PLATFORM): workbench_headless.cmake.
add_test(NAME ui.workbench_headless
  COMMAND ${CMAKE_COMMAND} -DWORKBENCH=$<TARGET_FILE:tinyloop_workbench>
          -DMODEL=${PROJECT_SOURCE_DIR}/resources/models/tinyloop-kjv/model-q4.tinyloop
          -DOUT=${PROJECT_BINARY_DIR}/tests/ui/headless-screenshot.png
          -P ${PROJECT_SOURCE_DIR}/tests/ui/workbench_headless.cmake)
set_tests_properties(ui.workbench_headless PROPERTIES
  ENVIRONMENT "XDG_CONFIG_HOME=${PROJECT_BINARY_DIR}/tests/ui/xdg-headless"
  TIMEOUT 300 LABELS ui)

# --tour-step N opens step N of the tour, runs it and saves the window it points at; a step out of
# range is refused with the allowed range.
add_test(NAME ui.tour_step_cli
  COMMAND tinyloop_workbench --tour-step 3 --size 1280x720 --screenshot ${PROJECT_BINARY_DIR}/tests/ui/tour-step-3.png)
set_tests_properties(ui.tour_step_cli PROPERTIES
  ENVIRONMENT "QT_QPA_PLATFORM=offscreen;XDG_CONFIG_HOME=${PROJECT_BINARY_DIR}/tests/ui/xdg-tour-cli"
  PASS_REGULAR_EXPRESSION "tour step 3 of 5 \\(Early exit[^)]*\\) ran; screenshot: "
  TIMEOUT 300 LABELS ui)
add_test(NAME ui.tour_step_cli_refuses
  COMMAND tinyloop_workbench --tour-step 9 --screenshot ${PROJECT_BINARY_DIR}/tests/ui/tour-step-9.png)
set_tests_properties(ui.tour_step_cli_refuses PROPERTIES
  ENVIRONMENT "QT_QPA_PLATFORM=offscreen"
  PASS_REGULAR_EXPRESSION "--tour-step: 9 is outside \\[1, 5\\]"
  TIMEOUT 60 LABELS ui)

# No ui/ room includes a room above it (the floors: TL_UI_FLOORS in ui/CMakeLists.txt).
add_test(NAME ui.room_floors
  COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR}/ui "-DFLOORS=$<JOIN:${TL_UI_FLOORS},|>"
          -P ${PROJECT_SOURCE_DIR}/tests/ui/room_floors_check.cmake)
set_tests_properties(ui.room_floors PROPERTIES TIMEOUT 60 LABELS "ui;walls")
