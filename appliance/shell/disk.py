"""``bookie shell`` storage tools: BookKeeper's verbs over this bookie's own files.

    rebuild-index          rebuild the LMDB index from the entry logs and the journal
    localconsistencycheck  every indexed entry present, and its digest checked
    readjournal            dump journal records
    readlog                dump an entry log, or one ledger / entry in it
    lastmark               the LastLogMark of each ledger directory (of each journal)
    listfilesondisc        journal files, entry logs and the index, with sizes
    readledger             a ledger's entries, from this bookie's storage or through the client
    readlogmetadata        an entry log's ledger map: the ledgers in it, their entries and bytes
    activeledgers          the ledgers of one entry log that the metadata store still has
    ledger                 a ledger's index: each entry's entry log, offset and length

Each takes the bookie's configuration (``--conf FILE``, ``--set key=value``) to find its
directories, prints text for people or one JSON document with ``--json``, and refuses a
mistake (a file that is not what it should be, a ledger this bookie does not hold) in one line
with exit status 2.  Only ``rebuild-index`` writes, and only while no bookie runs on the
directories; the others read and may run beside a running bookie.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from bookie.appliance.errors import CliError
from bookie.appliance.shell.registry import (
    client_keys, print_json, zk_security, add_ledger_id_argument, add_zk_auth_option,
    ledger_id_of, metadata_uri_arg)
from bookie.appliance.privileges import run_as_owner, run_as_store_owner
from bookie.client import options as client_options
from bookie.client.errors import BookKeeperError, NoSuchLedgerError as ClientNoSuchLedger
from bookie.client.options import curve_hint
from bookie.metadata import MetadataError, NoSuchLedgerError, open_metadata
from bookie.storage import dirlock
from bookie.storage.layout import all_dirs, current_dir
from bookie.workers.config import BookieConfig, parse_overrides

_DATA_PREVIEW = 48  # payload bytes shown per entry in text output


def register(commands: Any) -> None:
    """Add the storage verbs to ``bookie shell``."""

    def disk_command(name: str, help_text: str, handler, selects_local_mode: bool = False):
        p = commands.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--conf", metavar="FILE", default=None,
                       help="bookie configuration file (its directories are read)"
                            + ("; selects the local mode" if selects_local_mode else ""))
        p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                       help="override one configuration key (repeatable)")
        p.add_argument("--json", action="store_true", help="print JSON for scripts")
        p.set_defaults(func=handler)
        return p

    p = disk_command("rebuild-index", "Rebuild this bookie's index (entry locations, ledger "
                     "records, ledger maps) from its entry logs and journal; refused while the "
                     "bookie runs. Shows progress on stderr.", _rebuild_index)
    p.add_argument("--fence-all", action="store_true",
                   help="restore every ledger fenced (when fences may be lost: journal files and "
                        "the old index gone); writers of open ledgers must move to new ledgers")
    p = disk_command("localconsistencycheck", "Check that every entry the index holds is in its "
                     "entry log, is the entry it is indexed as, and passes its CRC digest "
                     "(exit status 1 when a problem is found).", _consistency)
    p.add_argument("--ledger-id", "-ledgerid", type=int, default=None, help="check one ledger only")

    p = disk_command("readjournal", "Dump the records of the journal files (all, or one).",
                     _readjournal)
    p.add_argument("journal_id", metavar="JOURNAL_ID", nargs="?", default=None,
                   help="one journal file: its id (hex, as in the file name) or path")
    p.add_argument("--journal", type=int, default=None, metavar="N",
                   help="with journalDirectories: only journal N (0 is the first directory); "
                        "default every journal")
    p.add_argument("--entries", action="store_true", help="list the entry ids of add records")
    p.add_argument("--ledger-id", "-ledgerid", type=int, default=None,
                   help="only the records of this ledger")
    p.add_argument("--limit", type=int, default=0, help="stop after this many records")

    p = disk_command("readlog", "Dump an entry log, or the entries of one ledger (or one entry) "
                     "in it.", _readlog)
    p.add_argument("log", metavar="LOG", help="entry log id (hex as in the file name) or path")
    p.add_argument("--ledger-id", "-ledgerid", type=int, default=None)
    p.add_argument("--entry-id", "-entryid", type=int, default=None)
    p.add_argument("--data", action="store_true", help="show each entry's bytes after its header")

    disk_command("lastmark", "Print the LastLogMark of each ledger directory (one per journal "
                 "with journalDirectories).", _lastmark)

    p = disk_command("listfilesondisc", "List the journal files, entry logs and index files "
                     "with their sizes.", _listfiles)
    p.add_argument("--journal", action="store_true", help="journal files only")
    p.add_argument("--entrylog", action="store_true", help="entry logs only")
    p.add_argument("--index", action="store_true", help="index files only")

    p = disk_command(
        "readledger", "Print a ledger's entries.  Two modes: with --conf (or --set), from this "
        "bookie's own storage (index and entry logs, no network); with --metadata URI, through "
        "the replication client (opened without recovery: nothing is fenced; entries up to the "
        "last-add-confirmed).", _readledger, selects_local_mode=True)
    add_ledger_id_argument(p)
    p.add_argument("--entry-from", "-firstentryid", type=int, default=0)
    p.add_argument("--entry-to", "-lastentryid", type=int, default=None,
                   help="last entry (default: the last one there is)")
    p.add_argument("--metadata", metavar="URI", default=None, type=metadata_uri_arg,
                   help="read through the client from the bookies of this metadata store")
    p.add_argument("--password", default=None, help="the ledger's password (client mode)")
    add_zk_auth_option(p)
    p.add_argument("--data", action="store_true", help="show the bytes of each entry")
    client_options.add_arguments(p, set_flags=())  # --set is the bookie's key here (--conf mode)

    p = disk_command("readlogmetadata", "Print an entry log's ledger map: each ledger with "
                     "entries in it, their count and bytes.", _readlogmetadata)
    _log_argument(p)
    p = disk_command("activeledgers", "List the ledgers with entries in one entry log that the "
                     "metadata store (the --conf file's) still has: what compaction would keep.",
                     _activeledgers)
    _log_argument(p)
    p.add_argument("--timeout-s", type=float, default=10.0, help=argparse.SUPPRESS)
    p = disk_command("ledger", "Print a ledger's index on this bookie: each entry's entry log, "
                     "offset and length (BookKeeper's 'ledger' command).", _ledger_index)
    add_ledger_id_argument(p)
    p.add_argument("--meta", "-m", action="store_true",
                   help="also the ledger's record in the index (fenced, key, LAC)")


# -- helpers -------------------------------------------------------------------------------------

def _conf(args: argparse.Namespace):
    """The bookie's configuration; its directories must hold a bookie's data (a wrong --conf is
    one line, not an empty listing).  Started as root, the tool becomes the directories' owner
    here, before it opens anything under them (appliance/privileges.py): what it reads, and
    what LMDB or a metadata store would create, is then only ever what that user could."""
    conf = BookieConfig.load(args.conf, parse_overrides(args.set))
    run_as_owner(all_dirs(conf), getattr(args, "shell_command", "shell"))
    for d in [*conf.journal_dirs, *conf.ledger_dirs]:
        if not os.path.isdir(current_dir(d)):
            raise CliError(f"{d} holds no bookie data (no current/ directory): is --conf the "
                           f"bookie's configuration?")
    return conf


def _as_owner_of_file(path: str, args: argparse.Namespace) -> None:
    """A file named by path (no --conf): become its directory's owner when root."""
    run_as_owner([os.path.dirname(os.path.abspath(path))], getattr(args, "shell_command", "shell"))


