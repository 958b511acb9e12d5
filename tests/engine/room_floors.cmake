# The floors of engine/src, lowest first (docs/ARCHITECTURE.md, "arrows point down only"): a
# room may include its own headers and those of rooms on LOWER floors, never a room on its own
# floor or above. This list is the one place the order is written; a new room gets a floor here.
#   text, json        tokenizers, UTF-8, regex; the config/result codec (public types only)
#   grammar, model    constraints over text; the Model, its loader and quantization
#   forward, import   the back ends (ops, executors, the one forward, KV caches); HF import
#   scoring           scoring, the lens, escalation (over the executor)
#   decode            the decode loop, sampling, stops, beams, batch, caches' entry points
#   speculation       chain, tree and draft-model speculation (over decode's pieces)
set(TL_ENGINE_FLOORS
  "text|json"
  "grammar|model"
  "forward|import"
  "scoring"
  "decode"
  "speculation")

# cmake -P entry (MODE=check, ROOT=the repository): fails naming every #include of a room on
# the includer's floor or above, and every room directory missing from the list.
if(CMAKE_SCRIPT_MODE_FILE AND MODE STREQUAL "check")
  set(floor 0)
  foreach(rooms IN LISTS TL_ENGINE_FLOORS)
    string(REPLACE "|" ";" rooms "${rooms}")
    foreach(r IN LISTS rooms)
      set(floor_of_${r} ${floor})
    endforeach()
    math(EXPR floor "${floor} + 1")
  endforeach()
  set(bad "")
  file(GLOB dirs LIST_DIRECTORIES true ${ROOT}/engine/src/*)
  foreach(dir IN LISTS dirs)
    if(NOT IS_DIRECTORY ${dir})
      continue()
    endif()
    get_filename_component(room ${dir} NAME)
    if(NOT DEFINED floor_of_${room})
      string(APPEND bad "  engine/src/${room}: a room without a floor (add it to TL_ENGINE_FLOORS)\n")
      continue()
    endif()
    file(GLOB_RECURSE files ${dir}/*.h ${dir}/*.cpp)
    foreach(f IN LISTS files)
      file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[a-z_]+/")
      foreach(line IN LISTS lines)
        string(REGEX MATCH "\"([a-z_]+)/" _ "${line}")
        set(target ${CMAKE_MATCH_1})
        if(target STREQUAL room OR NOT DEFINED floor_of_${target})
          continue()  # its own room, or outside engine/src (tinyloop/, kernels/)
        endif()
        if(NOT floor_of_${target} LESS floor_of_${room})
          file(RELATIVE_PATH rel ${ROOT} ${f})
          string(APPEND bad "  ${rel} (${room}, floor ${floor_of_${room}}): ${line} (${target}, floor ${floor_of_${target}})\n")
        endif()
      endforeach()
    endforeach()
  endforeach()
  if(bad)
    message(FATAL_ERROR "engine/src rooms include a room on their floor or above (tests/engine/room_floors.cmake):\n${bad}")
  endif()
  message(STATUS "every include between engine/src rooms points to a lower floor")
endif()
