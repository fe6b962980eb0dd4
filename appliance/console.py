"""The ``bookie`` console script: ``bookie.appliance.cli.main``, with Ctrl-C at any moment
ending in exit status 130 and no traceback.

While the command's modules and the extension modules every command uses (pyzmq, numpy, lmdb,
orjson) are being imported, SIGINT ends the process at once with status 130 (``os._exit``):
a KeyboardInterrupt raised inside an extension module's initialisation can leave it half made,
and the interpreter then crashes at exit (SIGSEGV); and nothing exists yet to clean up (no
file, no process, no registration: the command has not run).  Noting the Ctrl-C and acting on
it when the imports were done, as before, took 6 s under load (issue 35: "stop within 5 s")."""

from __future__ import annotations

import importlib
import os
import signal

EXTENSIONS = ("zmq", "numpy", "lmdb", "orjson", "prometheus_client")
# No bookie process does linear algebra (numpy here is buffers, cumsum, fancy indexing), yet
# numpy's OpenBLAS starts a thread per core in every process that imports it, and those start
# at import: a fifth of numpy's import CPU, and in each of a bookie's five processes.  One
# thread unless the environment says otherwise; the workers inherit it.
BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"


def _exit_interrupted(*_) -> None:
    os._exit(130)  # no exit handlers, no finalisation of half-imported extension modules


def main() -> int:
    os.environ.setdefault(BLAS_THREADS_ENV, "1")  # before anything imports numpy
    try:
        previous = signal.signal(signal.SIGINT, _exit_interrupted)
    except ValueError:  # not the main thread (embedded): nothing to defer
        previous = None
    try:
        from bookie.appliance.cli import main as cli_main  # lazy: orjson
        for name in EXTENSIONS:
            try:
                importlib.import_module(name)
            except ImportError:  # an optional one; the command says so if it needs it
                pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    try:
        return cli_main()
    except KeyboardInterrupt:
        return 130
