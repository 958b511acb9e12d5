# `tinyloop import` (Hugging Face checkpoints of Ouro and Huginn-0125): the safetensors reader and
# the hostile-folder refusals (GoogleTests).
file(GLOB TL_IMPORT_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_*.cpp)
foreach(src IN LISTS TL_IMPORT_TEST_SOURCES)
  get_filename_component(n ${src} NAME_WE)
  tl_add_gtest(${n} ${src})
endforeach()
