# Install rules (included when FSDP_INSTALL is on). `cmake --install build
# --prefix P` gives:
#   P/include/fsdp/...          the public headers (include/ of this tree)
#   P/lib/libfsdp.so            the library
#   P/lib/cmake/fsdp/           fsdpConfig.cmake, fsdpConfigVersion.cmake and
#                               fsdpTargets.cmake, for find_package(fsdp)
#   P/bin/fsdp-run, fsdp-train, fsdp-ckpt, fsdp-plan, fsdp-bench   (those built)
# (lib/ is GNUInstallDirs' CMAKE_INSTALL_LIBDIR.) The demo GPT (models/) is
# not installed: it is for the trainer, the benchmarks and the tests.
#
# RPATHs: the library finds nothing of ours, and the programs find it, from
# wherever P is ($ORIGIN-relative); both find LibTorch at the directory they
# were linked against unless that is a system directory
# (INSTALL_RPATH_USE_LINK_PATH), e.g. a torch wheel's torch/lib.
include(CMakePackageConfigHelpers)

set(FSDP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/fsdp)
file(RELATIVE_PATH fsdp_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})

set_target_properties(fsdp PROPERTIES
  INSTALL_RPATH "$ORIGIN"
  INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS fsdp EXPORT fsdpTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The API docs/using-libfsdp.md lists under "The headers", and nothing else
# (tests/install_check.sh compares the two). shard_layout.h is internal but
# still in include/, where src/flat_param_group.h, src/shard_layout.cpp and
# tests/test_shard_layout.cpp name it; moving it to src/ changes those three
# include lines.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/fsdp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h"
  PATTERN "shard_layout.h" EXCLUDE)

foreach(tool fsdp-run fsdp-train fsdp-ckpt fsdp-plan fsdp-bench)
  if(TARGET ${tool})
    set_target_properties(${tool} PROPERTIES
      INSTALL_RPATH "$ORIGIN/${fsdp_bin_to_lib}"
      INSTALL_RPATH_USE_LINK_PATH TRUE)
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

# fsdp-ckpt import-dcp / export-dcp run it from bin/../libexec/libfsdp/.
install(PROGRAMS ${PROJECT_SOURCE_DIR}/tools/fsdp-ckpt/dcp_convert.py
  DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/libfsdp)

install(EXPORT fsdpTargets
  NAMESPACE fsdp::
  DESTINATION ${FSDP_INSTALL_CMAKEDIR})
string(REGEX MATCH "^[0-9]+\\.[0-9]+" FSDP_TORCH_MAJOR_MINOR "${Torch_VERSION}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fsdpConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fsdpConfig.cmake
  INSTALL_DESTINATION ${FSDP_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the API, so only the same minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fsdpConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fsdpConfig.cmake ${PROJECT_BINARY_DIR}/fsdpConfigVersion.cmake
  DESTINATION ${FSDP_INSTALL_CMAKEDIR})