def _preview(data: bytes) -> str:
    head = data[:_DATA_PREVIEW]
    text = repr(bytes(head))
    return text + ("..." if len(data) > _DATA_PREVIEW else "")


def _int_id(text: str, what: str) -> int:
    try:
        return int(text, 16)
    except ValueError:
        raise CliError(f"{what} {text!r}: not an id (hex as in the file name) or a path") from None


class _Progress:
    """A progress line on stderr: rewritten in place on a terminal, else one line per report."""

    def __init__(self, verb: str):
        self.verb = verb
        self.tty = sys.stderr.isatty()

    def __call__(self, phase: str, done: int, total: int, entries: int) -> None:
        of = f"{done}/{total}" if total else str(done)
        line = f"{self.verb}: {phase} {of}, {entries} entries"
        if self.tty:
            sys.stderr.write("\r" + line.ljust(70))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


# -- handlers ------------------------------------------------------------------------------------

def _rebuild_index(args: argparse.Namespace) -> int:
    from bookie.storage.index_rebuild import rebuild_index  # lazy: lmdb
    conf = _conf(args)
    run_as_owner(all_dirs(conf), "rebuild-index")
    progress = _Progress("rebuild-index")
    try:
        report = rebuild_index(conf, progress, fence_all=args.fence_all)
    except OSError as e:
        raise CliError(f"rebuild-index: {e}") from None
    finally:
        progress.done()
    if args.json:
        print_json(report.__dict__)
        return 0
    for w in report.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"index rebuilt at {report.index}: {report.entries} entries from {report.logs} entry "
          f"logs ({report.copies} found twice: the later copy counts), {report.ledgers} ledgers "
          f"({report.fenced} fenced, {report.deleted} deleted), "
          f"{report.journal_records} journal records, in {report.seconds:.1f} s")
    return 0


