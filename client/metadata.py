"""The metadata store as the client uses it: ledger records, CAS writes as protocol events,
writable bookies, and the custom records recipes keep (a log's ledger list).

The protocol core works on ``LedgerInfo``; the store keeps ``LedgerMetadata`` records (with the
digest type, password digest, creation time and custom fields the protocol does not touch).
``to_info`` / ``with_info`` convert.

This module is the one place where the metadata store's errors (``bookie.metadata.errors``)
become the client's (``bookie.client.errors``); nothing else in the client catches a store
error:

=============================  ===========================================================
store error                    client error
=============================  ===========================================================
NoSuchLedgerError              NoSuchLedgerError
NoSuchNodeError                NoSuchRecordError
NodeExistsError                RecordExistsError
BadVersionError                BadVersionError (a lost CAS of a ledger: MetadataConflict)
MetadataTimeoutError           BKTimeoutError
any other MetadataError        MetadataStoreError
ValueError (a malformed path)  InvalidArgumentError
=============================  ===========================================================
"""

from __future__ import annotations

import contextlib
import dataclasses

from bookie.metadata import (BadVersionError as StoreBadVersion, LedgerMetadata, LedgerState,
                             MetadataError, MetadataStore, MetadataTimeoutError,
                             NodeExistsError, NoSuchLedgerError as StoreNoSuchLedger,
                             NoSuchNodeError, open_metadata)
from bookie.client.errors import (BadVersionError, BKTimeoutError, InvalidArgumentError,
                                  MetadataStoreError, NoSuchLedgerError, NoSuchRecordError,
                                  RecordExistsError)
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo

__all__ = ["ClientStore", "to_info", "with_info", "LedgerMetadata"]

# Bookie locations an operator set (``bookie shell setrack``): one node per bookie id, holding
# ``/REGION/RACK``; placement prefers it to the bookie's own bookieLocation.  A setting, not data.
LOCATIONS = "/bookielocations"


def to_info(ledger_id: int, meta: LedgerMetadata) -> LedgerInfo:
    """The protocol's view of a stored record."""
    return LedgerInfo(
        ledger_id=ledger_id, ensemble_size=meta.ensemble_size, write_quorum=meta.write_quorum,
        ack_quorum=meta.ack_quorum, state=LedgerState(meta.state),
        last_entry_id=meta.last_entry_id, length=meta.length,
        fragments=tuple((first, tuple(ens)) for first, ens in meta.fragments),
        verifiable=meta.verifiable, merkle_root=meta.merkle_root)


def with_info(meta: LedgerMetadata, info: LedgerInfo) -> LedgerMetadata:
    """``meta`` with the protocol fields of ``info`` (a new record; ``meta`` is unchanged).
    A verifiable ledger's close takes its root from ``info`` (tree size: last entry + 1)."""
    root = {}
    if meta.verifiable and info.merkle_root:
        root = {"merkle_root": info.merkle_root, "tree_size": info.last_entry_id + 1}
    return dataclasses.replace(
        meta, state=info.state, last_entry_id=info.last_entry_id,
        length=info.length, fragments=[(first, list(ens)) for first, ens in info.fragments],
        **root)


def check_closable(ledger_id: int, meta: LedgerMetadata, info) -> None:
    """Refuse a close this client cannot write right (docs/metadata.md, format 2): a record
    with features it does not know, or a verifiable ledger's close without its Merkle root."""
    if meta.unknown_features:
        raise MetadataStoreError(
            f"ledger {ledger_id} has features this client does not know "
            f"({', '.join(meta.unknown_features)}): it must not close it; upgrade the client",
            ledger_id=ledger_id)
    if meta.verifiable and not info.merkle_root:
        raise MetadataStoreError(f"ledger {ledger_id} is verifiable: its close must carry the "
                                 f"Merkle root of its entries", ledger_id=ledger_id)


# Custom records live here: the logs recipe's and the user's own.  Every other node under the
# metadata root is the cluster's (ledgers, cookies, registrations, under-replication marks, the
# bookies' private nodes): no client call reads or writes them as records.
RECORD_ROOTS = ("/logs", "/records")


def check_record_path(path: str, what: str = "record") -> None:
    """InvalidArgumentError unless ``path`` is one of ``RECORD_ROOTS`` or below one."""
    parts = path.split("/") if isinstance(path, str) else []
    inside = (len(parts) >= 2 and parts[0] == "" and "/" + parts[1] in RECORD_ROOTS
              and not any(p in (".", "..") for p in parts[2:]))
    if not inside:
        raise InvalidArgumentError(f"{what}: {str(path)[:200]!r} is not a record path: records "
                                   f"live under {' or '.join(RECORD_ROOTS)}; the rest of the "
                                   f"metadata store is the cluster's")


