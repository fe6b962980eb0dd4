"""The bookie's HTTP admin API (BookKeeper's paths) and its /metrics endpoint.

Routes are a table, ``ROUTES``: path -> {method: handler}.  A handler takes the ``AdminApi``
(the supervisor's view) and the ``Request`` and returns a ``Response``, or raises ``HttpError``
with a status and a message; every answer but /metrics is JSON.  What the server promises:

- an unknown path is 404, a known path with another method 405 (with ``Allow``), bad JSON or a
  missing / malformed parameter 400, a body over ``MAX_BODY_BYTES`` 413; the body of every error
  is ``{"error": "<one line>"}``;
- no request, however malformed, produces a traceback or stops the server: what a handler
  raises unexpectedly is a 500 with one log line;
- with ``httpServerAuthTokenFile`` every request but GET /heartbeat must carry ``Authorization:
  Bearer <token>`` (admin/auth.py), checked before the route, the parameters or the
  body are looked at: a request without it is 401 with ``WWW-Authenticate: Bearer`` whatever
  its path (its body read and dropped), and its connection is closed;
- without a token, a request whose ``Host`` is not a name of this bookie is 403 (DNS rebinding;
  GET /heartbeat excepted), checked before the route; and only the read-only GETs that hand
  out no entries, and the two writes of ``auth.TOKENLESS_WRITES``, are served: every other
  known route and method is 403 naming ``httpServerAuthTokenFile``, checked before the
  parameters or the body are looked at;
- each connection is served by a thread of its own, at most ``max_connections`` at a time and
  ``max_per_peer`` per peer address; past a cap the new connection takes the place of the one
  that has waited longest for a request it has not sent whole, and only when none is waiting is
  it answered 503 and closed; a connection that sends nothing for ``idle_timeout_s``, or has not
  sent a whole request (line, headers, body) within ``request_timeout_s``, is closed
  (admin/http_guard.py: slowloris).

docs/admin.md lists every path with an example.
"""

from __future__ import annotations

from bookie.appliance.admin import ops, parity, recover, safety
from bookie.appliance.admin.api import AdminApi, HttpError, Request, Response  # noqa: F401
from bookie.appliance.admin.basic import (
    bookie_info, bookie_state, get_readonly, heartbeat, ledger_metadata, list_bookies,
    list_ledgers, metrics, put_readonly, server_config, trigger_gc)
from bookie.appliance.admin.server import (  # noqa: F401 - the supervisor's
    AdminHttpServer, allowed_hosts, start_server, tls_context)

# The modules: ``api`` (what a handler takes and returns), ``basic``, ``parity``, ``ops``,
# ``safety``, ``recover`` (the handlers), ``server`` (the HTTP server), ``auth`` (the token),
# ``http_guard`` (the connection caps).  This file holds the routes table and names the supervisor's entry points.

ROUTES = {
    "/heartbeat": {"GET": heartbeat},
    "/metrics": {"GET": metrics},
    "/api/v1/config/server_config": {"GET": server_config},
    "/api/v1/bookie/info": {"GET": bookie_info},
    "/api/v1/bookie/state": {"GET": bookie_state},
    "/api/v1/bookie/state/readonly": {"GET": get_readonly, "PUT": put_readonly},
    "/api/v1/bookie/gc": {"PUT": trigger_gc},
    "/api/v1/bookie/list_bookies": {"GET": list_bookies},
    "/api/v1/ledger/list": {"GET": list_ledgers},
    "/api/v1/ledger/metadata": {"GET": ledger_metadata},
    # BookKeeper's further paths (issue 24.6): admin/parity.py
    "/api/v1/bookie/is_ready": {"GET": parity.is_ready},
    "/api/v1/bookie/list_disk_file": {"GET": parity.list_disk_file},
    "/api/v1/bookie/sanity": {"GET": parity.sanity},
    "/api/v1/bookie/cluster_info": {"GET": parity.cluster_info},
    "/api/v1/autorecovery/list_under_replicated_ledger": {"GET": parity.list_under_replicated},
    "/api/v1/autorecovery/who_is_auditor": {"GET": parity.who_is_auditor},
    "/api/v1/autorecovery/trigger_audit": {"PUT": parity.trigger_audit},
    "/api/v1/autorecovery/lost_bookie_recovery_delay": {
        "GET": parity.get_lost_bookie_recovery_delay,
        "PUT": parity.put_lost_bookie_recovery_delay},
}
ops.register(ROUTES)  # the operator's paths
safety.register(ROUTES)  # safe_to_stop (issue 35)
recover.register(ROUTES)  # PUT /api/v1/autorecovery/bookie
METRICS_ROUTES = {"/metrics": ROUTES["/metrics"]}  # prometheusStatsHttpPort serves only this
