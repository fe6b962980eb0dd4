"""The operator's admin paths beyond the basic ones (BookKeeper's names), registered into
``admin.ROUTES`` by ``register``; the server, authentication and error rules are server.py's.

    GET    /api/v1/bookie/gc                      is a GC pass asked for and not started yet
    GET    /api/v1/bookie/gc_details              the GC and compaction figures of this run
    GET|PUT /api/v1/bookie/gc/suspend_compaction  suspend major / minor compaction
    PUT    /api/v1/bookie/gc/resume_compaction    resume them
    GET    /api/v1/bookie/last_log_mark           LastLogMark of each ledger directory
    GET    /api/v1/bookie/list_bookie_info        registered bookies and this one's disk space
    PUT    /api/v1/bookie/expand_storage          409: directories are added while stopped
    GET    /api/v1/ledger/read                    entries of a ledger from this bookie's storage
    DELETE /api/v1/ledger/delete                  delete a ledger (its metadata)
    PUT    /api/v1/autorecovery/decommission      mark every ledger of a bookie under-replicated
    GET|PUT /api/v1/autorecovery/status           the cluster-wide autorecovery switch
    PUT    /api/v1/config/server_config           409: the configuration is read at start

docs/admin.md shows each with an example.
"""

from __future__ import annotations

import os

import orjson

from bookie.appliance.admin.api import AdminApi, HttpError, Request, Response
from bookie.appliance.admin.basic import bookie_info
from bookie.workers.gc_worker import GC_REQUEST_FILE, compaction_suspended, suspend_compaction
from bookie.appliance.shell.known import UnknownError, require_bookies
from bookie.autorecovery.rules import named_bookies
from bookie.metadata import NoSuchLedgerError
from bookie.metadata.store import check_bookie_id
from bookie.metadata.underreplication import UnderReplication
from bookie.storage.entrylog import EntryLogReader
from bookie.storage.inspect import (
    IndexUnreadable, digest_kind, indexed_entries, ledger_dirs_of, open_index_readonly)
from bookie.storage.journal import read_lastmark
from bookie.storage.layout import current_dir

MAX_READ_ENTRIES = 1000  # per /api/v1/ledger/read request
MAX_READ_BYTES = 4 << 20  # of payload per request, past the first entry (the supervisor's memory)


def _run_dir(api: AdminApi) -> str:
    run_dir = getattr(api.sup, "run_dir", None)
    if not run_dir:
        raise HttpError(409, "the bookie is not running yet")
    return run_dir


# -- GC and compaction -----------------------------------------------------------------------------

def gc_status(api: AdminApi, req: Request) -> Response:
    pending = os.path.exists(os.path.join(_run_dir(api), GC_REQUEST_FILE))
    return Response({"is_in_force_gc": pending})


def _families(api: AdminApi, prefixes: tuple[str, ...]) -> dict:
    figures = {}
    for family in api.registry.registry.collect():
        if family.name.startswith(prefixes):
            for sample in family.samples:
                if not sample.labels and not sample.name.endswith("_created"):
                    figures[sample.name] = sample.value
    return figures


def gc_details(api: AdminApi, req: Request) -> Response:
    run_dir = _run_dir(api)
    return Response({"figures": _families(api, ("bookie_gc_", "bookie_compaction_",
                                                "bookie_ledgers", "bookie_entry_logs")),
                     "isMajorGcSuspended": compaction_suspended(run_dir, "major"),
                     "isMinorGcSuspended": compaction_suspended(run_dir, "minor")})


def _suspension(run_dir: str) -> dict:
    return {"isMajorGcSuspended": compaction_suspended(run_dir, "major"),
            "isMinorGcSuspended": compaction_suspended(run_dir, "minor")}


def _flags(req: Request, names: tuple[str, str]) -> dict:
    body = req.json() if req.body.strip() else {}
    if not isinstance(body, dict):
        raise HttpError(400, f'expected {{"{names[0]}": true|false, "{names[1]}": true|false}}')
    flags = {}
    for name in names:
        flags[name] = body.get(name, False)
        if not isinstance(flags[name], bool):
            raise HttpError(400, f"{name}: expected true or false")
    return flags


