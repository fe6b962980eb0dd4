"""Optional compiled modules: everything else about the build is in pyproject.toml.

The modules named in ``compiled.py`` (``COMPILED``) are compiled from their own Python source
with Cython (pure-Python mode) when Cython and a C compiler are at hand.  Nothing here may fail
the install: without Cython, without a compiler, or when a module does not build, that module
stays plain Python (``bookie --version`` says which run compiled).  BOOKIE_PURE_BUILD=1 builds
none.  An editable install (``pip install -e .``) builds them in place, beside their sources.
"""

import atexit
import os
import shutil
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.extension import Extension

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compiled import COMPILED, source_path  # noqa: E402 - the list lives with the package

sys.path.pop(0)


class OptionalBuildExt(build_ext):
    """build_ext whose failures leave the plain modules in place instead of failing."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler at all, say
            print(f"bookie: compiled modules not built ({exc}); the plain modules run",
                  file=sys.stderr)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"bookie: {ext.name} not compiled ({exc}); its plain module runs",
                  file=sys.stderr)


class BuildPy(build_py):
    """build_py without this script: the repository root is the package (pyproject.toml)."""

    def find_package_modules(self, package, package_dir):
        return [m for m in super().find_package_modules(package, package_dir)
                if not (package == "bookie" and m[1] == "setup")]


def _package_include(here: str) -> str:
    """A folder in which ``bookie`` is this checkout (a symbolic link), for Cython's include
    path: Cython finds a module's augmenting ``.pxd`` (client/digest.pxd) by the module's
    qualified name, ``bookie/client/digest.pxd``, and the checkout's own folder is seldom
    named ``bookie``."""
    include = tempfile.mkdtemp(prefix="bookie-build-")
    atexit.register(shutil.rmtree, include, True)
    os.symlink(here, os.path.join(include, "bookie"))
    return include


def extensions() -> list:
    if os.environ.get("BOOKIE_PURE_BUILD", "") == "1":
        return []
    try:
        from Cython.Build import cythonize  # lazy: Cython (a build requirement only)
    except ImportError:
        print("bookie: Cython not found; the plain modules run", file=sys.stderr)
        return []
    here = os.path.dirname(os.path.abspath(__file__))
    modules = [Extension("bookie." + name, [os.path.relpath(source_path(name), here)])
               for name in COMPILED]
    directives = {
        "language_level": 3,
        # the annotations are Python's: Cython would take `-> list` for an exact list and
        # refuse a list subclass (client.digest's EntryRun), `x: int` for a C long
        "annotation_typing": False,
        "binding": True,  # functions keep their signatures and docstrings (inspect, help)
        "embedsignature": True,
        "always_allow_keywords": True,
    }
    try:
        return cythonize(modules, quiet=True, include_path=[_package_include(here)],
                         compiler_directives=directives)
    except Exception as exc:
        print(f"bookie: Cython failed ({exc}); the plain modules run", file=sys.stderr)
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPy})
