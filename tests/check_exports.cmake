# What a library exports, against the public headers (CTest, `cmake -P`):
#   shared: the dynamic symbols it defines (nm -D) are exactly the functions the headers declare
#           with CAKE_API, nothing missing and nothing more (no internal helper, no toolkit
#           runtime symbol);
#   static: every global symbol it defines is cake_-prefixed (internal ones included: a static
#           library cannot hide them, but they must not clash with the user's) or local to a
#           C++ anonymous namespace (nvcc's kernels and helpers), the C++ personality
#           reference, or a sanitizer's instrumentation (__odr_asan.*, a sanitizer build).
# Variables: NM (the nm program), LIB (the library file), MODE (shared or static), HEADERS (a
# ;-separated list of public headers; shared only).
foreach(var NM LIB MODE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_exports: ${var} is not set")
  endif()
endforeach()

if(MODE STREQUAL "shared")
  set(nm_args -D --defined-only)
else()
  set(nm_args -g --defined-only)
endif()
execute_process(COMMAND ${NM} ${nm_args} ${LIB} OUTPUT_VARIABLE listing ERROR_VARIABLE nm_error
                RESULT_VARIABLE nm_result)
if(NOT nm_result EQUAL 0)
  message(FATAL_ERROR "check_exports: ${NM} ${nm_args} ${LIB} failed: ${nm_error}")
endif()

# "address type name" lines (static archives add "file.o:" headers and blank lines).
set(defined "")
string(REPLACE "\n" ";" lines "${listing}")
foreach(line IN LISTS lines)
  if(line MATCHES "^[0-9a-fA-F]* *[A-Za-z] ([^ ]+)$")
    list(APPEND defined "${CMAKE_MATCH_1}")
  endif()
endforeach()
list(REMOVE_DUPLICATES defined)
list(LENGTH defined count)
if(count EQUAL 0)
  message(FATAL_ERROR "check_exports: ${LIB} defines no global symbol (is nm's output format "
                      "the expected one?)\n${listing}")
endif()

if(MODE STREQUAL "shared")
  set(declared "")
  foreach(header IN LISTS HEADERS)
    file(READ "${header}" text)
    string(REGEX MATCHALL "CAKE_API[^;(]*[ *](cake_[A-Za-z0-9_]+)[ ]*\\(" decls "${text}")
    foreach(decl IN LISTS decls)
      string(REGEX REPLACE ".*[ *](cake_[A-Za-z0-9_]+)[ ]*\\($" "\\1" name "${decl}")
      list(APPEND declared "${name}")
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES declared)
  set(extra ${defined})
  list(REMOVE_ITEM extra ${declared})
  set(missing ${declared})
  list(REMOVE_ITEM missing ${defined})
  list(LENGTH declared num_declared)
  if(extra OR missing)
    list(JOIN extra "\n  " extra_text)
    list(JOIN missing "\n  " missing_text)
    message(FATAL_ERROR "check_exports: ${LIB} does not export exactly the ${num_declared} "
                        "functions of ${HEADERS}\nexported but not declared:\n  ${extra_text}\n"
                        "declared but not exported:\n  ${missing_text}")
  endif()
  message(STATUS "check_exports: ${LIB} exports exactly the ${num_declared} declared functions")
else()
  set(bad "")
  foreach(name IN LISTS defined)
    if(NOT name MATCHES "^cake_" AND NOT name MATCHES "_GLOBAL__N_" AND
       NOT name STREQUAL "DW.ref.__gxx_personality_v0" AND
       NOT name MATCHES "^__(odr_asan|asan|ubsan|sancov)")
      list(APPEND bad "${name}")
    endif()
  endforeach()
  if(bad)
    list(JOIN bad "\n  " bad_text)
    message(FATAL_ERROR "check_exports: ${LIB} defines global symbols outside cake_:\n  "
                        "${bad_text}")
  endif()
  message(STATUS "check_exports: ${LIB}: ${count} global symbols, all cake_ (or anonymous "
                 "namespace)")
endif()
