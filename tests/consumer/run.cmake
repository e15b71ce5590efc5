# Configures, builds and runs one consumer project from scratch; ctest calls it (see
# tests/CMakeLists.txt), and it can be run by hand:
#   cmake -DSOURCE_DIR=tests/consumer/find_package -DBINARY_DIR=/tmp/c \
#         -DPREFIX_PATH=build/_install -P tests/consumer/run.cmake
# Inputs: SOURCE_DIR, BINARY_DIR (wiped first), and optionally PREFIX_PATH, CHORUS_SOURCE_DIR,
# GENERATOR, CXX_COMPILER, BUILD_TYPE.
cmake_minimum_required(VERSION 3.25)

foreach(required SOURCE_DIR BINARY_DIR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "run.cmake: -D${required}=... is required")
  endif()
endforeach()

set(args -S ${SOURCE_DIR} -B ${BINARY_DIR})
if(DEFINED GENERATOR)
  list(APPEND args -G ${GENERATOR})
endif()
if(DEFINED CXX_COMPILER)
  list(APPEND args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
if(DEFINED BUILD_TYPE)
  list(APPEND args -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
endif()
if(DEFINED PREFIX_PATH)
  list(APPEND args -DCMAKE_PREFIX_PATH=${PREFIX_PATH} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
endif()
if(DEFINED CHORUS_SOURCE_DIR)
  list(APPEND args -DCHORUS_SOURCE_DIR=${CHORUS_SOURCE_DIR})
endif()

file(REMOVE_RECURSE ${BINARY_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} ${args} COMMAND_ERROR_IS_FATAL ANY)
if(DEFINED PREFIX_PATH)
  # A chorus installed elsewhere on the machine must not stand in for the one under test.
  file(STRINGS ${BINARY_DIR}/CMakeCache.txt found REGEX "^chorus_DIR:")
  get_filename_component(prefix "${PREFIX_PATH}" ABSOLUTE)
  string(FIND "${found}" "=${prefix}/" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "found chorus outside ${prefix}: ${found}")
  endif()
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} --parallel 2
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${BINARY_DIR}/chorus_consumer COMMAND_ERROR_IS_FATAL ANY)