def get_suspension(api: AdminApi, req: Request) -> Response:
    return Response(_suspension(_run_dir(api)))


def suspend(api: AdminApi, req: Request) -> Response:
    run_dir = _run_dir(api)
    flags = _flags(req, ("suspendMajor", "suspendMinor"))
    if flags["suspendMajor"]:
        suspend_compaction(run_dir, "major", True)
    if flags["suspendMinor"]:
        suspend_compaction(run_dir, "minor", True)
    return Response(_suspension(run_dir))


def resume(api: AdminApi, req: Request) -> Response:
    run_dir = _run_dir(api)
    flags = _flags(req, ("resumeMajor", "resumeMinor"))
    if flags["resumeMajor"]:
        suspend_compaction(run_dir, "major", False)
    if flags["resumeMinor"]:
        suspend_compaction(run_dir, "minor", False)
    return Response(_suspension(run_dir))


# -- this bookie's files -------------------------------------------------------------------------

def last_log_mark(api: AdminApi, req: Request) -> Response:
    conf = api.sup.conf
    if len(conf.journal_dirs) == 1:
        return Response({d: read_lastmark(current_dir(d)) for d in conf.ledger_dirs})
    # several journals (journalDirectories): each has its own mark in every ledger directory
    return Response({d: {j: read_lastmark(current_dir(d), i) for i, j in enumerate(conf.journal_dirs)}
                     for d in conf.ledger_dirs})


def expand_storage(api: AdminApi, req: Request) -> Response:
    raise HttpError(409, "directories are added to a stopped bookie: list them in its "
                         "configuration, stop it, run 'bookie shell expandstorage --conf FILE', "
                         "start it")


def read_ledger(api: AdminApi, req: Request) -> Response:
    """Entries of a ledger as this bookie stores them (a striped ledger: its share), read from
    its index and entry logs beside the workers (read-only LMDB transactions).  At most
    ``MAX_READ_ENTRIES`` entries and, past the first, ``MAX_READ_BYTES`` of payload: what the
    supervisor builds is bounded; a caller asks again from the next entry id."""

    ledger_id = req.int_param("ledger_id", 0, (1 << 63) - 1)
    first = req.int_param("start_entry_id", 0, (1 << 63) - 1, default=0)
    last = req.int_param("end_entry_id", -1, (1 << 63) - 1, default=-1)
    if last != -1 and last < first:
        raise HttpError(400, "end_entry_id is before start_entry_id")
    last = first + MAX_READ_ENTRIES - 1 if last == -1 else min(last, first + MAX_READ_ENTRIES - 1)
    conf = api.sup.conf
    try:
        env, index = open_index_readonly(conf)
    except IndexUnreadable as e:
        raise HttpError(503, str(e)) from None
    reader = EntryLogReader(ledger_dirs_of(conf))
    out = {}
    size = 0
    try:
        with env.begin() as txn:
            for entry_id, loc in indexed_entries(index, txn, ledger_id, first, last):
                data = bytes(reader.read(*loc))
                payload = data[40 if digest_kind(data) else 32:]
                size += len(payload)
                if out and size > MAX_READ_BYTES:
                    break
                out[str(entry_id)] = payload.decode("utf-8", errors="replace")
    except FileNotFoundError as e:
        raise HttpError(503, str(e)) from None
    finally:
        reader.close()
        env.close()
    if not out:
        raise HttpError(404, f"ledger {ledger_id}: this bookie holds no entry of it in "
                             f"{first}..{last}")
    return Response(out)


# -- the cluster ---------------------------------------------------------------------------------

def delete_ledger(api: AdminApi, req: Request) -> Response:
    ledger_id = req.int_param("ledger_id", 0, (1 << 63) - 1)

    def body(store):
        store.read_ledger(ledger_id)  # 404 when there is none
        store.remove_ledger(ledger_id)
        return {"deleted": ledger_id}
    return Response(api.with_store(body))


