"""``bookie bench``: the benchmark tools' command line (options, checks, where output goes).

Every tool writes progress lines and a human summary on stderr and exactly one JSON line on
stdout (``--json-out FILE`` appends the same line to FILE; ``--plot FILE.png`` draws it, for the
tools that take them).  A bad option is one line on stderr and exit status 2, before anything
starts.  The tools themselves live in bookie_bench, client_bench (with tail_bench),
journal_bench, spark_bench, compaction, lost_bookie (``rereplication``), report and standard;
this module only turns options into their parameters.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile

from bookie.bench.errors import BenchOptionError
from bookie.client import options as client_options
from bookie.bench import compaction, in_flight, lost_bookie
from bookie.bench.plot import PlotUnavailable, plot_result, require_matplotlib
from bookie.client.errors import InvalidArgumentError

DIGESTS = ("crc32", "crc32c", "mac", "dummy")



def register(subparsers) -> None:
    bench = subparsers.add_parser(
        "bench", help="throughput and latency benchmarks",
        description="Throughput and latency benchmarks. Progress and a summary go to stderr, "
                    "one JSON result line to stdout. See bench/README.md.")
    tools = bench.add_subparsers(dest="bench_tool", metavar="TOOL")
    tools.required = True
    _register_writes(tools)
    _register_bookie(tools)
    _register_reads(tools)
    _register_journal(tools)
    _register_report(tools)
    _register_spark(tools)
    compaction.register(tools)
    lost_bookie.register(tools)


def main(argv: list[str]) -> int:
    """Run one ``bookie bench TOOL ...`` command line in this process (``argv`` after "bench").

    Returns:
        the tool's exit status; 2 (with one line on stderr) for an option it refuses.
    """
    parser = argparse.ArgumentParser(prog="bookie")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", *argv])
    try:
        return int(args.func(args) or 0)
    except BenchOptionError as e:
        print(f"bookie bench: {e}", file=sys.stderr)
        return 2


# -- options shared by the tools ---------------------------------------------------------------


def _common(p: argparse.ArgumentParser, time_s: float) -> None:
    out = p.add_argument_group("output")
    out.add_argument("--time", type=float, default=time_s, metavar="S",
                     help=f"seconds the measured phase runs (default {time_s:g})")
    out.add_argument("--quiet", action="store_true", help="no progress lines")
    out.add_argument("--json-out", metavar="FILE", help="append the JSON result line to FILE")
    out.add_argument("--plot", metavar="FILE.png",
                     help="draw throughput and latency over time (needs matplotlib: "
                          "pip install 'bookie[plot]')")
    out.add_argument("--timeout", type=float, default=30.0, metavar="S",
                     help="give up when nothing is answered for this long (default 30)")


def _entries(p: argparse.ArgumentParser, *, rate_help: str) -> None:
    p.add_argument("--entrysize", type=int, default=1024, metavar="BYTES",
                   help="payload bytes per entry (default 1024)")
    p.add_argument("--digest", choices=DIGESTS, default="crc32", help="digest type (default crc32)")
    p.add_argument("--warmup-messages", type=int, default=10000, metavar="N",
                   help="entries added before measuring (default 10000)")
    p.add_argument("--sendlimit", type=int, default=None, metavar="N",
                   help="stop after this many entries (default: only --time limits)")
    p.add_argument("--rate", type=float, default=None, metavar="PER_S", help=rate_help)


def _local(p: argparse.ArgumentParser, where, *, many: bool) -> None:
    if many:
        where.add_argument("--localbookie", type=int, default=None, metavar="N",
                           help="start N local bookies for the run (bookie.testing.LocalBookies)")
    else:
        where.add_argument("--localbookie", action="store_const", const=1, default=None,
                           help="start one local bookie for the run")
    p.add_argument("--data-dir", metavar="DIR",
                   help="where --localbookie keeps its data (default: a temporary directory, "
                        "removed after)")


def _ledger_options(p: argparse.ArgumentParser, *, ensemble: int, quorum: int) -> None:
    """How the ledgers a tool writes are made, and how many adds it keeps outstanding."""
    p.add_argument("--ensemble", type=int, default=ensemble, metavar="E",
                   help=f"ensemble size (default {ensemble})")
    p.add_argument("--quorum", type=int, default=quorum, metavar="QW",
                   help=f"write quorum (default {quorum})")
    p.add_argument("--ack-quorum", type=int, default=None, metavar="QA",
                   help="ack quorum (default: the write quorum)")
    p.add_argument("--throttle", type=int, default=10000, metavar="N",
                   help="adds outstanding at most (default 10000)")
    p.add_argument("--password", default="bench", help="ledger password (default 'bench')")


def _register_writes(tools) -> None:
    p = tools.add_parser("writes", help="add throughput and latency through the client "
                                        "(BenchThroughputLatency)")
    where = p.add_mutually_exclusive_group()  # or the --client-conf file's metadataServiceUri
    where.add_argument("--metadata", metavar="URI", help="metadata service of a running ensemble "
                                                         "(default: the --client-conf file's)")
    _local(p, where, many=True)
    _ledger_options(p, ensemble=3, quorum=2)
    p.add_argument("--ledgers", type=int, default=1, metavar="N",
                   help="ledgers written at once, round-robin (default 1)")
    p.add_argument("--write-flags", default="", metavar="FLAGS",
                   help="BookKeeper WriteFlag names of the ledgers, comma-separated: "
                        "deferred_sync (bookies answer an add once stored, before their "
                        "journal's fdatasync; each ledger is forced once the timed run ends, "
                        "'force_ms' in the result) (default: none)")
    p.add_argument("--verifiable", action="store_true",
                   help="verifiable ledgers (a Merkle root at close: one SHA-256 per add)")
    p.add_argument("--latency-file", metavar="FILE",
                   help="write every add's latency (microseconds, one per line) to FILE")
    p.add_argument("--journals", default="1", metavar="N[,M...]",
                   help="journals per local bookie (journalDirectories, all on the data "
                        "directory's disk); several counts run one after the other on fresh "
                        "bookies and print the throughput ratio of the last to the first "
                        "(default 1; needs --localbookie)")
    _entries(p, rate_help="offer this many adds/s; latencies count from each add's intended "
                          "start (coordinated omission corrected)")
    _common(p, 60.0)
    client_options.add_arguments(p)
    p.set_defaults(func=_cmd_writes)


def _register_bookie(tools) -> None:
    p = tools.add_parser("bookie", help="one bookie over the wire protocol, no quorum logic "
                                        "(BenchBookie)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--bookie", metavar="HOST:PORT", help="the bookie's add socket")
    _local(p, where, many=False)
    p.add_argument("--metadata", metavar="URI",
                   help="with --bookie: the bookie's metadata service, where the run creates its "
                        "ledgers (removed after); a bookie with a store refuses ids it does not know")
    p.add_argument("--batch", type=int, default=100, metavar="N",
                   help="entries per ADD message in the pipelined phase (default 100)")
    p.add_argument("--window", type=int, default=16, metavar="N",
                   help="ADD messages in flight at most (default 16)")
    p.add_argument("--ledgers", type=int, default=1, metavar="N",
                   help="ledgers written, round-robin per message (default 1)")
    p.add_argument("--sync-time", type=float, default=2.0, metavar="S",
                   help="seconds of one-at-a-time adds before the pipelined phase (0 skips; "
                        "default 2)")
    p.add_argument("--sync-count", type=int, default=None, metavar="N",
                   help="stop the sync phase after N adds")
    p.add_argument("--sync-rate", type=float, default=None, metavar="PER_S",
                   help="pace the sync phase and correct its latencies for coordinated "
                        "omission at this rate")
    p.add_argument("--trace", action="store_true",
                   help="with --localbookie: instead of the two phases, --sync-time seconds (or "
                        "--sync-count adds) of lone adds through the client, each stamped at "
                        "every step of its path (client, add worker, journal); prints the "
                        "per-step table")
    _entries(p, rate_help="offer this many entries/s in the pipelined phase; latencies count "
                          "from each message's intended send (coordinated omission corrected)")
    _common(p, 10.0)
    client_options.add_arguments(p)  # its CURVE keys only: no client is built (but --trace's)
    p.set_defaults(func=_cmd_bookie)


def _register_reads(tools) -> None:
    p = tools.add_parser("reads", help="read throughput and latency through the client: a "
                                       "closed ledger, or tailing a live writer")
    where = p.add_mutually_exclusive_group()  # or the --client-conf file's metadataServiceUri
    where.add_argument("--metadata", metavar="URI", help="metadata service of a running ensemble "
                                                         "(default: the --client-conf file's)")
    _local(p, where, many=True)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--ledger", type=int, metavar="ID",
                      help="read this existing ledger from start to end")
    what.add_argument("--listen", type=int, metavar="N",
                      help="tail N ledgers while this tool's writer writes them (default: 1 "
                           "ledger, written then read when --ledger is not given)")
    # 1000 per read: the client's read op costs are linear in the entries and it decodes an
    # answer's entries in one pass, so bigger reads cost less per entry (100 per read: -20%).
    p.add_argument("--batch", type=int, default=1000, metavar="N",
                   help="entries asked for per read (default 1000)")
    p.add_argument("--window", type=int, default=8, metavar="N",
                   help="sequential reads in flight at most (default 8)")
    p.add_argument("--entries", type=int, default=100000, metavar="N",
                   help="entries written first when this tool makes the ledger (default 100000)")
    p.add_argument("--entrysize", type=int, default=1024, metavar="BYTES",
                   help="payload bytes of the entries this tool writes (default 1024)")
    p.add_argument("--rate", type=float, default=None, metavar="PER_S",
                   help="with --listen: the writer offers this many adds/s over its ledgers "
                        "(default: as fast as --throttle allows)")
    p.add_argument("--lose-replica-at", type=int, default=None, metavar="N",
                   help="after the healthy read, read the ledger again and SIGSTOP one bookie of "
                        "its ensemble once N entries are read (needs --localbookie and a write "
                        "quorum of 2 or more); phase lost_replica beside sequential")
    p.add_argument("--explicit-lac", type=int, default=10, metavar="MS",
                   help="with --listen: the writer's explicitLacInterval, how soon the bookies "
                        "learn the LAC once adds pause or drain (default 10 ms)")
    _ledger_options(p, ensemble=1, quorum=1)
    p.add_argument("--digest", choices=DIGESTS, default="crc32", help="digest type (default crc32)")
    _common(p, 10.0)
    client_options.add_arguments(p)
    p.set_defaults(func=_cmd_reads)


def _register_spark(tools) -> None:
    p = tools.add_parser("spark", help="the Spark source (a DataFrame count of a ledger) and "
                                       "sink next to the raw client's read rate (needs "
                                       "bookie[spark])")
    where = p.add_mutually_exclusive_group()  # or the --client-conf file's metadataServiceUri
    where.add_argument("--metadata", metavar="URI", help="metadata service of a running ensemble "
                                                         "(default: the --client-conf file's)")
    _local(p, where, many=True)
    p.add_argument("--entries", type=int, default=100000, metavar="N",
                   help="entries written, read, counted and sunk (default 100000)")
    p.add_argument("--entrysize", type=int, default=1024, metavar="BYTES",
                   help="payload bytes per entry (default 1024)")
    p.add_argument("--ensemble", type=int, default=3, metavar="E", help="ensemble (default 3)")
    p.add_argument("--quorum", type=int, default=2, metavar="QW",
                   help="write and ack quorum (default 2)")
    p.add_argument("--batch", type=int, default=1000, metavar="N",
                   help="raw client: entries per read (default 1000)")
    p.add_argument("--window", type=int, default=8, metavar="N",
                   help="raw client: reads in flight (default 8)")
    p.add_argument("--cores", type=int, default=2, metavar="N",
                   help="local Spark cores, local[N] (default 2)")
    p.add_argument("--repeat", type=int, default=2, metavar="N",
                   help="warm counts after the cold one (default 2)")
    p.add_argument("--json-out", metavar="FILE",
                   help="append the JSON result line to FILE (it is printed on stdout either way)")
    client_options.add_arguments(p)  # to the bench's client and, as bookkeeper.<key>, to Spark's
    p.set_defaults(func=_cmd_spark)


def _cmd_spark(args) -> int:
    from bookie.bench import spark_bench  # lazy: zmq
    check_positive(args, "entries", "entrysize", "ensemble", "quorum", "batch", "window",
                   "cores")
    check_quorum(args.ensemble, args.quorum, args.quorum)
    check_client_keys(args)
    check_json_out(args.json_out)
    with _ensemble(args) as (uri, _):  # spark has no --quiet: progress always goes to stderr
        result = spark_bench.run(params_of(args, drop=("func", "command", "bench_tool", "client_set",
                                                       "json_out")), uri,
                                 emit=lambda line: print(line, file=sys.stderr, flush=True))
    spark_bench.print_result(result, json_out=args.json_out)
    return 0


def _register_journal(tools) -> None:
    p = tools.add_parser("journal", help="the journal alone: group commit vs. raw grouped "
                                         "fdatasync on one directory (bkperf journal append)")
    p.add_argument("--dir", required=True, metavar="DIR",
                   help="directory to write in (on the disk to measure); files are removed after")
    p.add_argument("--entrysize", type=int, default=1024, metavar="BYTES",
                   help="payload bytes per entry (default 1024)")
    p.add_argument("--batch", type=int, default=100, metavar="N",
                   help="entries per journal record (one ADD message; default 100, the batch "
                        "'bench bookie' sends)")
    p.add_argument("--throttle", type=int, default=None, metavar="N",
                   help="records waiting for the journal at most (default: as many as fit in "
                        "the bookie's default 64 MiB ring, journalRingSizeMB)")
    p.add_argument("--group-bytes", type=int, default=512 * 1024, metavar="BYTES",
                   help="largest group: journalBufferedWritesThreshold (default 524288); also "
                        "the raw baseline's write size")
    p.add_argument("--group-wait-ms", type=float, default=2.0, metavar="MS",
                   help="journalMaxGroupWaitMSec (default 2)")
    p.add_argument("--no-flush-when-queue-empty", action="store_true",
                   help="journalFlushWhenQueueEmpty=false")
    p.add_argument("--rate", type=float, default=None, metavar="PER_S",
                   help="offer this many records/s; latencies count from each record's "
                        "intended start (coordinated omission corrected)")
    _common(p, 5.0)
    p.set_defaults(func=_cmd_journal)


def _register_report(tools) -> None:
    p = tools.add_parser("report", help="run the standard set on this machine and print (or "
                                        "write into the README) the results table")
    p.add_argument("--results", metavar="FILE", default=None,
                   help="results file to append to and read from (default: a temporary file)")
    p.add_argument("--from-results", action="store_true",
                   help="do not run anything: only tabulate --results")
    p.add_argument("--readme", metavar="FILE",
                   help="replace the results table between the markers in FILE (bench/README.md)")
    p.add_argument("--time", type=float, default=10.0, metavar="S",
                   help="seconds each measured phase runs (default 10)")
    p.add_argument("--data-dir", metavar="DIR", help="where the bookies and the journal write "
                                                     "(default: a temporary directory)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--peers", default="redis,zookeeper", metavar="LIST",
                   help="peer systems run beside the bookie, comma-separated: redis, zookeeper, "
                        "or none (default redis,zookeeper; each needs its Debian package)")
    p.add_argument("--spark", action="store_true",
                   help="also run bench spark (needs bookie[spark]) for the issue table's Spark row")
    p.add_argument("--plots", metavar="DIR", default=None,
                   help="also write PNG pictures into DIR: adds/s and latency against adds in "
                        "flight, the peers beside the bookie (needs bookie[plot])")
    p.add_argument("--from-readme", metavar="FILE", default=None,
                   help="with --plots: run nothing, draw from the results tables in FILE "
                        "(bench/README.md)")
    p.add_argument("--only", action="append", metavar="TEXT", default=None,
                   help="run only the standard runs whose name contains TEXT (repeatable); the "
                        "peers and --spark still run")
    p.set_defaults(func=_cmd_report)


# -- checks ------------------------------------------------------------------------------------


def check_positive(args, *names: str, allow_none: bool = False, allow_zero: bool = False) -> None:
    """Each named option must be > 0 (>= 0 with allow_zero; None passes with allow_none).

    Raises:
        BenchOptionError: naming the first option that is not.
    """
    for name in names:
        value = getattr(args, name)
        if value is None and allow_none:
            continue
        if value is None or value < 0 or (value == 0 and not allow_zero):
            flag = "--" + name.replace("_", "-")
            raise BenchOptionError(f"{flag} must be {'>= 0' if allow_zero else 'positive'}, got {value}")


def check_quorum(ensemble: int, write_quorum: int, ack_quorum: int) -> None:
    """E >= Qw >= Qa >= 1, as a ledger requires.

    Raises:
        BenchOptionError: the three sizes named.
    """
    if not ensemble >= write_quorum >= ack_quorum >= 1:
        raise BenchOptionError(f"quorums must satisfy ensemble >= quorum >= ack-quorum >= 1, got "
                       f"--ensemble {ensemble} --quorum {write_quorum} --ack-quorum {ack_quorum}")


def check_common(args) -> None:
    check_positive(args, "time", "timeout")
    if args.plot:
        try:
            require_matplotlib()
        except PlotUnavailable as e:
            raise BenchOptionError(str(e)) from None
    check_json_out(args.json_out)
    check_json_out(args.plot, "plot")


def check_json_out(path: str | None, name: str = "json_out") -> None:
    """An output file's directory exists (checked before a run, not after it)."""
    if path:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise BenchOptionError(f"--{name.replace('_', '-')}: directory {parent} does not exist")


