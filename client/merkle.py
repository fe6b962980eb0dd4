"""RFC 9162 Merkle tree hashes over a ledger's entries: the root, inclusion and consistency
proofs, and their verifiers.

Theory of operation
-------------------
A verifiable ledger's tree has one leaf per entry, in entry-id order: leaf ``i`` is
``SHA-256(0x00 | payload of entry i)`` and an inner node ``SHA-256(0x01 | left | right)``; the
tree of ``n`` leaves splits at the largest power of two below ``n`` (RFC 9162 section 2.1.1),
and the empty tree's hash is ``SHA-256("")``.  A tree of size ``n`` is the ledger's entries
``0 .. n-1``, so a closed ledger's tree size is its last entry id + 1.

``MerkleTree`` keeps the leaf hashes and, level by level, the hash of every complete aligned
subtree, so appending costs one leaf hash (and on average one node hash), and the root, a proof,
or the root of any earlier size costs O(log^2 n) node hashes.  Its methods may be called from
several threads (a writer appends on the caller's thread, its close asks for the root on the
I/O thread).

``verify_inclusion`` and ``verify_consistency`` need nothing but their arguments (no client, no
bookie, no password): a third party holding a root can check an entry.  Malformed input (a
root that is not 64 hex digits, a proof element that is not 32 bytes, sizes out of range)
raises one ``ValueError`` naming the problem; a well-formed proof that does not prove the claim
is ``False``.
"""

from __future__ import annotations

import hashlib
import threading

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


_LEAF_PREFIX = hashlib.sha256(b"\x00")  # copied per leaf: the payload is hashed, never copied
_NODE_PREFIX = hashlib.sha256(b"\x01")