def list_bookie_info(api: AdminApi, req: Request) -> Response:

    def body(store):
        return {"writable": store.list_bookies(), "readonly": store.list_bookies(readonly=True)}
    listed = api.with_store(body)
    here = bookie_info(api, req).body
    return Response({**listed, "bookies": len(listed["writable"]) + len(listed["readonly"]),
                     "this_bookie": {"bookie_id": api.sup.conf.bookie_id, **orjson.loads(here)}})


def decommission(api: AdminApi, req: Request) -> Response:
    """Mark every ledger that names the bookie under-replicated: the autorecovery workers
    re-replicate them (``bookie shell decommissionbookie`` also waits and removes the cookie).
    404 for an id the cluster does not know (appliance/shell/known.py)."""

    doc = req.json()
    bookie = doc.get("bookie_src") if isinstance(doc, dict) else None
    try:
        check_bookie_id(bookie)
    except ValueError:
        raise HttpError(400, 'expected {"bookie_src": BOOKIE_ID} (host:port, or a bookieId)') from None

    def body(store):
        try:
            require_bookies(store, [bookie])
        except UnknownError as e:
            raise HttpError(404, str(e)) from None
        ur = UnderReplication(store)
        marked = 0
        for ledger_id in list(store.list_ledgers()):
            try:
                meta, _ = store.read_ledger(ledger_id)
            except NoSuchLedgerError:
                continue
            if bookie in named_bookies(meta) and ur.mark(ledger_id, [bookie]):
                marked += 1
        return {"bookie_src": bookie, "marked_ledgers": marked,
                "autorecovery_enabled": ur.enabled()}
    return Response(api.with_store(body))


def get_autorecovery(api: AdminApi, req: Request) -> Response:
    return Response(api.with_store(lambda store: {"enabled": UnderReplication(store).enabled()}))


def put_autorecovery(api: AdminApi, req: Request) -> Response:
    flag = req.param("enabled")
    if flag is None and req.body.strip():
        doc = req.json()
        flag = doc.get("enabled") if isinstance(doc, dict) else None
    if isinstance(flag, str) and flag in ("true", "false"):
        flag = flag == "true"
    if not isinstance(flag, bool):
        raise HttpError(400, 'expected ?enabled=true|false or {"enabled": true|false}')

    def body(store):
        ur = UnderReplication(store)
        ur.set_enabled(flag)
        return {"enabled": ur.enabled()}
    return Response(api.with_store(body))


def put_server_config(api: AdminApi, req: Request) -> Response:
    raise HttpError(409, "the bookie reads its configuration once, at start: change "
                         "/etc/bookie/bookie.conf (or --set) and restart it")


ROUTES = {
    "/api/v1/bookie/gc": {"GET": gc_status},
    "/api/v1/bookie/gc_details": {"GET": gc_details},
    "/api/v1/bookie/gc/suspend_compaction": {"GET": get_suspension, "PUT": suspend},
    "/api/v1/bookie/gc/resume_compaction": {"PUT": resume},
    "/api/v1/bookie/last_log_mark": {"GET": last_log_mark},
    "/api/v1/bookie/list_bookie_info": {"GET": list_bookie_info},
    "/api/v1/bookie/expand_storage": {"PUT": expand_storage},
    "/api/v1/ledger/read": {"GET": read_ledger},
    "/api/v1/ledger/delete": {"DELETE": delete_ledger},
    "/api/v1/autorecovery/decommission": {"PUT": decommission},
    "/api/v1/autorecovery/status": {"GET": get_autorecovery, "PUT": put_autorecovery},
    "/api/v1/config/server_config": {"PUT": put_server_config},
}


def register(routes: dict) -> None:
    """Add these paths (and methods, beside the ones a path has already) to ``routes``."""
    for path, methods in ROUTES.items():
        routes.setdefault(path, {}).update(methods)
