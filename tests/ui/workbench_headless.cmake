# The workbench program run without a display (DISPLAY, WAYLAND_DISPLAY and QT_QPA_PLATFORM
# unset), as on a server or in CI: --help, --version and a --screenshot run work by themselves
# (offscreen); a window run is refused with exit 2 and a message instead of Qt's abort.
#   cmake -DWORKBENCH=... -DMODEL=... -DOUT=... -P workbench_headless.cmake
set(headless ${CMAKE_COMMAND} -E env --unset=DISPLAY --unset=WAYLAND_DISPLAY --unset=QT_QPA_PLATFORM)

function(expect what rc_want pattern)
  execute_process(COMMAND ${headless} ${WORKBENCH} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc STREQUAL "${rc_want}")
    message(FATAL_ERROR "${what}: exit status ${rc}, expected ${rc_want}\nstdout: ${out}\nstderr: ${err}")
  endif()
  if(NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: output does not match '${pattern}'\nstdout: ${out}\nstderr: ${err}")
  endif()
  message(STATUS "${what}: exit ${rc} as expected")
endfunction()

expect("--help" 0 "Usage: .*--screenshot" --help)
expect("--version" 0 "[0-9]+\\.[0-9]+" --version)
expect("a window run" 2 "no display" ${MODEL})
file(REMOVE ${OUT})
expect("--screenshot" 0 "screenshot: " ${MODEL} --screenshot ${OUT} --size 800x600)
if(NOT EXISTS ${OUT})
  message(FATAL_ERROR "--screenshot: ${OUT} was not written")
endif()

# A session saved after a run opens again without running (--session is taken before Qt, which
# would read "-session" as its own session-management option); a bad one is refused with the field.
get_filename_component(dir ${OUT} DIRECTORY)
file(REMOVE ${dir}/headless-session.json)
expect("--save-session" 0 "session: .*headless-session.json" ${MODEL} --demo-run "In the beginning" --max-tokens 4
       --save-session ${dir}/headless-session.json --screenshot ${dir}/headless-run.png --size 800x600)
expect("--session" 0 "screenshot: " --session ${dir}/headless-session.json --screenshot ${dir}/headless-session.png
       --size 800x600)
file(WRITE ${dir}/headless-bad-session.json "{\"format\": \"something else\"}")
expect("a bad --session" 1 "session not opened: headless-bad-session.json: session.format: 'something else'"
       --session ${dir}/headless-bad-session.json --screenshot ${dir}/headless-bad.png)
# A bad --zoom, --theme or --size is refused before any window, naming the option and the range.
expect("--zoom out of range" 2 "--zoom: '9' is not a zoom factor; allowed: a number from 0.5 to 3" ${MODEL} --zoom 9 --screenshot ${OUT})
expect("--theme unknown" 2 "--theme: 'blue' is not a theme; allowed: light, dark" ${MODEL} --theme blue --screenshot ${OUT})
expect("--size malformed" 2 "--size: '12x' is not a window size" ${MODEL} --size 12x --screenshot ${OUT})
