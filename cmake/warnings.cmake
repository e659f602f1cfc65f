# Compiler warnings for the library, the tests and the examples: one list, so
# a warning the library rejects is rejected in a test too.
#
# FSDP_WERROR turns them into errors, for CI. It is off by default because a
# newer compiler may warn about code an older one accepted, and a user's
# build should not fail for that.
# -Wno-unused-parameter: hooks and virtual overrides keep LibTorch's
# signatures whether or not they use every argument.
option(FSDP_WERROR "treat compiler warnings as errors (for CI)" OFF)

function(fsdp_enable_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(FSDP_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
