"""The admin HTTP server: one thread per connection under the caps of ``http_guard``, the token
(``auth``), and the answer of each request from the routes table it is given (the rules:
``bookie.appliance.admin``'s docstring)."""

from __future__ import annotations

import http.server
import io
import socket
import ssl
import sys
import threading
import time
import urllib.parse

import orjson

from bookie.appliance.admin.api import MAX_BODY_BYTES, AdminApi, HttpError, Request, Response
from bookie.appliance.admin.auth import BearerAuth, tokenless_refusal
from bookie.appliance.admin.http_guard import (
    ConnectionPlaces, RequestDeadline, allowed_host_names, host_refusal)
from bookie.metadata.errors import AccessDeniedError
from bookie.metadata.secret_file import read_private_file


# ---- the server ----------------------------------------------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    server: "AdminHttpServer"
    server_version = "bookie-admin"
    sys_version = ""

    def setup(self):
        self.timeout = self.server.idle_timeout_s  # each write; reads: the deadline below
        self.tls_failed = False
        if isinstance(self.request, ssl.SSLSocket):  # the handshake here, not in the accept loop
            self.request.settimeout(self.server.request_timeout_s)
            try:
                self.request.do_handshake()
            except (ssl.SSLError, OSError) as e:  # plain HTTP, a bad client, too slow: closed
                self.tls_failed = True
                self.server.log("admin connection closed", level="debug",
                                reason=f"TLS handshake: {e}"[:200])
        super().setup()
        self.deadline = RequestDeadline(self.server.request_timeout_s, self.server.idle_timeout_s)
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self.deadline))

    def handle(self):
        if not self.tls_failed:
            super().handle()

    def handle_one_request(self):
        now = time.monotonic()
        self.deadline.start(now)  # the whole next request must arrive by then
        self.server.places.waiting(self.request, now)
        super().handle_one_request()
        if not self.server.places.holds(self.request):  # evicted meanwhile
            self.close_connection = True

    def _request_read(self) -> None:
        """The request is in whole: no deadline for the answer, and its place is kept."""
        self.deadline.done()
        self.connection.settimeout(self.server.idle_timeout_s)
        self.server.places.serving(self.request)

    def do_GET(self):  # noqa: N802 - http.server's names
        self._dispatch("GET")

    def do_PUT(self):  # noqa: N802
        self._dispatch("PUT")

    def do_POST(self):  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self):  # noqa: N802
        self._dispatch("DELETE")

    def do_HEAD(self):  # noqa: N802
        self._dispatch("HEAD")

    def _dispatch(self, method: str) -> None:
        extra = None
        try:
            response = self._answer(method)
        except HttpError as e:
            response = Response({"error": e.message}, e.status)
            extra = e.headers
            if e.status == 405:
                extra = {"Allow": ", ".join(sorted(self.server.routes[self._path()]))}
        except (TimeoutError, ConnectionError):
            self.close_connection = True
            return
        except Exception as e:  # noqa: BLE001 - a bug must cost one answer, not the server
            self.server.log("admin request failed", method=method, path=self.path[:200],
                            error=f"{type(e).__name__}: {e}")
            response = Response({"error": "internal error; see the bookie's log"}, 500)
        self._send(response, extra)

    def _path(self) -> str:
        path = urllib.parse.urlsplit(self.path).path
        return path.rstrip("/") or "/"

    def _answer(self, method: str) -> Response:
        split = urllib.parse.urlsplit(self.path)
        path = self._path()
        self._check_host(method, path)
        self._authenticate(method, path)
        methods = self.server.routes.get(path)
        if methods is None:
            raise HttpError(404, f"no such path: {path[:200]}")
        handler = methods.get(method)
        if handler is None:
            raise HttpError(405, f"{method} not allowed on {path}")
        self._check_tokenless(method, path)
        try:
            query = urllib.parse.parse_qs(split.query, keep_blank_values=True, strict_parsing=False,
                                          max_num_fields=50)
        except ValueError as e:
            raise HttpError(400, f"bad query string: {e}") from None
        body = self._body()
        self._request_read()
        return handler(self.server.api, Request(method, path, query, body))

    def _check_host(self, method: str, path: str) -> None:
        """403 for a Host that is not this bookie's, on a server that takes no token."""
        if self.server.auth is not None or (method, path) == ("GET", "/heartbeat"):
            return
        refusal = host_refusal(self.headers.get_all("Host") or [], self.server.allowed_hosts)
        if refusal is None:
            return
        self.server.log("admin request refused: Host", level="warning",
                        peer=self.client_address[0], host=(self.headers.get("Host") or "")[:100])
        self.close_connection = True
        raise HttpError(403, refusal)

    def _check_tokenless(self, method: str, path: str) -> None:
        """403 for what a server without a token does not serve (auth.tokenless_refusal)."""
        if self.server.auth is not None:
            return
        refusal = tokenless_refusal(method, path)
        if refusal is None:
            return
        self.server.log("admin request refused: needs a token", level="warning",
                        peer=self.client_address[0], method=method, path=path[:200])
        self._drop_body()
        raise HttpError(403, refusal)

    def _drop_body(self) -> None:
        """Read and drop the body of a refused request: a close with unread bytes resets the
        connection, and the client may lose the answer (at most MAX_BODY_BYTES; larger: closed)."""
        try:
            self._body()
        except HttpError:
            pass
        self.close_connection = True

    def _authenticate(self, method: str, path: str) -> None:
        """401 unless the server needs no token, the route is public, or the token is right."""
        auth = self.server.auth
        if auth is None:
            return
        refusal = auth.refusal(method, path, self.headers.get_all("Authorization") or [])
        if refusal is None:
            return
        auth.refused(self.client_address[0], method, path, refusal)
        self._drop_body()
        raise HttpError(401, refusal.message, {"WWW-Authenticate": refusal.challenge})

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise HttpError(411, "send the body with a Content-Length")
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        try:
            length = int(raw)
        except ValueError:
            raise HttpError(400, "Content-Length is not a number") from None
        if length < 0:
            raise HttpError(400, "Content-Length is negative")
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise HttpError(413, f"request body over {MAX_BODY_BYTES} bytes")
        body = self.rfile.read(length)
        if len(body) < length:
            self.close_connection = True
            raise HttpError(400, "request body shorter than its Content-Length")
        return body

    def _send(self, response: Response, extra: dict | None = None) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def send_error(self, code, message=None, explain=None):
        """http.server's own refusals (bad request line, headers too long) as JSON too."""
        body = orjson.dumps({"error": message or self.responses.get(code, ("error",))[0]})
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # a request line it could not read: answer 1.0
            self.request_version = "HTTP/1.0"
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if getattr(self, "command", None) != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(body)
        except OSError:
            pass

    def log_request(self, code="-", size="-"):
        # Also called for requests http.server refused before it parsed a path or a command.
        self.server.log("admin request", level="debug", method=getattr(self, "command", None) or "-",
                        path=(getattr(self, "path", None) or "-")[:200], status=int(code))

    def log_error(self, format, *args):  # noqa: A002 - http.server's signature
        self.server.log("admin connection closed", level="debug", reason=(format % args)[:200])


