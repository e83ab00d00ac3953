# Installs the built laneq into a scratch prefix, then configures, builds and runs
# tests/consumer against it with find_package(laneq CONFIG REQUIRED), with the README's quick
# start beside it.
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}")
  endif()
endfunction()
# The README's quick start, as a user would paste it: the first ```cpp block after its heading.
file(READ "${LANEQ_SOURCE_DIR}/README.md" readme)
string(FIND "${readme}" "## Quick start" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md has no '## Quick start' section")
endif()
string(SUBSTRING "${readme}" ${at} -1 readme)
string(FIND "${readme}" "```cpp\n" begin)
math(EXPR begin "${begin} + 7")
string(SUBSTRING "${readme}" ${begin} -1 readme)
string(FIND "${readme}" "```" end)
string(SUBSTRING "${readme}" 0 ${end} quickstart)
file(WRITE "${WORK_DIR}/quickstart.cpp" "${quickstart}")

step(${CMAKE_COMMAND} --install "${LANEQ_BINARY_DIR}" --prefix "${prefix}")
step(${CMAKE_COMMAND} -S "${LANEQ_SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/build"
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
     -DLANEQ_QUICKSTART=${WORK_DIR}/quickstart.cpp)
step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
step("${WORK_DIR}/build/consumer")
step("${WORK_DIR}/build/quickstart")
