# Read by CTest (not CMake) before it runs tests: adds one CTest test per
# gtest suite of a test executable, and one per case that carries labels of
# its own (labels.cmake). tests/CMakeLists.txt writes, for each executable, a
# file that includes this one and calls fsdp_add_suite_tests.
#
# [Note: a CTest test per suite]
# Every test process loads LibTorch and its ~290 shared libraries, about a
# second before the first case runs. As a CTest test per case, the 700-odd
# cases spent over 11 minutes of CPU on that alone, on CI's 2 cores; one per
# suite spends it ~120 times. A suite runs its cases in one process, in
# their order, so a case that crashes takes the rest of its suite with it
# (its output names the case), and cases share the process's state: a case
# that needs a fresh process runs alone (labels.cmake).
include_guard(GLOBAL)

# labels.cmake's lines: `case` runs as a CTest test of its own, carrying the
# labels that follow it besides its executable's.
function(fsdp_case_alone case)
  set_property(GLOBAL PROPERTY "FSDP_CASE_ALONE_${case}" TRUE)
  set_property(GLOBAL PROPERTY "FSDP_CASE_LABELS_${case}" ${ARGN})
  set_property(GLOBAL APPEND PROPERTY FSDP_LABELLED_CASES "${case}")
endfunction()
include(${CMAKE_CURRENT_LIST_DIR}/labels.cmake)

# The suites and cases of `executable --gtest_list_tests`, as lines
# "Suite.Case" in `listing`. Listed again only when the executable is newer.
function(fsdp_list_cases executable listing)
  if(EXISTS "${listing}" AND NOT "${executable}" IS_NEWER_THAN "${listing}")
    return()
  endif()
  execute_process(COMMAND "${executable}" --gtest_list_tests
    OUTPUT_VARIABLE output RESULT_VARIABLE status TIMEOUT 60)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${executable} --gtest_list_tests exited with '${status}'; "
                        "run it by hand to see why its tests cannot be listed")
  endif()
  string(REPLACE "\n" ";" lines "${output}")
  set(cases "")
  set(suite "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE " *#.*" "" line "${line}")  # "  # GetParam() = ..."
    if(line MATCHES "^([^ ].*\\.)$")
      set(suite "${CMAKE_MATCH_1}")
    elseif(line MATCHES "^  ([^ ]+)$" AND suite)
      list(APPEND cases "${suite}${CMAKE_MATCH_1}")
    endif()
  endforeach()
  string(REPLACE ";" "\n" cases "${cases}")
  file(WRITE "${listing}" "${cases}\n")
endfunction()

# One test per suite of `executable`, named by the suite, labelled `labels`;
# a case labels.cmake names is a test of its own, with its labels added.
function(fsdp_add_suite_tests target executable labels listing working_directory)
  if(NOT EXISTS "${executable}")  # not built: say so as gtest_discover_tests does
    add_test("${target}_NOT_BUILT" "${target}_NOT_BUILT")
    set_property(GLOBAL PROPERTY FSDP_SOME_TEST_NOT_BUILT TRUE)
    return()
  endif()
  fsdp_list_cases("${executable}" "${listing}")
  file(STRINGS "${listing}" cases)
  set(suites "")
  foreach(case IN LISTS cases)
    string(REGEX REPLACE "\\.[^.]*$" "" suite "${case}")
    get_property(alone GLOBAL PROPERTY "FSDP_CASE_ALONE_${case}")
    if(alone)
      set_property(GLOBAL APPEND PROPERTY FSDP_LABELLED_CASES_FOUND "${case}")
      list(APPEND "excluded_${suite}" "${case}")
      get_property(own_labels GLOBAL PROPERTY "FSDP_CASE_LABELS_${case}")
      set(case_labels ${labels} ${own_labels})
      fsdp_add_test("${case}" "${executable}" "${case}" "${case_labels}" "${working_directory}")
    else()
      list(APPEND suites "${suite}")  # a suite whose cases all run alone has no test
    endif()
  endforeach()
  list(REMOVE_DUPLICATES suites)
  foreach(suite IN LISTS suites)
    set(filter "${suite}.*")
    if(excluded_${suite})
      string(REPLACE ";" ":" excluded "${excluded_${suite}}")
      string(APPEND filter "-${excluded}")
    endif()
    fsdp_add_test("${suite}" "${executable}" "${filter}" "${labels}" "${working_directory}")
  endforeach()
endfunction()

# A test named `test` running `executable`'s cases that `filter` selects. Two
# executables with a suite of the same name would make two tests of one name,
# which CTest would run as one: refuse them.
function(fsdp_add_test test executable filter labels working_directory)
  get_property(defined_by GLOBAL PROPERTY "FSDP_TEST_${test}")
  if(defined_by)
    message(FATAL_ERROR "the gtest suite '${test}' is in both ${defined_by} and ${executable}; "
                        "rename one of them (CTest runs a test per suite name)")
  endif()
  set_property(GLOBAL PROPERTY "FSDP_TEST_${test}" "${executable}")
  add_test("${test}" "${executable}" "--gtest_filter=${filter}")
  set_tests_properties("${test}" PROPERTIES WORKING_DIRECTORY "${working_directory}"
    ENVIRONMENT "OMP_NUM_THREADS=1")
  if(labels)
    set_tests_properties("${test}" PROPERTIES LABELS "${labels}")
  endif()
endfunction()

# After every executable's tests are added: a case labels.cmake names that no
# executable has would lose its labels, or its own process, silently.
function(fsdp_check_labelled_cases)
  get_property(not_built GLOBAL PROPERTY FSDP_SOME_TEST_NOT_BUILT)
  get_property(named GLOBAL PROPERTY FSDP_LABELLED_CASES)
  get_property(found GLOBAL PROPERTY FSDP_LABELLED_CASES_FOUND)
  if(not_built)
    return()  # its cases are not listed; the _NOT_BUILT test says why
  endif()
  list(REMOVE_ITEM named ${found})
  if(named)
    message(FATAL_ERROR "tests/labels.cmake names cases that no test executable has: ${named}; "
                        "rename them there as they are named in tests/")
  endif()
endfunction()
