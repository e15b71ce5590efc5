"""Builds the extension chorus._chorus for `pip install .` (see pyproject.toml).

CMake configures this checkout with only the library and the Python package on
(CHORUS_PYTHON_BUNDLE: the extension's RPATH is $ORIGIN) and builds target chorus_python (and
chorus_torch, chorus.torch's extension, where libtorch-dev is found); the
extensions and libchorus.so.0 then go into the wheel's chorus/ directory side by side, with the
demo's plot script as chorus/plot.py. The CMake tree is build/pip/ under this checkout.
"""

import os
import pathlib
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).parent.resolve()


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        tree = ROOT / "build" / "pip"
        package = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve().parent
        package.mkdir(parents=True, exist_ok=True)
        subprocess.check_call([
            "cmake", "-S", str(ROOT), "-B", str(tree), "-DCMAKE_BUILD_TYPE=Release",
            "-DCHORUS_BUILD_TESTS=OFF", "-DCHORUS_BUILD_TOOLS=OFF", "-DCHORUS_BUILD_BENCH=OFF",
            "-DCHORUS_BUILD_EXAMPLES=OFF", "-DCHORUS_BUILD_PYTHON=ON",
            "-DCHORUS_PYTHON_BUNDLE=ON", f"-DPython_EXECUTABLE={sys.executable}"])
        jobs = str(os.cpu_count() or 2)
        targets = ["chorus_python"]
        # chorus.torch's extension too, where CMake found Debian's libtorch-dev.
        if "CHORUS_BUILD_TORCH:BOOL=ON" in (tree / "CMakeCache.txt").read_text():
            targets.append("chorus_torch")
        subprocess.check_call(["cmake", "--build", str(tree), "--target", *targets,
                               "--parallel", jobs])
        built = tree / "python" / "chorus"
        for module in [*built.glob("_chorus*.so"), *built.glob("_torch*.so")]:
            shutil.copy2(module, package / module.name)
        shutil.copy2(built / "libchorus.so.0", package / "libchorus.so.0")
        shutil.copy2(ROOT / "scripts" / "plot_demo.py", package / "plot.py")


setup(ext_modules=[Extension("chorus._chorus", sources=[])], cmdclass={"build_ext": CMakeBuild})
