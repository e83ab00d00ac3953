# Installs the built laneq into a scratch prefix, then configures, builds and runs
# tests/consumer against it with find_package(laneq CONFIG REQUIRED).
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}")
  endif()
endfunction()
step(${CMAKE_COMMAND} --install "${LANEQ_BINARY_DIR}" --prefix "${prefix}")
step(${CMAKE_COMMAND} -S "${LANEQ_SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/build"
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
step("${WORK_DIR}/build/consumer")
