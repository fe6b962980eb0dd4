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

from bookie.client.aio import AsyncBookKeeper, AsyncLedgerHandle
from bookie.client.client import BookKeeper
from bookie.client.handle_api import LedgerHandle, LedgerHandleAdv
from bookie.client.config import ClientConfig
from bookie.client.digest import LedgerEntry
from bookie.client.errors import (BadVersionError, BKTimeoutError, BookieError,
                                  BookKeeperError, ClientClosedError, DigestMismatchError,
                                  InvalidArgumentError, LedgerClosedError, LedgerFencedError,
                                  LedgerRecoveryError, MetadataStoreError, NoSuchEntryError,
                                  NoSuchLedgerError, NoSuchRecordError, NotEnoughBookiesError,
                                  QuotaExceededError, RecordExistsError, TamperedEntryError,
                                  UnauthorizedError)
from bookie.client.log import (AsyncLogWriter, LogFencedError, LogPosition, LogRecord, LogWriter,
                               LogWriterFailedError,
                               NoSuchLogError, create_log, delete_log, link_ledgers, list_logs,
                               log_ledgers, open_log, open_log_async, read_log, read_log_async)
from bookie.client.merkle import verify_consistency, verify_inclusion
from bookie.client.protocol.ledger import LedgerInfo

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
