# SIM_PYTHON decides whether the Python package's native extension (python/: `import vramsim`) is built:
#   OFF   skip it
#   AUTO  build it when pybind11 (Debian's pybind11-dev) and the Python headers are found, else skip it with a
#         STATUS line
#   ON    build it; pybind11 missing is a configure error
# The interpreter is $Python_EXECUTABLE when given (setup.py passes its own), else Debian's /usr/bin/python3
# (the one python3-torch and python3-pybind11 serve; another python3 may come first on PATH).
# Sets SIM_PYTHON_ENABLED; when it is on, sim_add_library compiles the libraries position-independent (-fPIC): a
# shared module cannot link code compiled for an executable (-fPIE, gcc's default, reaches glibc's `stderr`
# directly, not through the GOT). Executables (the CLI, the tests) keep their flags.
set(SIM_PYTHON_ENABLED OFF)
string(TOUPPER "${SIM_PYTHON}" _sim_python_request)
if(_sim_python_request MATCHES "^(OFF|NO|FALSE|N|0)$")
  message(STATUS "vramsim: Python extension (python/) not built: SIM_PYTHON=${SIM_PYTHON}")
  return()
elseif(_sim_python_request MATCHES "^(ON|YES|TRUE|Y|1)$")
  set(_sim_python_request ON)
elseif(NOT _sim_python_request STREQUAL "AUTO")
  message(FATAL_ERROR "vramsim: SIM_PYTHON must be ON, OFF or AUTO (got '${SIM_PYTHON}')")
endif()

if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python_EXECUTABLE /usr/bin/python3)
endif()
set(PYBIND11_FINDPYTHON ON)
find_package(Python COMPONENTS Interpreter Development.Module QUIET)
if(Python_FOUND)
  find_package(pybind11 2.6 CONFIG QUIET)
endif()
if(NOT Python_FOUND OR NOT pybind11_FOUND)
  if(_sim_python_request STREQUAL "ON")
    message(FATAL_ERROR
      "vramsim: SIM_PYTHON=ON but pybind11 or the Python headers were not found: apt-get install pybind11-dev "
      "python3-dev, or configure with -DSIM_PYTHON=OFF (or AUTO)")
  endif()
  message(STATUS "vramsim: Python extension (python/) not built: SIM_PYTHON=AUTO and no pybind11 / Python headers")
  return()
endif()
set(SIM_PYTHON_ENABLED ON)
message(STATUS "vramsim: Python extension (python/) built with pybind11 ${pybind11_VERSION} for "
               "${Python_EXECUTABLE} (Python ${Python_VERSION}; SIM_PYTHON=${SIM_PYTHON})")
