"""``GET /api/v1/bookie/safe_to_stop?bookies=ID[,ID...][&rack=R][&strict=true]``: whether
stopping those bookies (or that rack) now is safe, as ``bookie shell whatif --json`` says it:
200 with ``{"safe": ..., "below_ack_quorum": [...], "unreadable": [...], "last_copy": [...],
"stalled": [...], "reduced_redundancy": [...], ...}`` whatever the answer (a rolling restart's
rule unless ``strict``), 400 for a question that is wrong (no bookie and no rack, a malformed
id), 404 for a bookie id or rack the cluster does not know.
Registered into ``admin.ROUTES`` like every route: behind the same token and limits."""

from __future__ import annotations

from bookie.appliance.admin.api import AdminApi, HttpError, Request, Response
from bookie.appliance.shell.known import UnknownError
from bookie.appliance.shell.whatif import StopQuestionError, stop_verdict


def safe_to_stop(api: AdminApi, req: Request) -> Response:

    bookies = [b for b in (req.param("bookies") or "").split(",") if b.strip()]
    rack = req.param("rack") or None
    strict = req.bool_param("strict")

    def body(store):
        try:
            return stop_verdict(store, [b.strip() for b in bookies], rack, strict=strict)
        except StopQuestionError as e:
            raise HttpError(400, str(e)) from None
        except UnknownError as e:
            raise HttpError(404, str(e)) from None
    return Response(api.with_store(body))


def register(routes: dict) -> None:
    routes["/api/v1/bookie/safe_to_stop"] = {"GET": safe_to_stop}
