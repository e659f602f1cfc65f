# [Note: LibTorch's targets seen from a parent project]
# find_package(Torch) and find_package(Threads) define imported targets
# (torch, torch_cpu, c10, Threads::Threads, ...) that only this directory and
# those below it can see. fsdp::fsdp names them in its usage requirements, so
# a parent project that add_subdirectory()s libfsdp and links fsdp::fsdp
# would fail at generate time with 'Target "torch" not found'. Making the
# targets fsdp::fsdp reaches global lets the parent link fsdp::fsdp alone.
# Only targets created here may be changed; from CMake 3.21 on, those are
# this directory's IMPORTED_TARGETS (a parent that found Torch first already
# sees its own targets).
function(fsdp_make_link_targets_global target)
  set(pending ${target})
  set(seen "")
  set(closure "")
  while(pending)
    list(POP_FRONT pending item)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
    if(NOT TARGET "${item}" OR item IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${item})
    get_target_property(aliased ${item} ALIASED_TARGET)
    if(aliased)
      list(APPEND pending ${aliased})
      continue()
    endif()
    get_target_property(imported ${item} IMPORTED)
    if(imported)
      list(APPEND closure ${item})
    endif()
    get_target_property(links ${item} INTERFACE_LINK_LIBRARIES)
    if(links)
      list(APPEND pending ${links})
      # Caffe2's targets also name each other inside generator expressions
      # ($<TARGET_FILE:torch_cpu>, $<TARGET_PROPERTY:torch_cpu,...>).
      string(REGEX MATCHALL "TARGET_[A-Z_]+:[A-Za-z0-9_.+:-]+[,>]" named "${links}")
      foreach(ref IN LISTS named)
        string(REGEX REPLACE "^TARGET_[A-Z_]+:(.*)[,>]$" "\\1" ref "${ref}")
        list(APPEND pending ${ref})
      endforeach()
    endif()
  endwhile()
  if(NOT CMAKE_VERSION VERSION_LESS 3.21)
    get_directory_property(here IMPORTED_TARGETS)
  endif()
  foreach(item IN LISTS closure)
    get_target_property(global ${item} IMPORTED_GLOBAL)
    if(global)
      continue()
    endif()
    if(DEFINED here AND NOT item IN_LIST here)
      continue()
    endif()
    set_target_properties(${item} PROPERTIES IMPORTED_GLOBAL TRUE)
  endforeach()
endfunction()