def leaf_hash(payload: bytes) -> bytes:
    """RFC 9162 leaf hash: SHA-256(0x00 | payload)."""
    h = _LEAF_PREFIX.copy()
    h.update(payload)
    return h.digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node hash: SHA-256(0x01 | left | right)."""
    h = _NODE_PREFIX.copy()
    h.update(left)
    h.update(right)
    return h.digest()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """The Merkle tree of a growing list of leaves (see the module docstring)."""

    def __init__(self, leaf_hashes=()):
        self._levels: list[list[bytes]] = [[]]  # _levels[j][i]: leaves i*2^j .. (i+1)*2^j - 1
        self._lock = threading.Lock()
        for h in leaf_hashes:
            self.append_hash(h)

    @property
    def size(self) -> int:
        return len(self._levels[0])

    def append(self, payload: bytes) -> None:
        self.append_hash(leaf_hash(payload))

    def append_hash(self, h: bytes) -> None:
        with self._lock:
            levels = self._levels
            levels[0].append(h)
            j = 0
            while len(levels[j]) % 2 == 0:  # a pair just completed: its parent is known now
                if len(levels) == j + 1:
                    levels.append([])
                levels[j + 1].append(node_hash(levels[j][-2], levels[j][-1]))
                j += 1

    def truncate(self, size: int) -> None:
        """Forget the leaves from ``size`` on (entries that never got ids)."""
        with self._lock:
            for j, level in enumerate(self._levels):
                del level[size >> j:]

    def leaf(self, index: int) -> bytes:
        return self._levels[0][index]

    def _check_size(self, size: int | None) -> int:
        n = self.size if size is None else size
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self.size:
            raise ValueError(f"tree size must be 0..{self.size}, got {size!r}")
        return n

    def _mth(self, lo: int, hi: int) -> bytes:
        n = hi - lo
        if n == 0:
            return EMPTY_ROOT
        if n & (n - 1) == 0 and lo % n == 0:  # a complete aligned subtree: kept
            j = n.bit_length() - 1
            return self._levels[j][lo >> j]
        k = _split(n)
        return node_hash(self._mth(lo, lo + k), self._mth(lo + k, hi))

    def root(self, size: int | None = None) -> bytes:
        """The root of the first ``size`` leaves (default: all)."""
        with self._lock:
            return self._mth(0, self._check_size(size))

    def root_hex(self, size: int | None = None) -> str:
        return self.root(size).hex()

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The audit path of leaf ``index`` in the tree of the first ``size`` leaves."""
        with self._lock:
            n = self._check_size(size)
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
                raise ValueError(f"entry {index!r} is not in a tree of size {n}")
            path: list[bytes] = []
            lo, hi = 0, n
            while hi - lo > 1:
                k = _split(hi - lo)
                if index < lo + k:
                    path.append(self._mth(lo + k, hi))
                    hi = lo + k
                else:
                    path.append(self._mth(lo, lo + k))
                    lo = lo + k
            path.reverse()
            return path

    def consistency_proof(self, old_size: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 proof that the tree of ``old_size`` leaves is a prefix of the tree of
        ``size`` leaves (1 <= old_size <= size)."""
        with self._lock:
            n = self._check_size(size)
            if isinstance(old_size, bool) or not isinstance(old_size, int) or not 1 <= old_size <= n:
                raise ValueError(f"old tree size must be 1..{n}, got {old_size!r}")
            return self._subproof(old_size, 0, n, True)

    def _subproof(self, m: int, lo: int, hi: int, whole: bool) -> list[bytes]:
        n = hi - lo
        if m == n:
            return [] if whole else [self._mth(lo, hi)]
        k = _split(n)
        if m <= k:
            return self._subproof(m, lo, lo + k, whole) + [self._mth(lo + k, hi)]
        return self._subproof(m - k, lo + k, hi, False) + [self._mth(lo, lo + k)]


# -- verifying: nothing but the arguments ------------------------------------------------------

def _root_bytes(root, what: str = "root") -> bytes:
    if isinstance(root, (bytes, bytearray)) and len(root) == HASH_SIZE:
        return bytes(root)
    if isinstance(root, str) and len(root) == 2 * HASH_SIZE:
        try:
            return bytes.fromhex(root)
        except ValueError:
            pass
    raise ValueError(f"{what} must be {2 * HASH_SIZE} hex digits (or {HASH_SIZE} bytes), "
                     f"got {str(root)[:80]!r}")


def _proof_bytes(proof) -> list[bytes]:
    if isinstance(proof, (str, bytes, bytearray)) or not hasattr(proof, "__iter__"):
        raise ValueError("proof must be a list of hashes (32 bytes or 64 hex digits each)")
    return [_root_bytes(p, f"proof element {i}") for i, p in enumerate(proof)]


def _size(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def verify_inclusion(root_hex, tree_size: int, entry_id: int, payload: bytes, proof) -> bool:
    """True when ``payload`` is entry ``entry_id`` of the ledger whose tree of ``tree_size``
    entries has root ``root_hex``, by the audit path ``proof`` (RFC 9162 section 2.1.3.2).
    An entry id at or past the tree size, or a proof of the wrong length, is False; a
    malformed root or proof element is a ValueError."""
    root = _root_bytes(root_hex)
    path = _proof_bytes(proof)
    n, index = _size(tree_size, "tree size"), _size(entry_id, "entry id")
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise ValueError(f"payload must be bytes, got {type(payload).__name__}")
    if index >= n:
        return False
    fn, sn, r = index, n - 1, leaf_hash(bytes(payload))
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(old_root_hex, old_size: int, new_root_hex, new_size: int, proof) -> bool:
    """True when the tree of ``old_size`` entries with root ``old_root_hex`` is a prefix of the
    tree of ``new_size`` entries with root ``new_root_hex``, by ``proof`` (RFC 9162 section
    2.1.4.2).  Sizes must satisfy 1 <= old_size <= new_size (else ValueError)."""
    old_root, new_root = _root_bytes(old_root_hex, "old root"), _root_bytes(new_root_hex, "new root")
    path = _proof_bytes(proof)
    m, n = _size(old_size, "old size"), _size(new_size, "new size")
    if not 1 <= m <= n:
        raise ValueError(f"need 1 <= old size <= new size, got {m} and {n}")
    if m == n:
        return not path and old_root == new_root
    if m & (m - 1) == 0:  # the old tree is a complete subtree: its root starts the path
        path = [old_root] + path
    if not path:
        return False
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root
