"""Which modules run compiled, and the switch back to plain Python.

A few modules whose loops are on the add path are compiled at install, when a C compiler and
Cython are at hand, from their own Python source (Cython's pure-Python mode: the same file,
no second copy): ``COMPILED`` below, built by setup.py.  A compiled module is an extension
module beside its ``.py`` file; Python imports an extension before a source file of the same
name, so the compiled one runs whenever it was built, and the ``.py`` file whenever it was not
(no compiler, a failed build: the install never fails for it).

``BOOKIE_PURE=1`` in the environment forces the plain modules: ``bookie/__init__.py`` then
puts ``PureFinder`` first on ``sys.meta_path``, which loads those modules from their ``.py``
files.  Tests run the compiled modules' unit tests both ways (tests/unit/test_compiled.py).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

# The compiled modules, as names under ``bookie`` (setup.py builds exactly these).
COMPILED = ("wire", "client.digest", "client.protocol.pending", "storage.records",
            "storage.ring")
PURE_ENV = "BOOKIE_PURE"
_ROOT = os.path.dirname(os.path.abspath(__file__))


def pure_forced() -> bool:
    """True when the environment asks for the plain modules (BOOKIE_PURE=1)."""
    return os.environ.get(PURE_ENV, "") == "1"


def source_path(name: str) -> str:
    """The ``.py`` file of compiled module ``name`` (e.g. ``client.digest``)."""
    return os.path.join(_ROOT, *name.split(".")) + ".py"


class PureFinder:
    """A meta path finder that loads the COMPILED modules (or those of them in ``_names``)
    from their ``.py`` files."""

    _names = {"bookie." + n: n for n in COMPILED}

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        name = cls._names.get(fullname)
        if name is None:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(name))

    @classmethod
    def invalidate_caches(cls) -> None:
        pass


def install_pure_finder(names=COMPILED) -> None:
    """Make the COMPILED modules (or ``names`` of them) load from source (once)."""
    PureFinder._names = {"bookie." + n: n for n in names}
    if not any(f is PureFinder for f in sys.meta_path):
        sys.meta_path.insert(0, PureFinder)


# A build's extension and its source are written within moments of each other (a wheel's files
# in any order); an edit comes later than that.
STALE_AFTER_S = 2.0


def _extension_path(name: str) -> str | None:
    base = source_path(name)[:-len(".py")]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(base + suffix):
            return base + suffix
    return None


def stale_modules() -> list[str]:
    """The COMPILED modules whose source changed after their extension was built (an edited
    checkout, a ``git pull``): the extension would run code the ``.py`` no longer holds."""
    out = []
    for name in COMPILED:
        ext = _extension_path(name)
        try:
            if ext and os.stat(source_path(name)).st_mtime > os.stat(ext).st_mtime + STALE_AFTER_S:
                out.append(name)
        except OSError:
            continue
    return out


def choose() -> None:
    """At ``import bookie``: BOOKIE_PURE=1 runs every plain module; otherwise a stale extension
    is passed over for its source (rebuilt by ``pip install -e .`` again)."""
    if pure_forced():
        install_pure_finder()
        return
    stale = stale_modules()
    if stale:
        install_pure_finder(stale)


def _is_extension(path: str | None) -> bool:
    return bool(path) and path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def _built(name: str) -> bool:
    """An extension module of ``name`` lies beside its source (an import would load it)."""
    base = source_path(name)[:-len(".py")]
    return any(os.path.exists(base + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def compiled_modules() -> list[str]:
    """The COMPILED modules that run compiled in this process: those imported already as
    they were loaded, the others as an import would load them now (looked up on disk, not
    imported: ``bookie --version`` stays quick)."""
    out = []
    for name in COMPILED:
        module = sys.modules.get("bookie." + name)
        if module is not None:
            ran = _is_extension(getattr(module, "__file__", None))
        else:
            ran = (not any(f is PureFinder for f in sys.meta_path)
                   or "bookie." + name not in PureFinder._names) and _built(name)
        if ran:
            out.append(name)
    return out


def describe() -> str:
    """``compiled: wire, client.digest, ...`` or ``pure Python`` (what ``bookie --version``
    and the bench JSON say)."""
    names = compiled_modules()
    stale = [] if pure_forced() else stale_modules()
    note = (f"; plain, their source newer than the build: {', '.join(stale)} "
            "(pip install -e . builds them again)") if stale else ""
    if not names:
        return "pure Python" + (f" ({PURE_ENV}=1)" if pure_forced() else "") + note
    return "compiled: " + ", ".join(names) + note