def _consistency(args: argparse.Namespace) -> int:
    from bookie.storage.inspect import IndexUnreadable  # lazy: lmdb
    from bookie.storage.index_verify import consistency_check  # lazy: lmdb
    conf = _conf(args)
    progress = _Progress("localconsistencycheck")
    try:
        report = consistency_check(conf, args.ledger_id, progress)
    except IndexUnreadable as e:
        raise CliError(str(e)) from None
    finally:
        progress.done()
    if args.ledger_id is not None and report.entries == 0:
        raise CliError(f"ledger {args.ledger_id}: this bookie holds no entry of it")
    if args.json:
        print_json({**report.__dict__, "ok": report.problem_count == 0})
    else:
        for line in report.problems:
            print(line)
        print(f"{'OK' if not report.problem_count else 'INCONSISTENT'}: {report.entries} entries "
              f"of {report.ledgers} ledgers checked, {report.digests_checked} digests passed, "
              f"{report.digests_unknown} not checkable here (MAC or no digest), "
              f"{report.problem_count} problems")
    return 1 if report.problem_count else 0


def _journal_dir(conf, journal: int = 0) -> str:
    if not 0 <= journal < len(conf.journal_dirs):
        raise CliError(f"--journal {journal}: the bookie has {len(conf.journal_dirs)} journal(s), "
                       f"0 to {len(conf.journal_dirs) - 1}")
    return current_dir(conf.journal_dirs[journal])


def _journals_to_read(args: argparse.Namespace) -> list[tuple[int, str, int | None]]:
    """(journal index, directory, journal file id or None) for each journal readjournal reads."""
    from bookie.storage.journal import CorruptJournalError, read_file_header  # lazy: crc32c
    if args.journal_id and os.path.sep in args.journal_id:
        path = args.journal_id
        _as_owner_of_file(path, args)
        try:
            with open(path, "rb") as f:
                header = read_file_header(path, f.read(64))
        except (OSError, CorruptJournalError) as e:
            raise CliError(f"{path}: not a journal file ({e})") from None
        return [(args.journal or 0, os.path.dirname(path) or ".", header.journal_id)]
    conf = _conf(args)
    journal_id = _int_id(args.journal_id, "journal") if args.journal_id else None
    if args.journal is not None:
        return [(args.journal, _journal_dir(conf, args.journal), journal_id)]
    if journal_id is not None and len(conf.journal_dirs) > 1:
        raise CliError(f"journal file {args.journal_id}: the bookie has "
                       f"{len(conf.journal_dirs)} journals, each numbering its files from 1; "
                       f"name one with --journal N")
    return [(i, _journal_dir(conf, i), journal_id) for i in range(len(conf.journal_dirs))]