def check_entries(args) -> None:
    check_positive(args, "entrysize")
    check_positive(args, "warmup_messages", allow_zero=True)
    check_positive(args, "sendlimit", "rate", allow_none=True)
    from bookie import wire  # lazy: numpy
    if args.entrysize + wire.ENTRY_HEADER_SIZE + wire.DIGEST_SIZES[args.digest] > 5 * 1024 * 1024:
        raise BenchOptionError(f"--entrysize {args.entrysize} makes entries over the bookie's default "
                       f"5 MiB frame limit")


def check_client_keys(args) -> None:
    """``--client-conf`` / ``--set`` checked, as ``args.client_keys`` (typed; in the params).
    A tool that needs an ensemble and was given neither ``--metadata`` nor ``--localbookie``
    takes the metadata store the client keys name (``metadataServiceUri``, ``zkServers``)."""
    # (bench bookie --bookie ADDR needs no store: its --metadata is optional)
    unplaced = ("metadata" in args and args.metadata is None and args.localbookie is None
                and getattr(args, "bookie", None) is None)
    try:
        args.client_keys = client_options.from_args(args)
        if unplaced:
            args.metadata = client_options.metadata_uri(args.client_keys) or None
    except InvalidArgumentError as e:
        raise BenchOptionError(str(e)) from None
    if unplaced and args.metadata is None:
        raise BenchOptionError("no ensemble: give --metadata URI, --localbookie N, or a "
                               "--client-conf file with metadataServiceUri")


