"""The options of the ``bookie`` Spark format, parsed and checked once, with no Spark and no I/O.

Every bad option raises ``OptionError`` (a ``ValueError``) naming the option, before anything
runs.  Names follow Spark's Kafka source where they fit; client keys pass through as
``bookkeeper.<key>`` (``bookkeeper.readTimeout=2``).

Offsets (the stream's, and ``startingOffsets`` / ``endingOffsets`` given as JSON) are one JSON
object, with string keys throughout (JSON turns integer keys into strings anyway)::

    {"ledgers": {"12": 5, "15": 0},            # per ledger: the next entry to read
     "logs": {"orders": [7, 3]}}               # per log: (ledger, next entry) in that ledger

In ``startingOffsets`` a ledger's value may be -2 (earliest) or -1 (latest), as with Kafka; a
log's value may be "earliest", "latest" or ``[ledger, entry]``.  In ``endingOffsets`` the value
is exclusive: the first entry *not* read.
"""

from __future__ import annotations

import dataclasses
import json
import re

from bookie.properties import PropertiesError, parse_bool

EARLIEST, LATEST = -2, -1

READ_DEFAULTS = {
    "readBatchEntries": 1000,
    "maxEntriesPerPartition": 100_000,
    "minPartitions": 1,
}
SINK_QUORUMS = (3, 2, 2)


class OptionError(ValueError):
    """A bad option of the bookie format; the message names it."""


class Options(dict):
    """Options by name, case-insensitively (Spark hands them over lower-cased)."""

    def __init__(self, opts):
        super().__init__((str(k).lower(), v) for k, v in dict(opts).items())

    def get(self, name: str, default=None):
        return super().get(name.lower(), default)

    def __contains__(self, name) -> bool:
        return super().__contains__(str(name).lower())

    def __getitem__(self, name: str):
        return super().__getitem__(name.lower())


def _flag(opts: dict, name: str, default: bool) -> bool:
    value = opts.get(name)
    if value is None:
        return default
    try:
        return parse_bool(value)
    except PropertiesError as e:
        raise OptionError(f"option {name}: {e}") from None


def _int(opts: dict, name: str, default: int | None, minimum: int = 1) -> int | None:
    value = opts.get(name)
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise OptionError(f"option {name}: {value!r} is not an integer") from None
    if number < minimum:
        raise OptionError(f"option {name}: {number} is below {minimum}")
    return number


def parse_ledger_list(text: str) -> list[int]:
    """``"12,15,20-29"`` -> [12, 15, 20, ..., 29] (sorted, no repeats)."""
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not match:
            raise OptionError(f"option ledgers: {part!r} is not a ledger id or a range a-b "
                              f"(in {text!r})")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        if last < first:
            raise OptionError(f"option ledgers: range {part!r} ends before it starts")
        out.update(range(first, last + 1))
    return sorted(out)


def client_config(opts: dict) -> dict:
    """The ``bookkeeper.<key>`` options as client keys, typed as the client's config
    (``ClientConfig.convert``: booleans by the one vocabulary of ``bookie.properties``, so
    ``bookkeeper.allowEmptyPassword=false`` is False)."""
    from bookie.client import ClientConfig, InvalidArgumentError  # lazy: orjson
    from bookie.client.config import accepted_names  # lazy: orjson
    names = {name.lower(): name for name in accepted_names()}
    config = {}
    for key, value in opts.items():
        if not key.lower().startswith("bookkeeper."):
            continue
        name = names.get(key.lower()[len("bookkeeper."):])
        if name is None:
            raise OptionError(f"option {key}: not a client key (known: "
                              f"{', '.join(sorted(names.values()))})")
        try:
            config[name] = ClientConfig.convert(name, str(value))
        except InvalidArgumentError as e:
            raise OptionError(f"option {key}: {e}") from None
    return config


