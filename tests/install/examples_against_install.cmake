# Installs the build tree BUILD into a fresh PREFIX, builds SOURCE/examples on its own against it
# (find_package(attnkit), attnkit::attnkit) with the same GENERATOR and CXX compiler, and runs each
# example (each checks its outputs against the float64 golden and exits 1 on a mismatch).
# Run by the CTest test install.ExamplesBuildAgainstTheInstalledPackage (tests/CMakeLists.txt).
foreach(var BUILD SOURCE PREFIX GENERATOR CXX)
  if("${${var}}" STREQUAL "")
    message(FATAL_ERROR "examples_against_install.cmake: pass -D${var}=...")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " shown "${ARGN}")
    message(FATAL_ERROR "${what} failed (exit ${rc}): ${shown}\n--- stdout:\n${out}\n--- stderr:\n${err}")
  endif()
  message(STATUS "${what}: ok")
endfunction()

file(REMOVE_RECURSE "${PREFIX}")
run("install" ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${PREFIX}/usr")
file(GLOB_RECURSE config "${PREFIX}/usr/*/attnkitConfig.cmake")
if(NOT config)
  message(FATAL_ERROR "no attnkitConfig.cmake under ${PREFIX}/usr")
endif()

set(launcher "")
if(NOT "${LAUNCHER}" STREQUAL "")
  set(launcher "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}")
endif()
run("configure the examples against the install" ${CMAKE_COMMAND} -S "${SOURCE}/examples" -B "${PREFIX}/examples"
    -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_COMPILER=${CXX}" ${launcher}
    "-DCMAKE_PREFIX_PATH=${PREFIX}/usr")
run("build the examples" ${CMAKE_COMMAND} --build "${PREFIX}/examples")
file(GLOB examples "${SOURCE}/examples/*.cpp")
foreach(src IN LISTS examples)
  get_filename_component(name "${src}" NAME_WE)
  run("example_${name}" "${PREFIX}/examples/example_${name}")
endforeach()
file(REMOVE_RECURSE "${PREFIX}")
