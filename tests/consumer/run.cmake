# Configures, builds and runs one consumer project from scratch; ctest calls it (see
# tests/CMakeLists.txt), and it can be run by hand:
#   cmake -DSOURCE_DIR=tests/consumer/find_package -DBINARY_DIR=/tmp/c \
#         -DPREFIX_PATH=build/_install -P tests/consumer/run.cmake
# Inputs: SOURCE_DIR, BINARY_DIR (wiped first), and optionally PREFIX_PATH, CHORUS_SOURCE_DIR,
# GENERATOR, CXX_COMPILER, BUILD_TYPE, and (comma-separated lists):
#   OPTIONS          more -D settings for the consumer's configure
#   PROGRAMS         what to run after the build (default chorus_consumer)
#   SHARED_PROGRAMS  those of PROGRAMS that must load libchorus*.so.N (readelf), from LIB_DIR
#                    if given (ldd), and must not need libsodium themselves; the others must
#                    not need any libchorus*.so
#   RUN_WITH         a launcher to run each program under (mpirun ...)
# and CONFIGURE_ERROR, a regular expression: the configure must then fail with a message that
# matches it, and nothing is built.
cmake_minimum_required(VERSION 3.25)

foreach(required SOURCE_DIR BINARY_DIR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "run.cmake: -D${required}=... is required")
  endif()
endforeach()
foreach(list OPTIONS PROGRAMS SHARED_PROGRAMS RUN_WITH)
  string(REPLACE "," ";" ${list} "${${list}}")
endforeach()
if(NOT PROGRAMS)
  set(PROGRAMS chorus_consumer)
endif()

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
list(APPEND args ${OPTIONS})

file(REMOVE_RECURSE ${BINARY_DIR})
if(DEFINED CONFIGURE_ERROR)
  execute_process(COMMAND ${CMAKE_COMMAND} ${args} RESULT_VARIABLE failed OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT failed)
    message(FATAL_ERROR "the configure succeeded, but should have failed with "
                        "'${CONFIGURE_ERROR}':\n${out}${err}")
  endif()
  if(NOT "${out}${err}" MATCHES "${CONFIGURE_ERROR}")
    message(FATAL_ERROR "the configure failed without saying '${CONFIGURE_ERROR}':\n${out}${err}")
  endif()
  message(STATUS "the configure failed as it should:\n${err}")
  return()
endif()
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

foreach(program IN LISTS PROGRAMS)
  set(path ${BINARY_DIR}/${program})
  # What the program needs at run time is what tells a static link from a shared one.
  execute_process(COMMAND readelf -d ${path} OUTPUT_VARIABLE dynamic COMMAND_ERROR_IS_FATAL ANY)
  string(REGEX MATCHALL "NEEDED\\)[^\n]*\\[[^]]*\\]" needed "${dynamic}")
  string(REGEX MATCHALL "libchorus[_a-z]*\\.so[.0-9]*" needs_chorus "${needed}")
  if(program IN_LIST SHARED_PROGRAMS)
    # libchorus_mpi.so holds the core too (CMakeLists.txt): one of the two, never both.
    if(NOT needs_chorus MATCHES "libchorus(_mpi)?\\.so\\.[0-9]")
      message(FATAL_ERROR "${program} should load libchorus.so.N; it needs: ${needed}")
    endif()
    if(needs_chorus MATCHES "libchorus\\.so" AND needs_chorus MATCHES "libchorus_mpi\\.so")
      message(FATAL_ERROR "${program} loads both libchorus.so and libchorus_mpi.so: ${needed}")
    endif()
    if(needed MATCHES "libsodium")
      message(FATAL_ERROR "${program} needs libsodium itself, but the shared chorus keeps it "
                          "private: ${needed}")
    endif()
    if(DEFINED LIB_DIR)
      execute_process(COMMAND ldd ${path} OUTPUT_VARIABLE resolved COMMAND_ERROR_IS_FATAL ANY)
      get_filename_component(lib_dir "${LIB_DIR}" ABSOLUTE)
      string(REGEX MATCH "libchorus(_mpi)?\\.so\\.[0-9.]+ => [^ ]+" loads "${resolved}")
      string(FIND "${loads}" "=> ${lib_dir}/libchorus" at)
      if(at EQUAL -1)
        message(FATAL_ERROR "${program} does not load libchorus from ${lib_dir}:\n${resolved}")
      endif()
    endif()
    message(STATUS "${program}: loads ${needs_chorus}")
  elseif(needs_chorus)
    message(FATAL_ERROR "${program} should link chorus statically; it needs ${needs_chorus}")
  endif()
  execute_process(COMMAND ${RUN_WITH} ${path} COMMAND_ERROR_IS_FATAL ANY)
endforeach()
