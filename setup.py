"""`pip install . --no-build-isolation`: the Python package `vramsim` (python/vramsim) and its tracer
(traces/tracer/vramsim_trace), with the native extension built by this repository's CMake (target
vramsim_native; see python/CMakeLists.txt). Offline, with what Debian packages: cmake, g++, pybind11-dev,
python3-dev, python3-setuptools and the build's libraries (README's set-up command).

VRAMSIM_BUILD_DIR=build reuses a configured CMake build folder (its compiled libraries: only the extension
is linked) instead of configuring one under build/; VRAMSIM_BUILD_JOBS sets the parallel jobs (default 2)."""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = os.environ.get("VRAMSIM_BUILD_DIR")
        if build_dir:
            build_dir = os.path.abspath(build_dir)
        else:
            build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call([
                "cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DSIM_PYTHON=ON",
                "-DSIM_BUILD_TESTS=OFF", "-DSIM_BUILD_BENCH=OFF", "-DSIM_WITH_CUDA=OFF",
                f"-DPython_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("VRAMSIM_BUILD_JOBS", "2")
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "vramsim_native", "-j", jobs])
        built = os.path.join(build_dir, "python", "vramsim")
        names = [n for n in os.listdir(built) if n.startswith("_native") and n.endswith(".so")]
        if len(names) != 1:
            raise RuntimeError(f"{built}: expected one _native*.so from the CMake build, found {names}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, names[0]), target)


setup(
    name="vramsim",
    version="0.1",
    description="Will this PyTorch job fit in GPU memory? A faithful model of PyTorch's CUDA caching allocator",
    python_requires=">=3.9",
    packages=["vramsim", "vramsim_trace"],
    package_dir={"vramsim": "python/vramsim", "vramsim_trace": "traces/tracer/vramsim_trace"},
    ext_modules=[Extension("vramsim._native", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
