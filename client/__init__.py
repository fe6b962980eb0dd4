"""The BookKeeper replication client over ZeroMQ, synchronous and asyncio.

    from bookie.client import BookKeeper
    with BookKeeper("lmdb:///var/lib/bookie/metadata") as bk:
        lh = bk.create_ledger(ensemble_size=3, write_quorum=2, ack_quorum=2,
                              digest="crc32c", password=b"secret")
        lh.add_entry(b"payload")
        lh.close()

Logs (ordered lists of ledgers with one writer): ``open_log(bk, name)``, ``read_log(bk, name)``.
See docs/client.md for every call.
"""

from __future__ import annotations

import importlib

# The face is lazy: a name is imported from its defining module when first asked for, so
# importing one module of the package (``bookie.client.protocol.*``, pure rules) loads neither
# ZeroMQ nor ZooKeeper, and no module of the package reaches back into this one.
_DEFINED_IN = {
    **dict.fromkeys(("AsyncBookKeeper", "AsyncLedgerHandle"), "bookie.client.aio"),
    **dict.fromkeys(("BookKeeper",), "bookie.client.client"),
    **dict.fromkeys(("LedgerHandle", "LedgerHandleAdv"), "bookie.client.handle_api"),
    **dict.fromkeys(("ClientConfig",), "bookie.client.config"),
    **dict.fromkeys(("LedgerEntry",), "bookie.client.digest"),
    **dict.fromkeys((
        "BadVersionError", "BKTimeoutError", "BookieError", "BookKeeperError", "ClientClosedError",
        "DigestMismatchError", "InvalidArgumentError", "LedgerClosedError", "LedgerFencedError",
        "LedgerRecoveryError", "MetadataStoreError", "NoSuchEntryError", "NoSuchLedgerError",
        "NoSuchRecordError", "NotEnoughBookiesError", "QuotaExceededError", "RecordExistsError",
        "TamperedEntryError", "UnauthorizedError"
    ), "bookie.client.errors"),
    **dict.fromkeys((
        "AsyncLogWriter", "LogFencedError", "LogPosition", "LogRecord", "LogWriter",
        "LogWriterFailedError", "NoSuchLogError", "create_log", "delete_log", "link_ledgers",
        "list_logs", "log_ledgers", "open_log", "open_log_async", "read_log", "read_log_async"
    ), "bookie.client.log"),
    **dict.fromkeys(("LedgerInfo",), "bookie.client.protocol.ledger"),
    **dict.fromkeys(("verify_consistency", "verify_inclusion"), "bookie.client.merkle"),
}

__all__ = [
    "BookKeeper", "LedgerHandle", "LedgerHandleAdv", "AsyncBookKeeper", "AsyncLedgerHandle", "ClientConfig",
    "LedgerEntry", "LedgerInfo",
    "BookKeeperError", "LedgerFencedError", "LedgerClosedError", "NoSuchLedgerError",
    "NoSuchEntryError", "NotEnoughBookiesError", "BadVersionError", "DigestMismatchError",
    "UnauthorizedError", "BKTimeoutError", "BookieError", "LedgerRecoveryError",
    "MetadataStoreError", "ClientClosedError", "InvalidArgumentError", "NoSuchRecordError",
    "RecordExistsError", "QuotaExceededError", "TamperedEntryError",
    "verify_inclusion", "verify_consistency",
    "open_log", "read_log", "list_logs", "delete_log", "open_log_async", "read_log_async",
    "create_log", "log_ledgers", "link_ledgers",
    "LogWriter", "AsyncLogWriter", "LogPosition", "LogRecord", "LogFencedError",
    "LogWriterFailedError", "NoSuchLogError",
]


def __getattr__(name: str):
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_DEFINED_IN))
