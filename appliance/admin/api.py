"""What the admin server and its handlers share: a handler takes the ``AdminApi`` (the
supervisor's view) and the ``Request`` and returns a ``Response``, or raises ``HttpError`` with a
status and a message (the rules: ``bookie.appliance.admin``'s docstring)."""

from __future__ import annotations

import threading

import orjson

from bookie.properties import PropertiesError, parse_bool
from bookie.metadata import MetadataError, NoSuchLedgerError

MAX_BODY_BYTES = 64 * 1024
LEDGERS_PER_PAGE = 1000


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


class Request:
    def __init__(self, method: str, path: str, query: dict[str, list[str]], body: bytes):
        self.method = method
        self.path = path
        self.query = query
        self.body = body

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        if not values:
            return default
        if len(values) > 1:
            raise HttpError(400, f"parameter {name} given {len(values)} times")
        return values[0]

    def int_param(self, name: str, lo: int, hi: int, default: int | None = None) -> int:
        raw = self.param(name)
        if raw is None:
            if default is None:
                raise HttpError(400, f"missing parameter {name}")
            return default
        try:
            value = int(raw)
        except ValueError:
            raise HttpError(400, f"parameter {name}: {raw[:40]!r} is not an integer") from None
        if not lo <= value <= hi:
            raise HttpError(400, f"parameter {name}: {value} is out of range ({lo}..{hi})")
        return value

    def bool_param(self, name: str) -> bool:
        raw = self.param(name) or "false"
        try:
            return parse_bool(raw)  # the vocabulary of every configuration surface
        except PropertiesError:
            raise HttpError(400, f"parameter {name}: expected true or false, got "
                                 f"{raw[:20]!r}") from None

    def json(self) -> dict:
        if not self.body.strip():
            raise HttpError(400, "expected a JSON object in the request body")
        try:
            value = orjson.loads(self.body)
        except orjson.JSONDecodeError as e:
            raise HttpError(400, f"request body is not JSON: {e}") from None
        if not isinstance(value, dict):
            raise HttpError(400, "expected a JSON object in the request body")
        return value


class Response:
    def __init__(self, body, status: int = 200, content_type: str = "application/json"):
        self.status = status
        self.content_type = content_type
        self.body = body if isinstance(body, bytes) else orjson.dumps(body)


class AdminApi:
    """What the routes read and change: the supervisor (state, store, workers) and the registry.

    The supervisor's own loop runs on another thread: the routes only read its plain fields,
    and change it through its thread-safe ``set_readonly`` and the GC request file.
    """

    def __init__(self, sup, registry):
        self.sup = sup
        self.registry = registry
        self._store_lock = threading.Lock()

    def store(self):
        if not self.sup.conf.metadata_uri or self.sup.store is None:
            raise HttpError(409, "this bookie has no metadata store (metadataServiceUri is empty)")
        return self.sup.store

    def with_store(self, fn):

        store = self.store()
        try:
            with self._store_lock:
                return fn(store)
        except NoSuchLedgerError as e:
            raise HttpError(404, str(e) or "no such ledger") from None
        except MetadataError as e:
            raise HttpError(503, f"metadata store: {e}") from None
