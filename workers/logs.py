"""Log lines as operators read them: one line per event, logfmt fields, or JSON for shippers.

Format of a line (``logfmt``, the default)::

    2026-11-22T09:10:12.345Z info bookie[3181] supervisor: worker started role=add pid=4242
    |  UTC, milliseconds   | |lvl| |  process (role)  |  | event      | | key=value fields |

- time: UTC, ISO 8601 with milliseconds and ``Z``;
- level: ``debug``, ``info``, ``warning`` or ``error``;
- process: who wrote it, ``bookie[PORT] ROLE`` for a bookie's supervisor and workers (the
  role is the last word), ``bookie.client`` for the client library, then ``:``;
- event: a fixed phrase of the code (never contains ``=``), so ``grep 'worker died'`` works;
- fields: logfmt ``key=value`` pairs; a value is written in double quotes, with ``\\"``,
  ``\\\\`` and ``\\n`` escapes, when it is empty or holds a space, ``=``, a quote or a control
  character.  ``parse_line`` reads a line back.

With ``json`` (``bookie run --log-format json``) each line is one JSON object instead:
``{"ts": ..., "level": ..., "process": ..., "role": ..., "bookie_port": ..., "event": ..., <fields>}``.

The format and the lowest level written come from the environment (``BOOKIE_LOG_FORMAT``,
``BOOKIE_LOG_LEVEL``): ``bookie run`` sets them from its flags and its workers inherit them, so
every process of a bookie writes the same format.  A traceback is never printed as is: the
error is one line, and the traceback follows as one ``debug`` line (field ``traceback``).

Python's ``logging`` (the client logs on ``bookie.client``) gets the same lines through
``LineFormatter``; ``install_logging`` attaches it to the ``bookie`` logger.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import traceback

import orjson

FORMATS = ("logfmt", "json")
LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
FORMAT_ENV = "BOOKIE_LOG_FORMAT"
LEVEL_ENV = "BOOKIE_LOG_LEVEL"

# Level of an event given without one: the first rule that matches its words wins.
_ERROR_WORDS = re.compile(r"\b(fatal|refusing|failed|corrupt|could not)\b")
_WARNING_WORDS = re.compile(r"\b(warning|died|did not|skipped|unavailable|full|giving up)\b")
_NEEDS_QUOTES = re.compile(r'[\s="\\\x00-\x1f]')
_PROCESS = re.compile(r"^bookie\[(\d+)\] (\S+)$")


def current_format() -> str:
    fmt = os.environ.get(FORMAT_ENV, "logfmt")
    return fmt if fmt in FORMATS else "logfmt"


def current_level() -> int:
    return LEVELS.get(os.environ.get(LEVEL_ENV, "info"), LEVELS["info"])


def level_of(event: str) -> str:
    """The level of an event logged without an explicit one (see the rules above)."""
    low = event.lower()
    if _ERROR_WORDS.search(low):
        return "error"
    if _WARNING_WORDS.search(low):
        return "warning"
    return "info"


def utc_now(now: float | None = None) -> str:
    t = time.time() if now is None else now
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def logfmt_value(value) -> str:
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    s = value if isinstance(value, str) else str(value)
    if s and not _NEEDS_QUOTES.search(s):
        return s
    s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    s = "".join(c if c >= " " else f"\\x{ord(c):02x}" for c in s)
    return f'"{s}"'


def logfmt_key(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", key) or "_"


# Keys every line has; a field of the same name is written with a ``_`` appended.  (A logfmt
# line names its process, not a role: ``role=add`` there is the field, as grep expects it.)
RESERVED = {"logfmt": ("ts", "level", "process", "event"),
            "json": ("ts", "level", "process", "role", "bookie_port", "event")}


def field_name(key: str, fmt: str = "logfmt") -> str:
    """A field's key as written in ``fmt``."""
    return f"{key}_" if key in RESERVED[fmt] else key


def format_line(process: str, event: str, level: str, fields: dict, fmt: str,
                now: float | None = None) -> str:
    """One log line (no newline) in ``fmt`` ("logfmt" or "json")."""
    ts = utc_now(now)
    if fmt == "json":
        record = {"ts": ts, "level": level, "process": process}
        m = _PROCESS.match(process)
        if m:
            record["role"] = m.group(2)
            record["bookie_port"] = int(m.group(1))
        record["event"] = event
        for k, v in fields.items():
            record[field_name(k, "json")] = v if isinstance(v, (str, int, float, bool)) or v is None else str(v)
        return orjson.dumps(record).decode()
    extra = " ".join(f"{logfmt_key(field_name(k))}={logfmt_value(v)}" for k, v in fields.items())
    return f"{ts} {level} {process}: {event}{' ' + extra if extra else ''}"


