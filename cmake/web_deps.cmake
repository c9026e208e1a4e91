# The header-only dependencies of the WebAssembly build (web/build.sh: Debian's emscripten). The host's
# find_package() modules describe libraries built for the host, which an emscripten link cannot use, so each
# target is declared here over the host's headers: fmt with its compiled part built once from
# web/fmt_format.cpp (FMT_HEADER_ONLY would compile it into every user: a third of each source's compile time),
# nlohmann/json, CLI11 and Boost.Graph, which are header-only anyway. Only the four header
# folders are put on the include path, never /usr/include itself (its glibc headers would shadow emscripten's
# libc).
set(SIM_WEB_HOST_INCLUDE /usr/include CACHE PATH "where the host's fmt, nlohmann, CLI and boost headers are")
set(SIM_WEB_INCLUDE_DIR ${CMAKE_BINARY_DIR}/host-headers)
foreach(dir fmt nlohmann CLI boost)
  if(NOT EXISTS ${SIM_WEB_HOST_INCLUDE}/${dir})
    message(FATAL_ERROR "the web build needs ${SIM_WEB_HOST_INCLUDE}/${dir} (Debian: libfmt-dev, "
                        "nlohmann-json3-dev, libcli11-dev, libboost-graph-dev)")
  endif()
  file(MAKE_DIRECTORY ${SIM_WEB_INCLUDE_DIR})
  file(CREATE_LINK ${SIM_WEB_HOST_INCLUDE}/${dir} ${SIM_WEB_INCLUDE_DIR}/${dir} SYMBOLIC)
endforeach()

add_library(sim_web_host_headers INTERFACE)
# -isystem: warnings in the libraries' own headers are theirs.
target_include_directories(sim_web_host_headers SYSTEM INTERFACE ${SIM_WEB_INCLUDE_DIR})
add_library(sim_web_fmt STATIC ${PROJECT_SOURCE_DIR}/web/fmt_format.cpp)
target_link_libraries(sim_web_fmt PUBLIC sim_web_host_headers)
add_library(fmt::fmt INTERFACE IMPORTED)
target_link_libraries(fmt::fmt INTERFACE sim_web_fmt)
add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
target_link_libraries(nlohmann_json::nlohmann_json INTERFACE sim_web_host_headers)
add_library(CLI11::CLI11 INTERFACE IMPORTED)
target_link_libraries(CLI11::CLI11 INTERFACE sim_web_host_headers)
# Boost is used through include directories only (the Boost.Graph headers reach every library through them).
set(Boost_INCLUDE_DIRS ${SIM_WEB_INCLUDE_DIR})
include_directories(SYSTEM ${SIM_WEB_INCLUDE_DIR})