@contextlib.contextmanager
def _translated(ledger_id: int | None = None, what: str = "metadata store call",
                path: str | None = None):
    """Re-raise metadata store errors as the client's exception classes (the table above);
    a record ``path`` outside ``RECORD_ROOTS`` is refused before the store is asked."""
    if path is not None:
        check_record_path(path, what)
    try:
        yield
    except StoreNoSuchLedger:
        raise NoSuchLedgerError(f"ledger {ledger_id} does not exist in the metadata store "
                                f"(never created, or deleted)", ledger_id=ledger_id) from None
    except NoSuchNodeError:
        raise NoSuchRecordError(f"{what}: no record at {path}", path=path) from None
    except NodeExistsError:
        raise RecordExistsError(f"{what}: a record exists at {path} already",
                                path=path) from None
    except StoreBadVersion as exc:
        where = f"ledger {ledger_id}" if ledger_id is not None else f"record {path}"
        raise BadVersionError(f"{where}: {what} lost a compare-and-swap against another "
                              f"client ({exc})", ledger_id=ledger_id) from None
    except MetadataTimeoutError as exc:
        raise BKTimeoutError(f"{what} timed out ({exc}); is the metadata store reachable?",
                             ledger_id=ledger_id) from None
    except MetadataError as exc:
        raise MetadataStoreError(f"{what} failed: {exc}", ledger_id=ledger_id) from None
    except ValueError as exc:
        if path is None:
            raise
        raise InvalidArgumentError(f"{what}: {exc}") from None


class ClientStore:
    """A metadata store with the client's vocabulary and errors.  Calls block (the store's
    own timeout bounds each); every method raises only ``bookie.client.errors``."""

    def __init__(self, store: MetadataStore, own: bool):
        """``own``: this object opened the store and closes it."""
        self.store = store
        self._own = own

    @classmethod
    def open(cls, metadata, timeout_s: float, zk_security=None) -> "ClientStore":
        """From a metadata service URI (opened here, with ``zk_security``'s credentials and
        ACL, closed by ``close``) or an open store (left open).  Raises MetadataStoreError,
        BKTimeoutError."""
        if isinstance(metadata, str):
            with _translated(what=f"opening metadata store {metadata}"):
                return cls(open_metadata(metadata, timeout_s=timeout_s, zk_security=zk_security),
                           own=True)
        return cls(metadata, own=False)

    def close(self) -> None:
        if self._own:
            self.store.close()

    # -- ledgers -------------------------------------------------------------------------------

    def create_ledger(self, meta: LedgerMetadata) -> tuple[int, object]:
        """A new ledger id and the record's version."""
        with _translated(what="creating a ledger"):
            return self.store.create_ledger(meta)

    def read_ledger(self, ledger_id: int) -> tuple[LedgerMetadata, object]:
        with _translated(ledger_id, "reading ledger metadata"):
            return self.store.read_ledger(ledger_id)

    def read_info(self, ledger_id: int) -> tuple[LedgerInfo, object]:
        meta, version = self.read_ledger(ledger_id)
        return to_info(ledger_id, meta), version

    def write_metadata(self, action: A.WriteMetadata):
        """Carry out a state machine's CAS write.

        Returns:
            MetadataWritten (with the new version), or MetadataConflict with the record as
            re-read when another client changed it since ``action.version``.
        Raises:
            NoSuchLedgerError (deleted meanwhile), BKTimeoutError, MetadataStoreError.
        """
        lid = action.info.ledger_id
        meta, _ = self.read_ledger(lid)
        if action.info.state is LedgerState.CLOSED and not meta.is_closed:
            check_closable(lid, meta, action.info)
        try:
            with _translated(lid, "updating ledger metadata"):
                version = self.store.write_ledger(lid, with_info(meta, action.info),
                                                  action.version)
            return A.MetadataWritten(action, version)
        except BadVersionError:
            info, version = self.read_info(lid)
            return A.MetadataConflict(action, info, version)

    def remove_ledger(self, ledger_id: int) -> None:
        with _translated(ledger_id, "deleting the ledger"):
            self.store.remove_ledger(ledger_id)

    def list_ledgers(self) -> list[int]:
        with _translated(what="listing ledgers"):
            return list(self.store.list_ledgers())

    def list_writable(self) -> list[str]:
        """The registered writable bookies (read-only ones are never chosen)."""
        with _translated(what="listing writable bookies"):
            return self.store.list_bookies(readonly=False)

    def locations(self, bookies) -> dict[str, str]:
        """bookie id -> its location ``/REGION/RACK``: the one an operator set (``bookie shell
        setrack``, under ``LOCATIONS``), else the one it published when it registered (its
        ``bookieLocation``); bookies with neither (or gone meanwhile) are left out."""
        out = {}
        with _translated(what="reading bookie locations"):
            try:
                set_by_operator = set(self.store.children(LOCATIONS))
            except NoSuchNodeError:
                set_by_operator = set()
            for bookie in bookies:
                if bookie in set_by_operator:
                    try:
                        out[bookie] = self.store.get(f"{LOCATIONS}/{bookie}")[0].decode()
                        continue
                    except NoSuchNodeError:
                        pass  # removed meanwhile: the registration's, as below
                info = self.store.bookie_info(bookie) or {}
                if isinstance(info.get("location"), str) and info["location"]:
                    out[bookie] = info["location"]
        return out

    # -- custom records ------------------------------------------------------------------------

    def get_record(self, path: str) -> tuple[bytes, int]:
        with _translated(what="reading a record", path=path):
            return self.store.get(path)

    def create_record(self, path: str, data: bytes) -> None:
        with _translated(what="creating a record", path=path):
            self.store.create(path, data)

    def set_record(self, path: str, data: bytes, version: int) -> int:
        with _translated(what="writing a record", path=path):
            return self.store.set(path, data, version)

    def delete_record(self, path: str, version: int | None) -> None:
        with _translated(what="deleting a record", path=path):
            self.store.delete(path, version)

    def list_records(self, path: str) -> list[str]:
        try:
            with _translated(what="listing records", path=path):
                return self.store.children(path)
        except NoSuchRecordError:
            return []
