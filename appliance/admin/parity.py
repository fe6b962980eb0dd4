"""BookKeeper's admin paths that the first table of the admin API lacked (issue 24.6).

Each is a handler of the same form as ``basic.py``'s (``(api, req) -> Response``, ``HttpError``
for a refusal), registered into ``admin.ROUTES`` with one line each, so it is served behind the
same token, limits and error rules.  The handlers import ``api.py``, not the table.  Shapes are BookKeeper's where it has one:

- ``GET /api/v1/bookie/is_ready``: 200 ``{"ready": true}`` once the bookie serves (every worker
  alive, registered in the metadata store, not stopping); otherwise 503 ``{"ready": false,
  "reason": ...}``, so a readiness probe needs no body parsing.
- ``GET /api/v1/bookie/list_disk_file[?file_type=journal|entrylog|index]``: BookKeeper's
  ``{"journal files": "a, b", "entrylog files": "...", "index files": "..."}`` (names, each list
  comma-separated, sorted).
- ``GET /api/v1/bookie/sanity``: writes and reads back ``SANITY_ENTRIES`` entries on this bookie
  only (a ledger of E=1 on it, deleted after), ``{"success": true, ...}``; a failure is 503.
- ``GET /api/v1/bookie/cluster_info``: BookKeeper's ``auditorElected``, ``auditorId``,
  ``clusterUnderReplicated``, ``ledgerReplicationEnabled``, ``totalBookiesCount`` (bookies with
  a cookie: ever joined), ``writableBookiesCount``, ``readonlyBookiesCount``,
  ``unavailableBookiesCount`` (joined, not registered now).
- ``GET /api/v1/autorecovery/list_under_replicated_ledger[?print_missing_replica=true]``: the
  marked ledger ids (``[]`` when none: 200, where BookKeeper answers 404), or with the parameter
  ``{ledger_id: [missing bookie, ...]}``.
- ``GET /api/v1/autorecovery/who_is_auditor``: ``{"Auditor": bookie_id}`` (null when no
  autorecovery worker stands).
- ``PUT /api/v1/autorecovery/trigger_audit``: ``{"triggered": true}``; the auditor runs a full
  check on its next tick.
- ``GET|PUT /api/v1/autorecovery/lost_bookie_recovery_delay``: ``{"delay_seconds": N}``; a PUT
  of ``{"delay_seconds": N}`` stores N cluster-wide in the metadata store, and the auditor,
  wherever it runs, uses it from its next tick instead of its own ``lostBookieRecoveryDelay``.
"""

from __future__ import annotations

import os

from bookie.appliance.admin.api import AdminApi, HttpError, Request, Response
from bookie import wire
from bookie.client.config import ClientConfig
from bookie.client.digest import master_key, password_digest
from bookie.client.resolver import BookieResolver
from bookie.metadata.errors import NoSuchNodeError
from bookie.metadata.ledger import LedgerMetadata
from bookie.metadata.store import COOKIES
from bookie.metadata.underreplication import UnderReplication

SANITY_ENTRIES = 10
FILE_TYPES = {"journal": "journal files", "entrylog": "entrylog files", "index": "index files"}


def is_ready(api: AdminApi, req: Request) -> Response:
    sup = api.sup
    reason = ""
    dead = sorted(role for role, w in sup.workers.items()
                  if w.proc is None or w.proc.poll() is not None)
    if sup.stopping:
        reason = f"stopping: {sup.stop_reason or 'asked to'}"
    elif dead:
        reason = f"worker(s) not running: {', '.join(dead)}"
    elif sup.conf.metadata_uri and sup.registration is None:
        reason = "not registered in the metadata store yet"
    if reason:
        return Response({"ready": False, "reason": reason}, 503)
    return Response({"ready": True})


def _names(directory: str, keep) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if keep(n))
    except OSError:
        return []


def list_disk_file(api: AdminApi, req: Request) -> Response:
    kind = req.param("file_type")
    if kind is not None and kind not in FILE_TYPES:
        raise HttpError(400, f"parameter file_type: expected journal, entrylog or index, got "
                             f"{kind[:20]!r}")
    conf = api.sup.conf
    found = {
        "journal": [os.path.join(j, "current", n) if len(conf.journal_dirs) > 1 else n
                    for j in conf.journal_dirs
                    for n in _names(os.path.join(j, "current"), lambda n: n.endswith(".txn"))],
        "entrylog": [n for d in conf.ledger_dirs for n in _names(
            os.path.join(d, "current"), lambda n: n.endswith(".log"))],
        "index": [f"index/{n}" for d in conf.index_dirs for n in _names(
            os.path.join(d, "current", "index"), lambda n: n.endswith(".mdb"))],
    }
    return Response({FILE_TYPES[k]: ", ".join(v) for k, v in found.items()
                     if kind is None or k == kind})


