# sim_add_library(NAME SRCS ... DEPS ...): one static library per layer, include root = project root,
# so every header is included by its path from the top ("sim/alloc/block_pool.h").
function(sim_add_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  if(SIM_PYTHON_ENABLED)  # linked into the Python extension too (cmake/sim_python.cmake)
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
endfunction()
