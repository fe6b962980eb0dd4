"""``bookie localbookie N``: a local ensemble (bookie.testing.LocalBookies) from the command line."""

from __future__ import annotations

import os
import signal
import sys
import time

from bookie.appliance.errors import CliError
from bookie.testing.localbookies import LocalBookieError, LocalBookies, smoke
from bookie.metadata import MetadataError, NoSuchStoreError, open_metadata
from bookie.workers.config import ConfigError, parse_overrides


class _Interrupted(BaseException):
    """A stop signal while the ensemble starts (BaseException: no ``except Exception`` of the
    start path may swallow it).  The start did not finish: exit status 128 + the signal (130
    for Ctrl-C), as a shell reports a command a signal ended."""

    def __init__(self, signo: int):
        super().__init__(signo)
        self.signo = signo


def _check_dir(path: str) -> None:
    """``--dir``: a directory this user can write (made if missing), or one line saying why not."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise CliError(f"--dir {path}: not a directory (name a directory, or a path to create)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise CliError(f"--dir {path}: cannot create it: {e.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CliError(f"--dir {path}: this user cannot write in it (name a directory you own, "
                       f"or leave --dir out for a temporary one)")


def _check_store(uri: str) -> None:
    """``--metadata``: a store that exists (a typo must not start an empty cluster)."""
    try:
        open_metadata(uri, timeout_s=10.0).close()
    except NoSuchStoreError:
        raise CliError(f"--metadata {uri}: no metadata store there (a typo? leave --metadata "
                       f"out for one under --dir, or create it first: 'bookie shell metaformat "
                       f"--metadata {uri}')") from None
    except MetadataError as e:
        raise CliError(f"--metadata {uri}: {e}") from None


# ---- the command -----------------------------------------------------------------------------------

def register(sub) -> None:
    p = sub.add_parser("localbookie", help="run N bookies on 127.0.0.1 until Ctrl-C / SIGTERM",
                       description="Start N bookies on 127.0.0.1 with an embedded metadata store "
                                   "(or --metadata URI), print the metadata URI and the bookie "
                                   "addresses, check them with a smoke write/read, and keep "
                                   "serving until Ctrl-C or SIGTERM.")
    p.add_argument("n", type=int, metavar="N", help="number of bookies (1..64)")
    p.add_argument("--dir", help="data directory (default: a temp dir, removed on exit); started "
                                 "again on it, the same bookies come back on their ports with "
                                 "their data")
    p.add_argument("--base-port", type=int, help="first port; bookie i uses BASE+2i and BASE+2i+1 "
                                                 "(default: free ports)")
    p.add_argument("--metadata", metavar="URI", help="an existing metadata store ('bookie shell "
                                                     "metaformat' creates one; default: "
                                                     "lmdb://DIR/metadata, created if there is "
                                                     "none)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="bookie configuration override for every bookie (repeatable)")
    p.add_argument("--no-smoke", action="store_true", help="skip the smoke write/read")
    p.add_argument("--exit-after-smoke", action="store_true",
                   help="stop the ensemble after the smoke check instead of serving")
    p.set_defaults(func=cmd_localbookie)


def cmd_localbookie(args) -> int:

    if not 1 <= args.n <= 64:
        raise CliError(f"N must be between 1 and 64, got {args.n}")
    if args.base_port is not None and not 1024 <= args.base_port <= 65535 - 2 * args.n:
        raise CliError(f"--base-port {args.base_port} leaves no room for {args.n} bookies")
    try:
        conf = parse_overrides(args.set)
    except ConfigError as e:
        raise CliError(str(e)) from None
    if args.dir:
        _check_dir(args.dir)
    if args.metadata:
        _check_store(args.metadata)
    stop = {"flag": False, "serving": False}

    def on_signal(signo, _frame):
        # Serving, the loop below notes the flag within 0.2 s. Starting (bookies coming up, the
        # smoke check) can take longer than an operator waits under load: the first signal
        # breaks the start off at once, and ``ens.close()`` stops what had started.
        first = not stop["flag"]
        stop["flag"] = True
        if first and not stop["serving"]:
            raise _Interrupted(signo)

    ens = LocalBookies(args.n, metadata_uri=args.metadata, base_dir=args.dir,
                       base_port=args.base_port, conf=conf)
    try:
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        print(f"localbookie: starting {args.n} bookies under {ens.base_dir}", flush=True)
        ens.start_all()
        print(f"metadata: {ens.metadata_uri}")
        for i, b in enumerate(ens.bookies):
            print(f"bookie {i}: {b} (read port {ens.ports[i] + 1}, log {ens.log_path(i)})")
        sys.stdout.flush()
        said = None if args.no_smoke else smoke(ens)
        stop["serving"] = True  # started: a signal from now on is the normal end (status 0)
        if said:
            print(said, flush=True)
        if args.exit_after_smoke:
            return 0
        if stop["flag"]:
            return 0
        print("localbookie: serving; Ctrl-C or SIGTERM stops it", flush=True)
        while not stop["flag"]:
            for i in range(ens.n):
                if not ens.running(i):
                    print(f"localbookie: bookie {i} stopped unexpectedly:\n{ens.log(i)[-2000:]}",
                          file=sys.stderr)
                    return 1
            time.sleep(0.2)
        print("localbookie: stopping", flush=True)
        return 0
    except _Interrupted as e:
        print("localbookie: stopping (signal while starting: the start did not finish)",
              flush=True)
        return 128 + e.signo
    except LocalBookieError as e:
        raise CliError(str(e)) from None
    finally:
        stop["serving"] = True  # no more raising: a second signal must not break the close
        ens.close()
