"""A handle's calls for verifiable ledgers (issue 43): the root, proofs, and the Merkle check
of every entry read from a closed verifiable ledger (``bookie.client.verify``).

- ``merkle_root()``: hex root of a closed ledger (its metadata's), or of the entries confirmed
  so far on the writer's handle of an open one (a checkpoint to publish);
- ``merkle_tree_size()``: the number of entries that root covers;
- ``inclusion_proof(entry_id)``: a closed ledger's RFC 9162 audit path of an entry, a list of
  hex hashes for ``bookie.client.verify_inclusion``;
- ``consistency_proof(old_size, new_size=None)``: RFC 9162 proof that the tree of ``old_size``
  entries is a prefix of the tree of ``new_size`` (default: ``merkle_tree_size()``), for
  ``bookie.client.verify_consistency``.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from bookie.client.errors import InvalidArgumentError
from bookie.client.merkle import MerkleTree
from bookie.client.protocol.copies import CopiesOp
from bookie.client.protocol.ledger import LedgerInfo, LedgerState
from bookie.client.protocol.reader import ReadOp
from bookie.client.verify import Verification, bad_copies, not_verifiable, resolve_leaves

log = logging.getLogger("bookie.client")

BUILD_CHUNK = 2048  # entries per read while hashing the ledger once


class VerifiableHandle:
    """Mixed into ``bookie.client.handle_api.LedgerHandle``."""

    _verification: Verification | None = None
    verify_reads = True  # False: reads of a closed verifiable ledger skip the Merkle check
    _verification_lock = threading.Lock()

    def merkle_root(self) -> str:
        info = self.metadata
        if not info.verifiable:
            raise not_verifiable(self.ledger_id)
        if info.state is LedgerState.CLOSED:
            return info.merkle_root
        return self._writer_tree().root_hex(self.last_add_confirmed + 1)

    def merkle_tree_size(self) -> int:
        info = self.metadata
        if not info.verifiable:
            raise not_verifiable(self.ledger_id)
        if info.state is LedgerState.CLOSED:
            return info.last_entry_id + 1
        self._writer_tree()
        return self.last_add_confirmed + 1

    def inclusion_proof(self, entry_id: int) -> list[str]:
        v = self._closed_tree()
        if isinstance(entry_id, bool) or not isinstance(entry_id, int) or not 0 <= entry_id < v.size:
            raise InvalidArgumentError(f"ledger {self.ledger_id}: entry {entry_id!r} is not in "
                                       f"its tree of {v.size} entries", ledger_id=self.ledger_id)
        return [h.hex() for h in v.tree.inclusion_proof(entry_id, v.size)]

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[str]:
        info = self.metadata
        if info.state is LedgerState.CLOSED:
            tree, size = self._closed_tree().tree, info.last_entry_id + 1
        else:
            tree, size = self._writer_tree(), self.last_add_confirmed + 1
        new_size = size if new_size is None else new_size
        if isinstance(new_size, bool) or not isinstance(new_size, int) or not 1 <= new_size <= size:
            raise InvalidArgumentError(f"ledger {self.ledger_id}: new size must be 1..{size}, "
                                       f"got {new_size!r}", ledger_id=self.ledger_id)
        try:
            return [h.hex() for h in tree.consistency_proof(old_size, new_size)]
        except ValueError as exc:
            raise InvalidArgumentError(f"ledger {self.ledger_id}: {exc}",
                                       ledger_id=self.ledger_id) from None

    def replica_check(self, bookie: str | None = None) -> dict[int, dict[str, str]]:
        """Every replica's copy of every entry of this closed verifiable ledger (or only
        ``bookie``'s) against its root: ``{entry_id: {bookie: what is wrong}}`` for each copy
        that does not match (changed bytes, a bad digest, missing, unanswered); {} when all do.
        Raises TamperedEntryError when no choice of copies makes up the root."""
        v = self._closed_tree()
        if v.size == 0:
            return {}
        op = CopiesOp(self.metadata, 0, v.size - 1, self._dm.decode, only=bookie)
        copies = self._runner.wait(self._runner.run(op, self.ledger_id, self._master_key))
        leaves = [v.tree.leaf(e) for e in range(v.size)]
        return {e: {b: ("does not match the Merkle root" if isinstance(copies[e][b], bytes)
                        else copies[e][b]) for b in bookies}
                for e, bookies in bad_copies(leaves, copies).items()}

    # -- internals -----------------------------------------------------------------------------

    def _writer_tree(self) -> MerkleTree:
        if not self.metadata.verifiable:
            raise not_verifiable(self.ledger_id)
        if self._writer is None or self._writer.op.merkle is None:
            raise InvalidArgumentError(f"ledger {self.ledger_id} is not closed: only its "
                                       f"writer's handle knows the root so far",
                                       ledger_id=self.ledger_id)
        return self._writer.op.merkle

    def _closed_tree(self) -> Verification:
        info = self.metadata
        if not info.verifiable:
            raise not_verifiable(self.ledger_id)
        if info.state is not LedgerState.CLOSED:
            raise InvalidArgumentError(f"ledger {self.ledger_id} is not closed: proofs are of "
                                       f"a closed ledger's root", ledger_id=self.ledger_id)
        v = self._verification_for(info)
        if v.failure:
            raise v.refusal()
        return v

    def _read_checks(self, info: LedgerInfo):
        if not (self.verify_reads and info.verifiable and info.state is LedgerState.CLOSED):
            return super()._read_checks(info)
        v = self._verification_for(info)
        if v.failure:  # no bytes of this ledger are returned: the read fails with why
            def refused(fut: Future) -> Future:
                fut.cancel()
                out: Future = Future()
                out.set_exception(v.refusal())
                return out
            return self._dm.decode, self._dm.decode_many, refused
        decode, decode_many = v.decoders(self._dm.decode, self._dm.decode_many)
        return decode, decode_many, v.translated

    def _verification_for(self, info: LedgerInfo) -> Verification:
        """The leaves of the closed ledger ``info``: found once per handle."""
        with self._verification_lock:
            v = self._verification
            if v is not None and v.root_hex == info.merkle_root:
                return v
            v = Verification(self.ledger_id, info.merkle_root, info.last_entry_id + 1,
                             getattr(self, "_metrics", None))
            own = self._writer.op.merkle if self._writer is not None else None
            if not (own is not None and v.set_leaves(own)) and not v.set_leaves(self._hash_all(info, v.size)):
                self._resolve(info, v)
            self._verification = v
            return v

    def _hash_all(self, info: LedgerInfo, size: int) -> MerkleTree:
        """The tree of one good-digest copy of each entry (not yet checked against the root)."""
        tree = MerkleTree()
        for lo in range(0, size, BUILD_CHUNK):
            op = ReadOp(info, lo, min(size, lo + BUILD_CHUNK) - 1, self._dm.decode,
                        decode_many=self._dm.decode_many, avoid=self._runner.suspect_bookies())
            for entry in self._runner.wait(self._runner.run(op, self.ledger_id, self._master_key,
                                                            collect=True)):
                tree.append(entry.data)
        return tree

    def _resolve(self, info: LedgerInfo, v: Verification) -> None:
        """The first copies read do not make up the root: read every replica's and choose."""
        log.warning("ledger %d: its entries as first read do not match its Merkle root; "
                    "reading every replica's copy", self.ledger_id)
        op = CopiesOp(info, 0, v.size - 1, self._dm.decode)
        copies = self._runner.wait(self._runner.run(op, self.ledger_id, self._master_key))
        leaves, why = resolve_leaves(v.root_hex, v.size, copies)
        if leaves is None:
            v.failure = why
            log.error("ledger %d: %s", self.ledger_id, why)
            return
        v.set_leaves(MerkleTree(leaves))
        for entry_id, bookies in bad_copies(leaves, copies).items():
            v.rejected.add(entry_id)
            log.warning("ledger %d entry %d: the copy on %s does not match the ledger's Merkle "
                        "root", self.ledger_id, entry_id, ", ".join(bookies))
            if v._metrics is not None:
                v._metrics.families.verify_failures.inc(len(bookies))
