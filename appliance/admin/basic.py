"""The basic admin paths (BookKeeper's names): heartbeat, /metrics, the configuration, this
bookie's state, read-only mode, gc, the bookies and the ledgers of the cluster."""

from __future__ import annotations

import os
import shutil

from bookie.appliance.admin.api import LEDGERS_PER_PAGE, AdminApi, HttpError, Request, Response
from bookie.appliance.exposition import CONTENT_TYPE
from bookie.workers.config import KEYS
from bookie.workers.gc_worker import request_gc


def heartbeat(api: AdminApi, req: Request) -> Response:
    return Response({"status": "OK"})


def metrics(api: AdminApi, req: Request) -> Response:
    return Response(api.registry.text(), content_type=CONTENT_TYPE)


def server_config(api: AdminApi, req: Request) -> Response:
    conf = api.sup.conf
    return Response({key.name: conf.public_value(key.name) for key in KEYS})  # secrets hidden


def bookie_info(api: AdminApi, req: Request) -> Response:
    free = total = 0
    seen = set()
    for d in api.sup.conf.ledger_dirs:  # each filesystem once
        try:
            dev = os.stat(d).st_dev
            if dev in seen:
                continue
            seen.add(dev)
            usage = shutil.disk_usage(d)
        except OSError as e:
            raise HttpError(503, f"ledger directory {d}: {e.strerror}") from None
        free += usage.free
        total += usage.total
    return Response({"freeSpace": free, "totalSpace": total})


def bookie_state(api: AdminApi, req: Request) -> Response:
    sup = api.sup
    return Response({"running": not sup.stopping, "readOnly": sup.readonly,
                     "shuttingDown": sup.stopping, "availableForHighPriorityWrites": not sup.readonly,
                     "forcedReadOnly": sup.forced_readonly, "disksFull": sup.disks_full,
                     "ledgerDiskNoRoom": sup.no_room, "journalDiskFull": sup.journal_full})


def get_readonly(api: AdminApi, req: Request) -> Response:
    return Response({"readOnly": api.sup.readonly})


def put_readonly(api: AdminApi, req: Request) -> Response:
    body = req.json()
    flag = body.get("readOnly")
    if not isinstance(flag, bool):
        raise HttpError(400, 'expected {"readOnly": true} or {"readOnly": false}')
    api.sup.set_readonly(flag)
    return Response({"readOnly": api.sup.readonly, "forcedReadOnly": api.sup.forced_readonly,
                     "disksFull": api.sup.disks_full})


def trigger_gc(api: AdminApi, req: Request) -> Response:
    body = req.json() if req.body.strip() else {}  # optional; if there is one it must be JSON
    if not isinstance(body, dict):
        raise HttpError(400, 'expected {"forceMajor": true|false, "forceMinor": true|false}')
    flags = {}
    for name in ("forceMajor", "forceMinor"):
        flags[name] = body.get(name, False)
        if not isinstance(flags[name], bool):
            raise HttpError(400, f"{name}: expected true or false")
    if not api.sup.conf.metadata_uri:
        raise HttpError(409, "this bookie has no metadata store: its GC never deletes anything")
    # the GC worker starts a pass within 100 ms and removes the request files
    request_gc(api.sup.run_dir, major=flags["forceMajor"], minor=flags["forceMinor"])
    return Response({"gcRequested": True, **flags})


def list_bookies(api: AdminApi, req: Request) -> Response:
    kind = req.param("type", "rw")
    if kind not in ("rw", "ro"):
        raise HttpError(400, f"parameter type: expected rw or ro, got {kind[:20]!r}")
    hostnames = req.bool_param("print_hostnames")

    def body(store):
        out = {}
        for bookie_id in store.list_bookies(readonly=kind == "ro"):
            # the host it registered (a named bookieId is no address), else its address id's
            host = (store.bookie_info(bookie_id) or {}).get("host") if hostnames else None
            out[bookie_id] = (host or bookie_id.rsplit(":", 1)[0]) if hostnames else None
        return out
    return Response(api.with_store(body))


def list_ledgers(api: AdminApi, req: Request) -> Response:
    with_meta = req.bool_param("print_metadata")
    page = req.int_param("page", 1, 1 << 31) if req.param("page") is not None else None

    def body(store):
        ids = sorted(store.list_ledgers())
        if page:
            ids = ids[(page - 1) * LEDGERS_PER_PAGE:page * LEDGERS_PER_PAGE]
        out = {}
        for lid in ids:
            if with_meta:
                try:
                    meta, _ = store.read_ledger(lid)
                    out[str(lid)] = meta.to_dict()
                except KeyError:  # removed between the listing and the read
                    continue
            else:
                out[str(lid)] = None
        return out
    return Response(api.with_store(body))


def ledger_metadata(api: AdminApi, req: Request) -> Response:
    ledger_id = req.int_param("ledger_id", 0, (1 << 63) - 1)

    def body(store):
        meta, version = store.read_ledger(ledger_id)
        return {str(ledger_id): {"version": version, **meta.to_dict()}}
    return Response(api.with_store(body))