@dataclasses.dataclass(frozen=True)
class Connection:
    """What a task needs to reach the ledgers: picklable, holds no client."""
    metadata_uri: str
    password: bytes
    digest: str | None
    config: tuple  # sorted (key, value) pairs of client keys

    @classmethod
    def parse(cls, opts: dict) -> "Connection":
        uri = opts.get("metadataServiceUri")
        if not uri:
            raise OptionError("option metadataServiceUri is required (zk://host:port/root or "
                              "lmdb:///path)")
        if not re.match(r"^(zk|zk\+flat|zk\+hierarchical|lmdb)://", uri):
            raise OptionError(f"option metadataServiceUri: {uri!r} is not a zk:// or lmdb:// "
                              f"URI")
        password = opts.get("password", "")
        return cls(uri, password.encode(), opts.get("digestType"),
                   tuple(sorted(client_config(opts).items())))


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """The source's options."""
    conn: Connection
    ledgers: tuple[int, ...] | None
    logs: tuple[str, ...] | None
    log_pattern: str | None
    starting: object  # "earliest" | "latest" | dict (parsed JSON)
    ending: object  # "latest" | dict
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    max_bytes_per_trigger: int | None
    min_partitions: int
    max_entries_per_partition: int
    read_batch_entries: int
    include_metadata: bool
    verify: bool = True  # check verifiable ledgers' entries against their Merkle root

    @classmethod
    def parse(cls, opts: dict, stream: bool) -> "ReadOptions":
        opts = Options(opts)
        conn = Connection.parse(opts)
        chosen = [k for k in ("ledgers", "log", "logPattern") if opts.get(k)]
        if len(chosen) != 1:
            raise OptionError("exactly one of the options ledgers, log, logPattern is required"
                              + (f" (got {', '.join(chosen)})" if chosen else ""))
        ledgers = logs = pattern = None
        if chosen[0] == "ledgers":
            ledgers = tuple(parse_ledger_list(opts["ledgers"]))
        elif chosen[0] == "log":
            logs = tuple(dict.fromkeys(n.strip() for n in opts["log"].split(",") if n.strip()))
            if not logs:
                raise OptionError("option log: no log name given")
        else:
            pattern = opts["logPattern"]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise OptionError(f"option logPattern: {pattern!r} is not a regex: "
                                  f"{exc}") from None
        starting = _offsets(opts, "startingOffsets", "latest" if stream else "earliest")
        ending = _offsets(opts, "endingOffsets", "latest")
        if ending == "earliest":
            raise OptionError("option endingOffsets: earliest is not allowed (latest or JSON)")
        if stream and "endingOffsets" in opts:
            raise OptionError("option endingOffsets is for batch queries only")
        max_offsets = _int(opts, "maxOffsetsPerTrigger", None)
        max_bytes = _int(opts, "maxBytesPerTrigger", None)
        if max_offsets and max_bytes:
            raise OptionError("options maxOffsetsPerTrigger and maxBytesPerTrigger exclude "
                              "each other")
        return cls(conn, ledgers, logs, pattern, starting, ending,
                   _flag(opts, "failOnDataLoss", True), max_offsets, max_bytes,
                   _int(opts, "minPartitions", READ_DEFAULTS["minPartitions"]),
                   _int(opts, "maxEntriesPerPartition", READ_DEFAULTS["maxEntriesPerPartition"]),
                   _int(opts, "readBatchEntries", READ_DEFAULTS["readBatchEntries"]),
                   _flag(opts, "includeMetadata", False), _flag(opts, "verify", True))


def _offsets(opts: dict, name: str, default: str):
    value = opts.get(name)
    if value is None:
        return default
    text = str(value).strip()
    if text in ("earliest", "latest"):
        return text
    try:
        doc = json.loads(text)
    except ValueError:
        raise OptionError(f"option {name}: {value!r} is not earliest, latest or "
                          f"JSON") from None
    if not isinstance(doc, dict) or set(doc) - {"ledgers", "logs"}:
        raise OptionError(f"option {name}: JSON must be an object with keys ledgers and/or "
                          f"logs, got {text}")
    for lid, entry in doc.get("ledgers", {}).items():
        if not str(lid).isdigit() or not isinstance(entry, int) or entry < EARLIEST:
            raise OptionError(f"option {name}: ledger {lid}: {entry!r} is not an entry id "
                              f"(or -2 earliest, -1 latest)")
    for log, pos in doc.get("logs", {}).items():
        if pos not in ("earliest", "latest") and not (
                isinstance(pos, list) and len(pos) == 2 and all(isinstance(x, int) for x in pos)):
            raise OptionError(f"option {name}: log {log}: {pos!r} is not earliest, latest or "
                              f"[ledger, entry]")
    return {"ledgers": {str(k): v for k, v in doc.get("ledgers", {}).items()},
            "logs": dict(doc.get("logs", {}))}


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    """The sink's options."""
    conn: Connection
    log: str
    create_log: bool
    quorums: tuple[int, int, int]
    sink_id: str | None
    batch_id: int
    sweep_grace_s: float

    @classmethod
    def parse(cls, opts: dict) -> "SinkOptions":
        opts = Options(opts)
        conn = Connection.parse(opts)
        log = opts.get("log")
        if not log:
            raise OptionError("option log is required (the log the sink appends to)")
        quorums = tuple(_int(opts, name, default) for name, default in
                        zip(("ensembleSize", "writeQuorumSize", "ackQuorumSize"), SINK_QUORUMS))
        if not quorums[0] >= quorums[1] >= quorums[2]:
            raise OptionError(f"options ensembleSize >= writeQuorumSize >= ackQuorumSize must "
                              f"hold, got {quorums}")
        sink_id = opts.get("sinkId")
        if sink_id is not None and not re.fullmatch(r"[A-Za-z0-9_.:-]{1,100}", sink_id):
            raise OptionError(f"option sinkId: {sink_id!r} is not 1-100 characters of "
                              f"[A-Za-z0-9_.:-]")
        return cls(conn, log, _flag(opts, "createLog", True), quorums, sink_id,
                   _int(opts, "batchId", 0, minimum=0),
                   _int(opts, "sweepGraceMs", 600_000, minimum=0) / 1000.0)