def sanity(api: AdminApi, req: Request) -> Response:
    from bookie.autorecovery.copier import Bookies, CopyError, Key  # lazy: zmq
    from bookie.autorecovery.worker import curve_keys  # lazy: zmq
    from bookie.client.auth import client_curve  # lazy: zmq

    bookie = api.sup.conf.bookie_id
    curve = client_curve(ClientConfig.build(curve_keys(api.sup.conf)))

    def body(store):
        meta = LedgerMetadata(1, 1, 1, digest_type="dummy", password_digest=password_digest(b""),
                              custom={"bookiesanity": bookie}, fragments=[(0, [bookie])])
        ledger_id, _ = store.create_ledger(meta)
        entries = [wire.pack_entry(ledger_id, e, e - 1, 8, b"", b"sanity%02d" % e)
                   for e in range(SANITY_ENTRIES)]
        bookies = Bookies(10.0, curve, BookieResolver(store))
        try:
            bookies.add_recovery(bookie, ledger_id, Key(master_key(b"")), entries)
            got = bookies.read_strided(bookie, ledger_id, 0, SANITY_ENTRIES, 1)
            error = "" if got == entries else (f"read back {len(got)} of {len(entries)} "
                                               f"entries, or different bytes")
        except CopyError as e:
            error = str(e)
        finally:
            bookies.close()
            store.remove_ledger(ledger_id)  # the GC drops what the bookie stored
        return ledger_id, error
    ledger_id, error = api.with_store(body)
    doc = {"success": not error, "bookie": bookie, "entries": SANITY_ENTRIES,
           "ledger_id": ledger_id}
    return Response({**doc, "error": error}, 503) if error else Response(doc)


def cluster_info(api: AdminApi, req: Request) -> Response:
    return Response(api.with_store(cluster_info_of))


def cluster_info_of(store) -> dict:
    """BookKeeper's cluster info from ``store`` (module doc); ``bookie shell clusterinfo`` too."""

    ur = UnderReplication(store)
    writable = set(store.list_bookies(readonly=False))
    readonly = set(store.list_bookies(readonly=True))
    try:
        joined = set(store.children(COOKIES))
    except NoSuchNodeError:
        joined = set()
    auditor = ur.auditor()
    total = joined | writable | readonly
    return {"auditorElected": auditor is not None,
            "auditorId": _auditor_bookie(auditor) or "",
            "clusterUnderReplicated": bool(ur.marks()),
            "ledgerReplicationEnabled": ur.enabled(),
            "totalBookiesCount": len(total),
            "writableBookiesCount": len(writable),
            "readonlyBookiesCount": len(readonly),
            "unavailableBookiesCount": len(total - writable - readonly)}


def list_under_replicated(api: AdminApi, req: Request) -> Response:
    with_missing = req.bool_param("print_missing_replica")

    def body(store):
        marks = UnderReplication(store).marks()
        if with_missing:
            return {str(k): list(v) for k, v in sorted(marks.items())}
        return sorted(marks)
    return Response(api.with_store(body))


def who_is_auditor(api: AdminApi, req: Request) -> Response:
    return Response({"Auditor": api.with_store(
        lambda store: _auditor_bookie(UnderReplication(store).auditor()))})


def trigger_audit(api: AdminApi, req: Request) -> Response:
    version = api.with_store(lambda store: UnderReplication(store).trigger_audit())
    return Response({"triggered": True, "trigger": version})


def get_lost_bookie_recovery_delay(api: AdminApi, req: Request) -> Response:
    stored = api.with_store(lambda store: UnderReplication(store).recovery_delay_s())
    configured = api.sup.conf.value("lostBookieRecoveryDelay")
    return Response({"delay_seconds": configured if stored is None else stored,
                     "source": "configuration" if stored is None else "metadata store"})


def put_lost_bookie_recovery_delay(api: AdminApi, req: Request) -> Response:
    delay = req.json().get("delay_seconds")
    if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= 10 ** 7:
        raise HttpError(400, 'expected {"delay_seconds": N}, N a whole number of seconds '
                             '0..10000000')
    api.with_store(lambda store: UnderReplication(store).set_recovery_delay_s(delay))
    return Response({"delay_seconds": delay, "source": "metadata store"})


def _auditor_bookie(auditor) -> str | None:
    """The bookie id of an auditor's worker id (``BOOKIE_ID/PID``), or None."""
    return auditor[1].rsplit("/", 1)[0] if auditor else None

