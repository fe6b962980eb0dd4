"""``PUT /api/v1/autorecovery/bookie``: BookKeeper's "recover a failed bookie" path.

Body, as BookKeeper's: ``{"bookie_src": ["ID", ...], "delete_cookie": false}``.  Answers 200
``{"recovering": [...]}`` at once and runs ``bookie shell recover SRC...`` (every fragment on
those bookies copied to others, the metadata repointed) in the background, as BookKeeper runs
it on an executor; then, with ``delete_cookie``, removes their cookies from the store.  The
outcome is a log line of the supervisor (``recover of ... done`` / ``failed``).  The copies
speak CURVE with the bookie's own key where it has one, as its autorecovery does.
``bookie_dest`` is refused: the replacement is chosen by the cluster's placement, not named.
400 for a body that is not that; 404 for a bookie id the cluster does not know
(appliance/shell/known.py); 409 without a metadata store."""

from __future__ import annotations

import subprocess
import sys
import threading

from bookie.appliance.admin.api import AdminApi, HttpError, Request, Response
from bookie.appliance.shell.known import UnknownError, require_bookies
from bookie.metadata.bookie_ids import bookie_id_problem


def recover_bookie(api: AdminApi, req: Request) -> Response:

    body = req.json()
    src = body.get("bookie_src")
    if not isinstance(src, list) or not src or not all(isinstance(b, str) for b in src):
        raise HttpError(400, "bookie_src: expected a list of bookie ids")
    for b in src:
        problem = bookie_id_problem(b)
        if problem:
            raise HttpError(400, f"bookie_src: {b[:80]!r} {problem}")
    if body.get("bookie_dest"):
        raise HttpError(400, "bookie_dest: not supported: the copies go where the cluster's "
                             "placement puts them (leave it out)")
    delete_cookie = body.get("delete_cookie", False)
    if not isinstance(delete_cookie, bool):
        raise HttpError(400, "delete_cookie: expected true or false")
    conf = api.sup.conf
    if not conf.metadata_uri:
        raise HttpError(409, "no metadata store (metadataServiceUri is empty)")
    api.with_store(lambda store: _known(store, src))  # a typo is refused here, not in the log
    threading.Thread(target=_run, args=(api.sup, list(src), delete_cookie), daemon=True,
                     name="admin-recover").start()
    return Response({"recovering": list(src), "delete_cookie": delete_cookie})


def _known(store, src: list[str]) -> None:
    try:
        require_bookies(store, src)
    except UnknownError as e:
        raise HttpError(404, f"bookie_src: {e}") from None


def _shell(conf, *argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bookie", "shell", *argv, "--metadata", conf.metadata_uri]
    if conf.value("zkDigestAuthFile"):
        cmd += ["--zk-digest-auth-file", conf.value("zkDigestAuthFile")]
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=24 * 3600)


def _run(sup, src: list[str], delete_cookie: bool) -> None:
    from bookie.autorecovery.worker import curve_keys  # lazy: zmq

    keys = [x for k, v in curve_keys(sup.conf).items() for x in ("--set", f"{k}={v}")]
    try:
        done = _shell(sup.conf, "recover", *src, *keys)
        if done.returncode == 0 and delete_cookie:
            for b in src:
                _shell(sup.conf, "cookie_delete", b, "-force")
    except (OSError, subprocess.SubprocessError) as e:
        sup.log("recover failed", bookies=",".join(src), error=str(e))
        return
    last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [""]
    sup.log("recover done" if done.returncode == 0 else "recover failed",
            bookies=",".join(src), status=done.returncode, said=last[0][:300])


def register(routes: dict) -> None:
    routes["/api/v1/autorecovery/bookie"] = {"PUT": recover_bookie}
