# memorytestapp-win runs to its end under wine (or Windows) and prints its ground truth:
# the numbers the ETW sessions are checked against on a real machine.
# cmake -DEMU=<wine or ""> -DEXE=<memorytestapp-win.exe> -DDIR=<scratch> -P check-memorytestapp.cmake
set(run ${EXE})
if(EMU)
  set(run ${EMU} ${EXE})
endif()
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
file(WRITE ${DIR}/go.txt "\n")
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${run} --no-pause INPUT_FILE ${DIR}/go.txt OUTPUT_FILE ${DIR}/out.txt
                ERROR_FILE ${DIR}/err.txt RESULT_VARIABLE rc TIMEOUT 120)
file(READ ${DIR}/out.txt out)
file(READ ${DIR}/err.txt err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "memorytestapp-win: exit ${rc}: ${err}\n${out}")
endif()
foreach(want "\"ready\":true" "\"at\":\"mid_before\",\"step\":580" "\"at\":\"spikes_before\",\"step\":760"
        "\"site\":\"InnerLoopOperation\",\"count\":1200,\"bytes\":48000,\"live_count\":1200"
        "\"site\":\"main\",\"count\":2,\"bytes\":20971520"
        "\"site\":\"ManipulateTemporaryBuffer\",\"count\":10,\"bytes\":104857600"
        "\"last_four_spikes\":{\"count\":4,\"size\":41943040")
  string(FIND "${out}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "memorytestapp-win: no ${want} in:\n${out}")
  endif()
endforeach()
# The spikes last the 10 ms the app holds them (at least), in order.
string(FIND "${out}" "\"spikes_ns\":[" at)
string(SUBSTRING "${out}" ${at} -1 tail)
string(REGEX MATCHALL "\\[[0-9]+,[0-9]+\\]" spikes "${tail}")
list(LENGTH spikes n)
if(NOT n EQUAL 10)
  message(FATAL_ERROR "memorytestapp-win: ${n} spikes in:\n${out}")
endif()
foreach(s ${spikes})
  string(REGEX MATCH "([0-9]+),([0-9]+)" x "${s}")
  math(EXPR held "${CMAKE_MATCH_2} - ${CMAKE_MATCH_1}")
  if(held LESS 9000000)
    message(FATAL_ERROR "memorytestapp-win: a spike held ${held} ns, under 10 ms")
  endif()
endforeach()
message(STATUS "memorytestapp-win: ground truth as expected")