class _DeadlineReader(io.RawIOBase):
    """A connection's reads, each bounded by its ``RequestDeadline`` (a TimeoutError past it)."""

    def __init__(self, sock: socket.socket, deadline: RequestDeadline):
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        self._sock.settimeout(self._deadline.read_timeout_s(time.monotonic()))
        return self._sock.recv_into(b)


class AdminHttpServer(http.server.ThreadingHTTPServer):
    """One thread per connection, at most ``max_connections`` (``max_per_peer`` per address;
    see admin/http_guard.py for who gives way); idle and slow connections time out.
    With a ``token``, every request but GET /heartbeat must carry it (``auth``); without one,
    ``allowed_hosts`` (None: any) are the ``Host`` names served."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address, api: AdminApi, routes: dict, log, max_connections: int = 32,
                 idle_timeout_s: float = 10.0, token: bytes | None = None,
                 request_timeout_s: float = 10.0, max_per_peer: int = 8,
                 allowed_hosts: frozenset[str] | None = None, tls: ssl.SSLContext | None = None):
        self.api = api
        self.routes = routes
        self.log = log
        self.auth = BearerAuth(token, log) if token else None  # None: serves anyone
        self.idle_timeout_s = idle_timeout_s
        self.request_timeout_s = request_timeout_s
        self.allowed_hosts = allowed_hosts
        self.places = ConnectionPlaces(max_connections, max_per_peer)
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)
        if tls is not None:  # every accepted connection speaks TLS; no plain HTTP at all
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self.thread = None

    @property
    def port(self) -> int:
        return self.server_address[1]

    def process_request(self, request, client_address):
        admission = self.places.admit(request, client_address[0], time.monotonic())
        for victim in admission.evict:  # its thread reads end-of-file and ends
            try:
                victim.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if not admission.admitted:
            self._refuse_busy(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.places.release(request)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.places.release(request)

    def _refuse_busy(self, request) -> None:
        body = orjson.dumps({"error": "too many connections; try again"})
        try:
            request.settimeout(1.0)
            request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                            b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
                            + body)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request, client_address):
        """What escaped a connection's thread: one line, never a traceback on stderr."""
        exc = sys.exc_info()[1]
        self.log("admin connection failed", error=f"{type(exc).__name__}: {exc}")

    def start(self) -> "AdminHttpServer":
        self.thread = threading.Thread(target=self.serve_forever, name="admin-http", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def allowed_hosts(conf) -> frozenset[str] | None:
    """The ``Host`` names the bookie's HTTP servers answer without a token (http_guard)."""

    extra = [h.strip() for h in conf.http_server_allowed_hosts.split(",") if h.strip()]
    return allowed_host_names(conf.http_server_host, conf.listening_interface,
                              conf.advertised_address, socket.gethostname(), extra=extra)


def tls_context(conf) -> ssl.SSLContext | None:
    """The HTTP servers' TLS (httpServerTlsCertFile / httpServerTlsKeyFile), or None.

    Raises:
        ValueError: one line naming the key: one set without the other, a key file open to
            group or other, or a certificate and key that do not load.
    """

    cert, key = conf.http_server_tls_cert_file, conf.http_server_tls_key_file
    if not cert and not key:
        return None
    if not cert or not key:
        raise ValueError("httpServerTlsCertFile and httpServerTlsKeyFile go together: set both "
                         "(HTTPS) or neither (plain HTTP)")
    try:
        read_private_file("httpServerTlsKeyFile", key, 1 << 20)
    except AccessDeniedError as e:
        raise ValueError(str(e)) from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"httpServerTlsCertFile={cert}, httpServerTlsKeyFile={key}: cannot load "
                         f"them ({getattr(e, 'reason', None) or e.strerror or e})") from None
    return context


def start_server(host: str, port: int, api: AdminApi, routes: dict, log, **limits) -> AdminHttpServer:
    """Bind and serve in a daemon thread.  Raises OSError when the port cannot be bound."""
    return AdminHttpServer((host, port), api, routes, log, **limits).start()
