"""Between the client and the metadata store: record conversion and error translation.

The protocol core works on ``LedgerInfo``; the store keeps ``LedgerMetadata`` records (with the
digest type, password digest, creation time and custom fields the protocol does not touch).
``to_info`` / ``with_info`` convert, and ``translated`` turns store errors into the client's.
"""

from __future__ import annotations

import contextlib
import dataclasses

from bookie.metadata import (BadVersionError as StoreBadVersion, LedgerMetadata,
                                       LedgerState, MetadataError, MetadataTimeoutError,
                                       NoSuchLedgerError as StoreNoSuchLedger, open_metadata)
from bookie.client.errors import (BadVersionError, BKTimeoutError, MetadataStoreError,
                                  NoSuchLedgerError)
from bookie.client.protocol.ledger import LedgerInfo

__all__ = ["open_metadata", "to_info", "with_info", "translated", "LedgerMetadata"]


def to_info(ledger_id: int, meta: LedgerMetadata) -> LedgerInfo:
    return LedgerInfo(
        ledger_id=ledger_id, ensemble_size=meta.ensemble_size, write_quorum=meta.write_quorum,
        ack_quorum=meta.ack_quorum, state=LedgerState(meta.state).value,
        last_entry_id=meta.last_entry_id, length=meta.length,
        fragments=tuple((first, tuple(ens)) for first, ens in meta.fragments))


def with_info(meta: LedgerMetadata, info: LedgerInfo) -> LedgerMetadata:
    """``meta`` with the protocol fields of ``info`` (a new record; ``meta`` is unchanged)."""
    return dataclasses.replace(
        meta, state=LedgerState(info.state), last_entry_id=info.last_entry_id,
        length=info.length, fragments=[(first, list(ens)) for first, ens in info.fragments])


@contextlib.contextmanager
def translated(ledger_id: int | None = None, what: str = "metadata store call"):
    """Re-raise metadata store errors as the client's exception classes."""
    try:
        yield
    except StoreNoSuchLedger:
        raise NoSuchLedgerError(f"ledger {ledger_id} does not exist in the metadata store "
                                f"(never created, or deleted)", ledger_id=ledger_id) from None
    except StoreBadVersion as exc:
        raise BadVersionError(f"ledger {ledger_id}: {what} lost a compare-and-swap against "
                              f"another client ({exc})", ledger_id=ledger_id) from None
    except MetadataTimeoutError as exc:
        raise BKTimeoutError(f"{what} timed out ({exc}); is the metadata store reachable?",
                             ledger_id=ledger_id) from None
    except MetadataError as exc:
        raise MetadataStoreError(f"{what} failed: {exc}", ledger_id=ledger_id) from None
