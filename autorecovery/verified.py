"""The entry check of a closed verifiable ledger (issue 43): a copy that does not match the
ledger's Merkle root is treated like a lost copy.

``Replicator.fill`` (the auditor's entry check) calls ``heal_mismatches`` for each closed
verifiable ledger.  It reads every member's copy of every entry (one READ per entry and
member), hashes each payload into its RFC 9162 leaf and chooses the copies that make up the
root in the metadata (``bookie.client.verify.resolve_leaves``).  A bookie holding a copy that
does not match cannot be given the right one in place (entries are write-once: the bookie
refuses other bytes for an entry it holds), so its position in that fragment is healed as a
lost bookie's is: copied to a writable bookie outside the ensemble from the members whose copies
match, and repointed (``Replicator._heal_fragment``; the old bookie's copies then go with its GC
of ledgers it is no longer named in).  With no spare bookie the heal waits for the next check,
logged.  A copy that is missing or unreadable is ``fill``'s own business, not this module's.
"""

from __future__ import annotations

from bookie.autorecovery import rules
from bookie.autorecovery.copier import CopyError
from bookie.client.merkle import leaf_hash
from bookie.client.protocol.copies import replicas
from bookie.client.metadata import to_info
from bookie.client.verify import resolve_leaves
from bookie.wire import DIGEST_SIZES, ENTRY_HEADER_SIZE


def copies_of(rep, ledger_id: int, meta) -> dict[int, dict[str, bytes | str]]:
    """{entry: {bookie: leaf hash of its copy, or a problem}} over every member."""
    info, stride = to_info(ledger_id, meta), meta.ensemble_size
    skip = ENTRY_HEADER_SIZE + DIGEST_SIZES[meta.digest_type]
    out: dict[int, dict[str, bytes | str]] = {}
    for entry_id in range(meta.tree_size):
        out[entry_id] = {}
        for bookie in replicas(info, entry_id):
            try:
                got = rep.bookies.read_strided(bookie, ledger_id, entry_id, 1, stride)
            except CopyError as e:
                out[entry_id][bookie] = str(e)
                continue
            out[entry_id][bookie] = leaf_hash(got[0][skip:]) if got else "does not hold it"
    return out


def heal_mismatches(rep, ledger_id: int, meta) -> int:
    """Repoint each (fragment, bookie) that holds a copy not matching the root; returns how
    many were repointed."""
    if not (meta.verifiable and meta.is_closed) or meta.tree_size == 0:
        return 0
    copies = copies_of(rep, ledger_id, meta)
    leaves, why = resolve_leaves(meta.merkle_root, meta.tree_size, copies)
    if leaves is None:
        rep.log("verifiable ledger matches its Merkle root on no choice of copies",
                level="error", ledger_id=ledger_id, reason=why)
        return 0
    bad: dict[str, set[int]] = {}  # bookie -> first entries of the fragments it holds badly
    firsts = [first for first, _ in meta.fragments]
    for entry_id, by_bookie in copies.items():
        for bookie, copy in by_bookie.items():
            if isinstance(copy, bytes) and copy != leaves[entry_id]:
                rep.log("copy does not match the ledger's Merkle root", level="warning",
                        ledger_id=ledger_id, entry_id=entry_id, bookie=bookie)
                bad.setdefault(bookie, set()).add(max(f for f in firsts if f <= entry_id))
    healed = 0
    keys = rep._keys(ledger_id, rep._password(meta))
    for bookie, fragment_firsts in sorted(bad.items()):
        for heal in rules.plan_ledger(meta, {bookie}, rep.rng, {bookie}):
            if heal.first in fragment_firsts and rep._heal_fragment(ledger_id, heal, keys) == "healed":
                healed += 1
                rep.log("tampered copies replaced", ledger_id=ledger_id, first=heal.first,
                        bookie=bookie)
    return healed