def _readjournal(args: argparse.Namespace) -> int:
    from bookie.storage import records  # lazy: numpy
    from bookie.storage.inspect import iter_journal  # lazy: lmdb
    from bookie.storage.journal import journal_name  # lazy: crc32c
    journals = _journals_to_read(args)
    for _, directory, journal_id in journals:
        named = journal_id is not None and os.path.join(directory, journal_name(journal_id))
        if named and not os.path.exists(named):
            raise CliError(f"no journal file {journal_name(journal_id)} in {directory}")
    names = {records.ADD_BATCH: "ADD", records.FENCE: "FENCE", records.LAC: "LAC"}
    warnings: list[str] = []
    out = []
    shown = 0
    several = len(journals) > 1

    def walk():
        for journal, directory, journal_id in journals:
            for jr in iter_journal(directory, warnings, journal_id):
                yield journal, jr

    for journal, jr in walk():
        rec = jr.record
        if args.ledger_id is not None and rec.ledger_id != args.ledger_id:
            continue
        if args.limit and shown >= args.limit:
            break
        shown += 1
        doc = {"journal": journal, "journal_id": jr.journal_id, "position": jr.position,
               "type": names[rec.type], "ledger_id": rec.ledger_id,
               "master_key": rec.master_key.hex()}
        if rec.type == records.ADD_BATCH:
            doc["entries"] = len(rec.lengths)
            doc["bytes"] = int(rec.lengths.sum())
            doc["recovery"] = bool(rec.flags & records.FLAG_RECOVERY)
            if args.entries:
                doc["entry_ids"] = jr.entry_ids()
        elif rec.type == records.LAC:
            doc["lac"] = rec.lac
        if args.json:
            out.append(doc)
            continue
        line = f"{doc['journal_id']:016x} @{doc['position']}: {doc['type']} ledger {rec.ledger_id}"
        line = f"journal {journal} {line}" if several else line
        if rec.type == records.ADD_BATCH:
            line += f" {doc['entries']} entries {doc['bytes']} bytes"
            line += " (recovery)" if doc["recovery"] else ""
            if args.entries:
                line += f" ids {doc['entry_ids']}"
        elif rec.type == records.LAC:
            line += f" lac {rec.lac}"
        print(line)
    if args.json:
        print_json({"directory": journals[0][1], "directories": [d for _, d, _ in journals],
                     "records": out, "warnings": warnings})
    else:
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
    return 0


def _log_path(args: argparse.Namespace) -> str:
    from bookie.storage.entrylog import find_log  # lazy: crc32c
    if os.path.sep in args.log or args.log.endswith(".log"):
        _as_owner_of_file(args.log, args)
        if not os.path.exists(args.log):
            raise CliError(f"{args.log}: no such file")
        return args.log
    from bookie.storage.inspect import ledger_dirs_of  # lazy: lmdb
    log_id = _int_id(args.log, "entry log")
    try:
        return find_log(ledger_dirs_of(_conf(args)), log_id)
    except FileNotFoundError as e:
        raise CliError(str(e)) from None


def _readlog(args: argparse.Namespace) -> int:
    from bookie.storage import records  # lazy: numpy
    from bookie.storage.inspect import EntryLogFile, InspectError, entry_fields  # lazy: lmdb
    path = _log_path(args)
    try:
        elog = EntryLogFile(path)
    except (InspectError, OSError) as e:
        raise CliError(str(e)) from None
    found = []
    with elog:
        for pos, rec in elog.records():
            if args.ledger_id is not None and rec.ledger_id != args.ledger_id:
                continue
            if rec.type != records.ADD_BATCH:  # a FENCE or LAC record: no entries
                continue
            for e in elog.entries(rec, pos):
                if args.entry_id is not None and e.entry_id != args.entry_id:
                    continue
                data = elog.read(e.offset, e.length)
                doc = {"ledger_id": e.ledger_id, "entry_id": e.entry_id, "offset": e.offset,
                       "length": e.length, "recovery": e.recovery,
                       "lac": entry_fields(data)["lac"]}
                if args.data:
                    doc["data_hex"] = data[32:].hex()
                found.append(doc)
                if not args.json:
                    line = (f"ledger {e.ledger_id} entry {e.entry_id} at {e.offset} length "
                            f"{e.length} lac {doc['lac']}" + (" (recovery)" if e.recovery else ""))
                    if args.data:
                        line += f" data {_preview(data[32:])}"
                    print(line)
        scan = elog.scan
    if args.ledger_id is not None and not found:
        what = f"ledger {args.ledger_id}"
        what += f" entry {args.entry_id}" if args.entry_id is not None else ""
        raise CliError(f"{path}: holds no {what}")
    summary = {"path": path, "log_id": scan.log_id, "size": scan.size, "data_end": scan.end,
               "records": scan.records, "entries": scan.entries, "stopped_at": scan.stop}
    if args.json:
        print_json({**summary, "entries_found": found})
    else:
        print(f"entry log {scan.log_id:08x} ({path}): {scan.records} records, {scan.entries} "
              f"entries, data ends at {scan.end} of {scan.size} bytes ({scan.stop})")
    return 0