def emit(process: str, event: str, level: str | None = None, **fields) -> None:
    """Write one event to stderr (journald keeps it under systemd) if its level is on."""
    level = level or level_of(event)
    if LEVELS.get(level, 20) < current_level():
        return
    sys.stderr.write(format_line(process, event, level, fields, current_format()) + "\n")
    sys.stderr.flush()


def emit_exception(process: str, event: str, exc: BaseException, **fields) -> None:
    """An error as one line; its traceback as one more line, at debug level."""
    emit(process, event, "error", error=f"{type(exc).__name__}: {exc}", **fields)
    emit(process, "traceback", "debug", of=event,
         traceback="".join(traceback.format_exception(exc)).rstrip())


# ---- reading lines back (tests, tools) -----------------------------------------------------------

_LINE = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (?P<level>[a-z]+) "
                   r"(?P<process>[^:]+): (?P<rest>.*)$")
_PAIR = re.compile(r'\s*([^\s=]+)=("(?:[^"\\]|\\.)*"|[^\s"]*)')


def parse_logfmt(text: str) -> dict[str, str]:
    """``key=value`` pairs (quoted values unescaped); raises ValueError on anything else."""
    out = {}
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _PAIR.match(text, pos)
        if not m:
            raise ValueError(f"not logfmt at {pos}: {text[pos:pos + 40]!r}")
        raw = m.group(2)
        if raw.startswith('"'):
            raw = re.sub(r'\\(x[0-9a-f]{2}|.)', _unescape, raw[1:-1])
        out[m.group(1)] = raw
        pos = m.end()
    return out


def _unescape(m) -> str:
    s = m.group(1)
    if s.startswith("x") and len(s) == 3:
        return chr(int(s[1:], 16))
    return {"n": "\n", "r": "\r"}.get(s, s)


def parse_line(line: str) -> dict:
    """A line of either format as a dict: ts, level, process, event and the fields.

    Raises:
        ValueError: the line is in neither format.
    """
    line = line.rstrip("\n")
    if line.startswith("{"):
        return orjson.loads(line)
    m = _LINE.match(line)
    if not m:
        raise ValueError(f"not a log line: {line[:80]!r}")
    rest = m.group("rest")
    first_field = re.search(r"(^| )[^\s=]+=", rest)
    event = rest if first_field is None else rest[:first_field.start()]
    fields = {} if first_field is None else parse_logfmt(rest[first_field.start():])
    return {"ts": m.group("ts"), "level": m.group("level"), "process": m.group("process"),
            "event": event, **fields}


# ---- Python logging ------------------------------------------------------------------------------

class LineFormatter(logging.Formatter):
    """Python ``logging`` records as this module's lines.  The record's message is the event;
    ``extra={"fields": {...}}`` gives the key=value fields."""

    def __init__(self, fmt_name: str | None = None):
        super().__init__()
        self.fmt_name = fmt_name

    def format(self, record: logging.LogRecord) -> str:
        level = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warning"}.get(
            record.levelno, "error" if record.levelno >= logging.ERROR else "debug")
        fields = dict(getattr(record, "fields", None) or {})
        if record.exc_info and record.exc_info[1] is not None:
            fields.setdefault("error", f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}")
        return format_line(record.name, record.getMessage(), level, fields,
                           self.fmt_name or current_format(), now=record.created)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted, not the stream it was
    when the handler was made (a caller may have replaced or closed that one since)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def install_logging(logger_name: str = "bookie") -> None:
    """Send ``logger_name``'s records (the client's among them) to stderr as log lines."""
    logger = logging.getLogger(logger_name)
    if any(isinstance(h.formatter, LineFormatter) for h in logger.handlers):
        return
    handler = _StderrHandler()
    handler.setFormatter(LineFormatter())
    logger.addHandler(handler)
    logger.setLevel({10: logging.DEBUG, 20: logging.INFO, 30: logging.WARNING}.get(current_level(), logging.ERROR))
    logger.propagate = False


# Libraries whose records become log lines of ours (their own level), instead of Python's
# last-resort handler writing them as plain text (kazoo's "Connection dropped", say) between the
# logfmt or JSON lines of a bookie.
LIBRARY_LOGGERS = {"kazoo": logging.WARNING}


def install_library_logging() -> None:
    """Send the libraries' records (``LIBRARY_LOGGERS``) to stderr as this module's lines."""
    for name, level in LIBRARY_LOGGERS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(h.formatter, LineFormatter) for h in logger.handlers):
            handler = _StderrHandler()
            handler.setFormatter(LineFormatter())
            logger.addHandler(handler)
            logger.propagate = False
        if logger.level == logging.NOTSET or logger.level < level:
            logger.setLevel(level)
