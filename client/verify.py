"""Verifiable ledgers on the client side (issue 43): the writer's tree, a reader's check of
every entry against the root its close wrote, and deciding which replicas hold the right bytes.

Theory of operation
-------------------
* **writing**: ``hashing_encoder`` wraps the writer's batch encoder, so each entry's payload is
  hashed into the handle's ``MerkleTree`` as the writer gives it its id (on the I/O thread, in
  id order: the leaf of entry i is leaf i).  The close writes the root of entries 0 .. LAC.
* **reading a closed ledger**: a ``Verification`` holds the leaf hash of every entry.  The
  writer's handle has its own tree; a reader builds it once per handle, on its first read or
  proof: it reads the ledger (one good copy of each entry) and hashes it; when that root is the
  metadata's, every leaf is proven (a different leaf would be a SHA-256 collision).  When it is
  not, some replica returned other bytes: every replica's copy is read (``CopiesOp``) and
  ``resolve_leaves`` finds the copies that make up the root.  From then on each entry read is
  checked against its leaf; a copy that differs is refused like a bad digest (the read asks the
  entry's next replica), logged and counted (``bookkeeper_client_verify_failures_total``); an
  entry no replica has right fails the read with ``TamperedEntryError``, and its bytes are never
  returned.  Cost: one SHA-256 per entry read, after one extra pass over the ledger per handle.
"""

from __future__ import annotations

import itertools
import logging
from concurrent.futures import Future

from bookie.client.drivers import fail, resolve
from bookie.client.errors import DigestMismatchError, InvalidArgumentError, TamperedEntryError
from bookie.client.merkle import MerkleTree, leaf_hash

log = logging.getLogger("bookie.client")

MAX_COMBINATIONS = 4096  # disputed entries' copies tried together before giving up


def hashing_encoder(tree: MerkleTree | None, encode_many):
    """``encode_many`` that also appends each payload's leaf to ``tree`` (None: unchanged)."""
    if tree is None:
        return encode_many

    def encode(first, lac, length, payloads):
        datas, lengths = encode_many(first, lac, length, payloads)
        if tree.size > first:  # ids the writer never used (a refused batch): forget them
            tree.truncate(first)
        for payload in payloads[:len(datas)]:
            tree.append(payload)
        return datas, lengths
    return encode


def resolve_leaves(root_hex: str, size: int, copies: dict) -> tuple[list[bytes] | None, str]:
    """The leaf hashes of entries 0 .. size-1 whose tree has root ``root_hex``, chosen among
    the replicas' ``copies`` ({entry: {bookie: leaf or problem}}, as ``CopiesOp`` finishes);
    (None, why) when no choice of copies makes up the root."""
    candidates = []
    for entry_id in range(size):
        seen = list(dict.fromkeys(c for c in copies.get(entry_id, {}).values()
                                  if isinstance(c, bytes)))
        if not seen:
            return None, f"entry {entry_id}: no replica returned a copy"
        candidates.append(seen)
    disputed = [e for e, seen in enumerate(candidates) if len(seen) > 1]
    total = 1
    for e in disputed:
        total *= len(candidates[e])
    if total > MAX_COMBINATIONS:
        return None, f"{len(disputed)} entries have differing copies: too many to try"
    leaves = [seen[0] for seen in candidates]
    for choice in itertools.product(*(candidates[e] for e in disputed)):
        for e, h in zip(disputed, choice):
            leaves[e] = h
        if MerkleTree(leaves).root_hex() == root_hex:
            return list(leaves), ""
    return None, "no copy of " + (f"entries {disputed}" if disputed else "the entries") + \
        " makes up the ledger's Merkle root"


def bad_copies(leaves: list[bytes], copies: dict) -> dict[int, list[str]]:
    """{entry: [bookie, ...]} of the copies that differ from ``leaves`` (or are unreadable)."""
    out: dict[int, list[str]] = {}
    for entry_id, by_bookie in sorted(copies.items()):
        bad = [b for b, c in sorted(by_bookie.items()) if c != leaves[entry_id]]
        if bad:
            out[entry_id] = bad
    return out


class Verification:
    """The leaves of one closed verifiable ledger, and the read-path checks against them."""

    def __init__(self, ledger_id: int, root_hex: str, size: int, metrics=None):
        self.ledger_id, self.root_hex, self.size = ledger_id, root_hex, size
        self.tree: MerkleTree | None = None
        self.failure = ""  # set when the leaves cannot be found: every read fails with it
        self._metrics = metrics
        self.rejected: set[int] = set()  # entries some copy of which was refused

    def set_leaves(self, tree: MerkleTree) -> bool:
        if tree.size >= self.size and tree.root_hex(self.size) == self.root_hex:
            self.tree = tree
            return True
        return False

    def _check(self, entry):
        if entry.entry_id < self.size and self.tree.leaf(entry.entry_id) != leaf_hash(entry.data):
            self.rejected.add(entry.entry_id)
            if self._metrics is not None:
                self._metrics.families.verify_failures.inc()
            log.warning("ledger %d entry %d: a replica returned bytes that do not match the "
                        "ledger's Merkle root; reading another replica", self.ledger_id,
                        entry.entry_id)
            return TamperedEntryError(
                f"copy does not match the Merkle root of ledger {self.ledger_id}",
                ledger_id=self.ledger_id, entry_id=entry.entry_id)
        return entry

    def decoders(self, decode, decode_many):
        """``decode`` / ``decode_many`` that refuse a copy whose leaf is not the entry's."""
        def checked(raw):
            entry = self._check(decode(raw))
            if isinstance(entry, TamperedEntryError):
                raise entry
            return entry

        def checked_many(raws):
            return [e if isinstance(e, DigestMismatchError) else self._check(e)
                    for e in decode_many(raws)]
        return checked, checked_many

    def refusal(self) -> TamperedEntryError:
        return TamperedEntryError(f"ledger {self.ledger_id}: its entries cannot be verified "
                                  f"({self.failure}); no bytes are returned",
                                  ledger_id=self.ledger_id)

    def translated(self, fut: Future) -> Future:
        """``fut`` whose DigestMismatchError for an entry refused here is a
        TamperedEntryError naming the ledger, the entry and its replicas' answers."""
        outer: Future = Future()
        outer.add_done_callback(lambda o: o.cancelled() and fut.cancel())

        def done(f: Future) -> None:
            if f.cancelled():
                outer.cancel()
                return
            exc = f.exception()
            if exc is None:
                resolve(outer, f.result())
            elif type(exc) is DigestMismatchError and exc.entry_id in self.rejected:
                fail(outer, TamperedEntryError(
                    f"ledger {self.ledger_id} entry {exc.entry_id}: no replica holds the bytes "
                    f"its Merkle root proves ({exc})", ledger_id=self.ledger_id,
                    entry_id=exc.entry_id))
            else:
                fail(outer, exc)
        fut.add_done_callback(done)
        return outer


def not_verifiable(ledger_id: int) -> InvalidArgumentError:
    return InvalidArgumentError(f"ledger {ledger_id} is not verifiable (create it with "
                                f"verifiable=True)", ledger_id=ledger_id)