def _lastmark(args: argparse.Namespace) -> int:
    from bookie.storage.inspect import ledger_dirs_of  # lazy: lmdb
    from bookie.storage.journal import journal_files, read_lastmark  # lazy: crc32c
    conf = _conf(args)
    journals = []
    for i in range(len(conf.journal_dirs)):  # each journal has its own mark (journal_set.py)
        marks = {d: read_lastmark(d, i) for d in ledger_dirs_of(conf)}
        replay_from = min(marks.values())
        # the journal file holding the mark: the last one that starts at or before it
        holding = [f for f in journal_files(_journal_dir(conf, i))
                   if f.header is not None and f.header.start <= replay_from]
        journals.append({"journal": i, "directory": conf.journal_dirs[i], "lastmarks": marks,
                         "replay_from": replay_from,
                         "journal_file": holding[-1].path if holding else None})
    if args.json:  # journal 0's at the top, as with one journal
        print_json({**{k: journals[0][k] for k in ("lastmarks", "replay_from", "journal_file")},
                     "journals": journals})
        return 0
    for j in journals:
        tail = f" (journal {j['journal']})" if len(journals) > 1 else ""
        for d, mark in j["lastmarks"].items():
            print(f"{d}: LastLogMark {mark}{tail}")
        where = j["journal_file"]
        print(f"replay starts at {j['replay_from']}" + (f", in {where}" if where else "") + tail)
    return 0


def _listfiles(args: argparse.Namespace) -> int:
    from bookie.storage.inspect import log_paths  # lazy: lmdb
    from bookie.storage.journal import journal_name, list_journals  # lazy: crc32c
    from bookie.storage.inspect import index_path, ledger_dirs_of  # lazy: lmdb
    conf = _conf(args)
    every = not (args.journal or args.entrylog or args.index)
    doc: dict[str, list] = {}
    if every or args.journal:
        paths = [os.path.join(jdir, journal_name(j))
                 for jdir in (_journal_dir(conf, i) for i in range(len(conf.journal_dirs)))
                 for j in list_journals(jdir)]
        doc["journal"] = [_file(p) for p in paths]
    if every or args.entrylog:
        doc["entrylog"] = [_file(p) for _, p in log_paths(ledger_dirs_of(conf))]
    if every or args.index:
        ipath = index_path(conf)
        names = sorted(os.listdir(ipath)) if os.path.isdir(ipath) else []
        doc["index"] = [_file(os.path.join(ipath, n)) for n in names]
    if args.json:
        print_json(doc)
        return 0
    for kind, files in doc.items():
        print(f"{kind} ({len(files)} files):")
        for f in files:
            print(f"  {f['path']}  {f['size']} bytes")
    return 0


def _file(path: str) -> dict:
    try:
        return {"path": path, "size": os.stat(path).st_size}
    except FileNotFoundError:
        return {"path": path, "size": 0}


