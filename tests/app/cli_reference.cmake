# app/cli/CLI.md must be exactly what `tinyloop help --markdown` prints (the program's own --help
# texts). On a difference: the diff, and the command that regenerates the file.
#   cmake -DCLI=path/to/tinyloop -DDOC=app/cli/CLI.md -DOUT=build/CLI.generated.md -P cli_reference.cmake
execute_process(COMMAND ${CLI} help --markdown RESULT_VARIABLE rc OUTPUT_VARIABLE generated ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tinyloop help --markdown exited ${rc}: ${err}")
endif()
file(WRITE ${OUT} "${generated}")
file(READ ${DOC} documented)
if(NOT generated STREQUAL documented)
  execute_process(COMMAND diff -u ${DOC} ${OUT} OUTPUT_VARIABLE difference)
  message(FATAL_ERROR "${DOC} differs from `tinyloop help --markdown`:\n${difference}\n"
                      "Regenerate it: ${CLI} help --markdown > ${DOC}")
endif()
message(STATUS "${DOC} is the program's help, byte for byte")