def params_of(args, drop=("func", "command", "bench_tool", "quiet", "json_out", "plot",
                          "client_set")) -> dict:
    """The options as the JSON result records them (output options left out)."""
    return {k: v for k, v in vars(args).items() if k not in drop}


# -- running -----------------------------------------------------------------------------------


def progress_emitter(args):
    if args.quiet:
        return None

    def emit(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
    return emit


BENCH_GC_WAIT_MS = 24 * 3600 * 1000


@contextlib.contextmanager
def local_bookies(count: int, data_dir: str | None, journals: int = 1, conf: dict | None = None):
    """Start ``count`` local bookies for one run (``journals`` journals each; ``conf``: more
    configuration keys).

    Yields:
        (the LocalBookies harness, the data directory it writes in)
    Raises:
        BenchOptionError: the harness is not available in this build.
    """
    try:
        from bookie.testing import LocalBookies  # lazy: zmq
    except ImportError:
        raise BenchOptionError("--localbookie needs bookie.testing.LocalBookies, which this build "
                       "lacks; start bookies yourself and pass --metadata / --bookie") from None
    made = data_dir is None
    base = tempfile.mkdtemp(prefix="bookie-bench-") if made else data_dir
    if not made:
        os.makedirs(base, exist_ok=True)
    try:
        # No GC during a run: ``bench bookie`` writes ledgers the metadata store never heard
        # of, which the GC (every second in LocalBookies) would delete under it.
        with LocalBookies(count, base_dir=base, conf={"gcWaitTime": BENCH_GC_WAIT_MS, **(conf or {})},
                          journals=journals) as lb:
            yield lb, base
    finally:
        if made:
            shutil.rmtree(base, ignore_errors=True)


def finish(args, result: dict) -> int:
    """Print the summary and the JSON line, append it, draw it."""
    from bookie.bench import report  # lazy: zmq
    report.emit(result, json_out=args.json_out)
    if args.plot:
        plot_result(result, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    errors = sum(ph.get("errors", 0) for ph in result["phases"].values())
    if errors and not any(ph.get("ops") for ph in result["phases"].values()):
        # nothing at all succeeded: say so on one line (and why it may be, without CURVE keys)
        first = next((ph["first_error"] for ph in result["phases"].values()
                      if ph.get("first_error")), "")
        hint = client_options.curve_hint(args.client_keys) if "client_keys" in args else ""
        print(f"bookie bench: every operation failed ({errors})"
              f"{': ' + first if first else ''}{hint}", file=sys.stderr)
    return 1 if errors else 0


def _cmd_bookie(args) -> int:
    from bookie.bench import bookie_bench  # lazy: zmq
    check_common(args)
    check_entries(args)
    check_positive(args, "batch", "window", "ledgers")
    check_positive(args, "sync_time", allow_zero=True)
    check_positive(args, "sync_count", "sync_rate", allow_none=True)
    check_client_keys(args)
    from bookie import wire  # lazy: numpy
    if args.batch > wire.MAX_BATCH:
        raise BenchOptionError(f"--batch must be at most {wire.MAX_BATCH} entries per ADD message")
    if args.bookie is not None:
        try:
            bookie_bench.parse_bookie(args.bookie)
        except ValueError as e:
            raise BenchOptionError(f"--bookie: {e}") from None
    params = params_of(args)
    emit = progress_emitter(args)
    if args.trace:
        return _trace_bookie(args, params, emit)
    try:
        if args.bookie is not None:
            result = bookie_bench.run(params, args.bookie, emit=emit, metadata_uri=args.metadata)
        else:
            if args.metadata is not None:
                raise BenchOptionError("--metadata goes with --bookie (--localbookie makes its own store)")
            with local_bookies(1, args.data_dir) as (lb, base):
                result = bookie_bench.run(params, lb.bookies[0], emit=emit, data_dir=base,
                                          metadata_uri=lb.metadata_uri)
    except bookie_bench.BenchError as e:
        raise BenchOptionError(str(e)) from None
    return finish(args, result)


def _trace_bookie(args, params: dict, emit) -> int:
    """``bench bookie --trace``: the lone-add breakdown (bench/trace.py) on a local bookie."""
    from bookie.bench import bookie_bench, trace  # lazy: zmq
    from bookie.bench.client_bench import BenchError  # lazy: zmq
    if args.bookie is not None:
        raise BenchOptionError("--trace needs --localbookie (the bookie must write its stamps "
                               "where the bench reads them)")
    if args.sync_time <= 0:
        raise BenchOptionError("--trace runs --sync-time seconds of lone adds: give more than 0")
    trace_dir = tempfile.mkdtemp(prefix="bookie-bench-trace-")
    try:
        with local_bookies(1, args.data_dir, conf={"addTraceDirectory": trace_dir}) as (lb, base):
            try:
                disk = bookie_bench.disk_baseline(base, emit=emit)
                result = trace.run(params, lb.metadata_uri, trace_dir, emit=emit, data_dir=base,
                                   disk=disk)
            except (BenchError, bookie_bench.BenchError) as e:
                raise BenchOptionError(str(e)) from None
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    print(trace.table(result["phases"]["trace"]["steps_us"], result["phases"]["trace"]["traced"]),
          end="", file=sys.stderr)
    return finish(args, result)


def _check_client_args(args) -> None:
    check_client_keys(args)
    if args.ack_quorum is None:
        args.ack_quorum = args.quorum
    check_quorum(args.ensemble, args.quorum, args.ack_quorum)
    check_positive(args, "throttle")
    if args.localbookie is not None:
        check_positive(args, "localbookie")
        if args.localbookie < args.ensemble:
            raise BenchOptionError(f"--ensemble {args.ensemble} needs at least that many bookies, "
                           f"--localbookie starts {args.localbookie}")


@contextlib.contextmanager
def _ensemble(args, journals: int = 1, subdir: str | None = None):
    """Yields (metadata URI, data dir or None) of --metadata or of --localbookie N (with
    ``journals`` journals each, in ``subdir`` of --data-dir when given)."""
    if args.metadata is not None:
        yield args.metadata, None
    else:
        data_dir = os.path.join(args.data_dir, subdir) if args.data_dir and subdir else args.data_dir
        with local_bookies(args.localbookie, data_dir, journals) as (lb, base):
            yield lb.metadata_uri, base


def _cmd_writes(args) -> int:
    from bookie.bench import client_bench  # lazy: zmq
    check_common(args)
    check_entries(args)
    _check_client_args(args)
    check_positive(args, "ledgers")
    args.write_flags = _write_flags(args.write_flags)
    if args.latency_file:
        parent = os.path.dirname(os.path.abspath(args.latency_file))
        if not os.path.isdir(parent):
            raise BenchOptionError(f"--latency-file: directory {parent} does not exist")
    from bookie.bench import journals_bench  # lazy: zmq
    try:
        counts = journals_bench.parse_journals(args.journals)
    except ValueError as e:
        raise BenchOptionError(f"--journals: {e}") from None
    if counts != [1] and args.localbookie is None:
        raise BenchOptionError("--journals sets up local bookies: it needs --localbookie N")
    emit = progress_emitter(args)
    try:
        results = {}
        for n in counts:  # one after the other, fresh bookies each, on the same disk
            with _ensemble(args, n, f"journals-{n}" if len(counts) > 1 else None) as (uri, base):
                results[n] = client_bench.run_writes(params_of(args), uri, emit=emit, data_dir=base)
            if "interrupted" in results[n]["phases"]["writes"]:
                break  # Ctrl-C: no further journal counts
        result = results[n] if len(counts) == 1 else journals_bench.combine(results)
    except client_bench.BenchError as e:
        raise BenchOptionError(f"{e}{client_options.curve_hint(args.client_keys)}") from None
    status = finish(args, result)
    cut = [r for r in results.values() if "interrupted" in r["phases"]["writes"]]
    return 130 if cut else status  # printed what it measured; still a run cut short


def _write_flags(text: str) -> list[str]:
    """``--write-flags``: the names, lower case, each one the client knows.  Raises
    BenchOptionError naming a bad one."""
    from bookie.client.client import WRITE_FLAGS  # lazy: zmq
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    for n in names:
        if n not in WRITE_FLAGS:
            raise BenchOptionError(f"--write-flags: unknown write flag {n!r} "
                                   f"(known: {', '.join(WRITE_FLAGS)})")
    return sorted(set(names))


def _cmd_reads(args) -> int:
    from bookie.bench import client_bench  # lazy: zmq
    check_common(args)
    _check_client_args(args)
    check_positive(args, "batch", "window", "entries", "entrysize")
    check_positive(args, "listen", allow_none=True)
    if args.ledger is not None and args.metadata is None:
        raise BenchOptionError("--ledger reads an existing ledger: give the --metadata URI of its "
                       "ensemble (--localbookie starts empty bookies)")
    if args.listen is not None and args.entrysize < 8:
        raise BenchOptionError("--entrysize must be at least 8 with --listen (entries carry a time)")
    if args.rate is not None:
        check_positive(args, "rate")
        if args.listen is None:
            raise BenchOptionError("--rate paces the tailed writer: it needs --listen")
    if args.lose_replica_at is not None:
        check_positive(args, "lose_replica_at", allow_zero=True)
        if args.listen is not None or args.ledger is not None or args.localbookie is None:
            raise BenchOptionError("--lose-replica-at stops a bookie this tool starts: it needs "
                                   "--localbookie and no --listen or --ledger")
        if args.quorum < 2:
            raise BenchOptionError(f"--lose-replica-at needs a write quorum of 2 or more (a "
                                   f"replica to read on from), got --quorum {args.quorum}")
        if args.lose_replica_at >= args.entries:
            raise BenchOptionError(f"--lose-replica-at {args.lose_replica_at} must be below "
                                   f"--entries {args.entries}")
    emit = progress_emitter(args)
    try:
        if args.lose_replica_at is not None:
            with local_bookies(args.localbookie, args.data_dir) as (lb, base):
                result = client_bench.run_reads(params_of(args), lb.metadata_uri, emit=emit,
                                                data_dir=base, pause_bookie=_pauser(lb))
        else:
            with _ensemble(args) as (uri, base):
                result = client_bench.run_reads(params_of(args), uri, emit=emit, data_dir=base)
    except client_bench.BenchError as e:
        raise BenchOptionError(f"{e}{client_options.curve_hint(args.client_keys)}") from None
    return finish(args, result)


def _pauser(lb):
    """bookie id -> SIGSTOP that local bookie (all its processes); returns what resumes it."""

    def pause(bookie_id: str):
        pgid = lb.procs[lb.bookies.index(bookie_id)].pid
        os.killpg(pgid, signal.SIGSTOP)
        return lambda: os.killpg(pgid, signal.SIGCONT)
    return pause


def _cmd_journal(args) -> int:
    from bookie.bench import journal_bench  # lazy: zmq
    check_common(args)
    check_positive(args, "entrysize", "batch", "group_bytes")
    check_positive(args, "throttle", allow_none=True)
    check_positive(args, "group_wait_ms", allow_zero=True)
    check_positive(args, "rate", allow_none=True)
    if not os.path.isdir(args.dir):
        raise BenchOptionError(f"--dir: {args.dir} is not a directory")
    if not os.access(args.dir, os.W_OK | os.X_OK):
        raise BenchOptionError(f"--dir: {args.dir} is not writable")
    result = journal_bench.run(params_of(args), emit=progress_emitter(args))
    return finish(args, result)


def _cmd_report(args) -> int:
    from bookie.bench import ratios, report, standard  # lazy: zmq
    check_positive(args, "time")
    if args.from_readme:
        return _plots_from_readme(args)
    if args.plots:
        try:
            require_matplotlib()  # before the runs, not after them
        except PlotUnavailable as e:
            raise BenchOptionError(str(e)) from None
    peers = [] if args.peers.strip() == "none" else [p.strip() for p in args.peers.split(",")]
    unknown = [p for p in peers if p not in ratios.PEERS]
    if unknown:
        raise BenchOptionError(f"--peers: unknown peer {unknown[0]!r} (redis, zookeeper or none)")
    runs = standard.STANDARD
    if args.only:
        runs = tuple(r for r in runs if any(t in r.name for t in args.only))
        if not runs:
            raise BenchOptionError(f"--only: no standard run's name contains {args.only[0]!r}")
    if args.from_results and not args.results:
        raise BenchOptionError("--from-results needs --results FILE to tabulate")
    if args.results and args.from_results and not os.path.isfile(args.results):
        raise BenchOptionError(f"--results: {args.results} does not exist")
    if args.readme and not os.path.isfile(args.readme):
        raise BenchOptionError(f"--readme: {args.readme} does not exist")
    scratch = tempfile.mkdtemp(prefix="bookie-bench-report-")
    try:
        results_path = args.results or os.path.join(scratch, "results.jsonl")
        statuses = []
        if not args.from_results:
            data_dir = args.data_dir or scratch
            os.makedirs(data_dir, exist_ok=True)
            statuses = standard.run_all(results_path, args.time, data_dir, args.quiet, runs,
                                        bench_main=main)
            standard.settle()
            statuses += ratios.run_peers(results_path, args.time, peers)
            if args.spark:
                standard.settle()
                statuses.append(ratios.run_spark(results_path, args.time, data_dir, bench_main=main))
        try:
            results = report.load_results(results_path) if os.path.exists(results_path) else []
        except ValueError as e:
            raise BenchOptionError(str(e)) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    # the detailed table, then the issue's: each figure as a ratio to its peer of the same run
    table = standard.render(results) + "\n" + ratios.render(results)
    print(table, end="")
    if args.readme:
        try:
            standard.replace_in_readme(args.readme, table)
        except ValueError as e:
            raise BenchOptionError(str(e)) from None
        print(f"results table written into {args.readme}", file=sys.stderr)
    if args.plots:
        for path in in_flight.plot_in_flight(in_flight.points_from_results(results), args.plots):
            print(f"picture written: {path}", file=sys.stderr)
    failed = [(name, rc) for name, rc in statuses if rc]
    for name, rc in failed:
        print(f"run failed (exit status {rc}): {name}", file=sys.stderr)
    return 1 if failed else 0


def _plots_from_readme(args) -> int:
    """``report --plots DIR --from-readme FILE``: the pictures of the tables FILE holds."""

    if not args.plots:
        raise BenchOptionError("--from-readme draws pictures: give --plots DIR")
    try:
        with open(args.from_readme, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise BenchOptionError(f"--from-readme: {args.from_readme}: {e.strerror}") from None
    try:
        points = in_flight.points_from_readme(text)
        m = re.search(r"Measured (\S+?)T", text)
        caption = f"{os.path.basename(args.from_readme)}, measured {m.group(1)}" if m else ""
        paths = in_flight.plot_in_flight(points, args.plots, caption)
    except (ValueError, PlotUnavailable) as e:
        raise BenchOptionError(f"--from-readme: {e}") from None
    for path in paths:
        print(f"picture written: {path}", file=sys.stderr)
    return 0