def _readledger(args: argparse.Namespace) -> int:
    args.ledger_id = ledger_id_of(args, "readledger")
    if args.metadata and (args.conf or args.set):
        raise CliError("readledger: give --metadata URI (through the client) or --conf FILE "
                       "(this bookie's storage), not both")
    if (args.client_conf or args.client_set) and not args.metadata:
        raise CliError("readledger: --client-conf and --client-set are for reading through the "
                       "client: give --metadata URI")
    if args.entry_from < 0:
        raise CliError(f"readledger: --entry-from {args.entry_from}: entry ids start at 0")
    if args.entry_to is not None and args.entry_to < args.entry_from:
        raise CliError(f"readledger: --entry-to {args.entry_to} is before --entry-from "
                       f"{args.entry_from}: no entry lies between them")
    if args.metadata:
        entries = _ledger_via_client(args)
    elif args.conf or args.set:
        entries = _ledger_local(args)
    else:
        raise CliError("readledger: give --conf FILE (read this bookie's storage) or "
                       "--metadata URI (read through the client)")
    if args.json:
        print_json({"ledger_id": args.ledger_id, "entries": entries})
        return 0
    for e in entries:
        line = f"ledger {args.ledger_id} entry {e['entry_id']}: {e['length']} bytes"
        if "lac" in e:
            line += f" lac {e['lac']}"
        if args.data:
            line += f" data {_preview(bytes.fromhex(e['data_hex']))}"
        print(line)
    return 0


def _ledger_local(args: argparse.Namespace) -> list[dict]:
    from bookie.storage.inspect import (  # lazy: lmdb
        IndexUnreadable, digest_kind, indexed_entries, ledger_dirs_of, open_index_readonly)
    from bookie.storage.entrylog import EntryLogReader  # lazy: crc32c
    conf = _conf(args)
    try:
        env, index = open_index_readonly(conf)
    except IndexUnreadable as e:
        raise CliError(str(e)) from None
    reader = EntryLogReader(ledger_dirs_of(conf))
    out = []
    try:
        with env.begin() as txn:
            if index.last_entry(txn, args.ledger_id) is None:
                raise CliError(f"ledger {args.ledger_id}: this bookie holds no entry of it")
            to = (1 << 63) - 1 if args.entry_to is None else args.entry_to
            for entry_id, loc in indexed_entries(index, txn, args.ledger_id, args.entry_from, to):
                data = bytes(reader.read(*loc))
                payload_at = 40 if digest_kind(data) else 32
                out.append({"entry_id": entry_id, "length": len(data),
                            "lac": int.from_bytes(data[16:24], "big", signed=True),
                            "data_hex": data[payload_at:].hex()})
    except FileNotFoundError as e:
        raise CliError(str(e)) from None
    finally:
        reader.close()
        env.close()
    return out


def _ledger_via_client(args: argparse.Namespace) -> list[dict]:
    from bookie.client import BookKeeper  # lazy: zmq
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # our one line, not its reconnects
    keys = client_keys(args)
    security = zk_security(args)
    run_as_store_owner(args.metadata, "readledger")  # an embedded store: as its owner
    try:
        store = open_metadata(args.metadata, zk_security=security)
        try:
            meta, _ = store.read_ledger(args.ledger_id)
        finally:
            store.close()
        with BookKeeper(args.metadata, keys) as bk:
            password = args.password.encode() if args.password is not None else None
            lh = bk.open_ledger(args.ledger_id, digest=meta.digest_type, password=password,
                                recovery=False)
            last = lh.last_add_confirmed if args.entry_to is None else args.entry_to
            if last < args.entry_from:
                return []
            return [{"entry_id": e.entry_id, "length": len(e.data), "data_hex": bytes(e.data).hex()}
                    for e in lh.read_entries(args.entry_from, last)]
    except (MetadataError, BookKeeperError) as e:
        if isinstance(e, (NoSuchLedgerError, ClientNoSuchLedger)):  # CURVE cannot be the cause
            raise CliError(f"ledger {args.ledger_id} does not exist") from None
        hint = curve_hint(keys, e) if isinstance(e, BookKeeperError) else ""
        said = str(e)  # named once: most errors of a ledger start with it already
        prefix = "" if said.startswith(f"ledger {args.ledger_id}") else f"ledger {args.ledger_id}: "
        raise CliError(f"{prefix}{said}{hint}") from None


# -- entry-log maps and the index of one ledger ---------------------------------------------------

def _log_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("log", metavar="LOG", nargs="?", default=None,
                   help="entry log id (hex as in the file name) or path")
    p.add_argument("--log-id", "-logId", "-logid", dest="log_id", metavar="HEX", default=None,
                   help="the entry log's id, as BookKeeper spells it")
    p.add_argument("--log-filename", "-logFilename", "-filename", dest="log_filename",
                   metavar="PATH", default=None, help="the entry log's path")


def _ledger_map(args: argparse.Namespace) -> tuple[str, dict[int, list[int]]]:
    """(path, {ledger_id: [entries, bytes]}) of the entry log the command names."""
    from bookie.storage.inspect import EntryLogFile, InspectError  # lazy: lmdb
    named = [x for x in (args.log, args.log_id, args.log_filename) if x]
    if len(named) != 1:
        raise CliError("name one entry log: LOG, -logId HEX or -logFilename PATH")
    args.log = named[0]
    path = _log_path(args)
    try:
        elog = EntryLogFile(path)
    except (InspectError, OSError) as e:
        raise CliError(str(e)) from None
    ledgers: dict[int, list[int]] = {}
    with elog:
        for pos, rec in elog.records():
            figures = ledgers.setdefault(rec.ledger_id, [0, 0])
            figures[0] += len(rec.lengths)
            figures[1] += int(rec.lengths.sum())
    return path, ledgers


def _readlogmetadata(args: argparse.Namespace) -> int:
    path, ledgers = _ledger_map(args)
    if args.json:
        print_json({"path": path, "ledgers": [{"ledger_id": k, "entries": v[0], "bytes": v[1]}
                                               for k, v in sorted(ledgers.items())]})
        return 0
    print(f"entry log {path}: {len(ledgers)} ledgers, "
          f"{sum(v[1] for v in ledgers.values())} bytes of entries")
    for ledger_id, (entries, size) in sorted(ledgers.items()):
        print(f"  ledger {ledger_id}: {entries} entries, {size} bytes")
    return 0


def _activeledgers(args: argparse.Namespace) -> int:
    conf = _conf(args)
    if not conf.metadata_uri:
        raise CliError("activeledgers needs the metadata store: the --conf file names none "
                       "(metadataServiceUri)")
    path, ledgers = _ledger_map(args)
    active = []
    try:
        with open_metadata(conf.metadata_uri, timeout_s=args.timeout_s,
                           zk_security=conf.zk_security) as store:
            for ledger_id in sorted(ledgers):
                try:
                    store.read_ledger(ledger_id)
                except NoSuchLedgerError:
                    continue
                active.append(ledger_id)
    except MetadataError as e:
        raise CliError(str(e)) from None
    if args.json:
        print_json({"path": path, "active": active,
                     "deleted": sorted(set(ledgers) - set(active))})
        return 0
    if not active:
        print(f"no active ledger in {path}")
    for ledger_id in active:
        print(ledger_id)
    return 0


def _ledger_index(args: argparse.Namespace) -> int:
    from bookie.storage.inspect import (  # lazy: lmdb
        IndexUnreadable, indexed_entries, open_index_readonly)
    ledger_id = ledger_id_of(args, "ledger")
    conf = _conf(args)
    try:
        env, index = open_index_readonly(conf)
    except IndexUnreadable as e:
        raise CliError(str(e)) from None
    try:
        with env.begin() as txn:
            if index.last_entry(txn, ledger_id) is None:
                raise CliError(f"ledger {ledger_id}: this bookie holds no entry of it")
            rows = [{"entry_id": e, "log_id": loc[0], "offset": loc[1], "length": loc[2]}
                    for e, loc in indexed_entries(index, txn, ledger_id)]
            record = _ledger_record(index, txn, ledger_id) if args.meta else None
    finally:
        env.close()
    if args.json:
        print_json({"ledger_id": ledger_id, "entries": rows,
                     **({"record": record} if args.meta else {})})
        return 0
    if args.meta:
        print(f"ledger {ledger_id}: {record}")
    for row in rows:
        print(f"entry {row['entry_id']}: entry log {row['log_id']:x} offset {row['offset']} "
              f"length {row['length']}")
    return 0


def _ledger_record(index, txn, ledger_id: int) -> dict:
    """The index's record of the ledger (fenced, LAC...); its master key is never shown."""
    record = index.get_ledger(txn, ledger_id) or {}
    return {k: ("(held)" if "key" in k.lower() else v.hex() if isinstance(v, bytes) else v)
            for k, v in record.items()}
