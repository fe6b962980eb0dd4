"""Copying entries between bookies, as stored (digest and all), throttled.

A replication worker never decodes payloads: it reads formatted entries from a surviving
replica (strided reads: every E-th entry, one write-set residue at a time) and adds them with
the recovery flag to the replacement bookie, so the copy is byte for byte what the writer sent.
The add proves its right with a ``Key``: the ledger's cluster recovery credential (flag
RECOVERY_CREDENTIAL, bookie.metadata.recovery_secret), or its master key when a password is
known (the fallback for bookies that predate the flag; they refuse it: ``Refused``).  Only the entry header is checked (ledger id and entry id), so a
replica that answers with the wrong entry is never copied.

``RateLimiter`` spaces batches so that the copy stays under ``replicationRateByBytes`` per
second; ``rereplicationEntryBatchSize`` bounds each read and add, so the bookies that serve
foreground traffic see small requests between them.
"""

from __future__ import annotations

import itertools
import time
from typing import NamedTuple

import orjson
import zmq

from bookie import wire
from bookie.client.connection import connect_proved
from bookie.client.resolver import UnresolvedBookieError
from bookie.wire import Flag, Op, Status


class CopyError(Exception):
    """A copy could not be made now (a bookie did not answer or refused); try again later."""


class Refused(CopyError):
    """The target refused the recovery add (UNAUTHORIZED, BAD_REQUEST): another key may do."""


class NoKey(CopyError):
    """No key can carry a recovery add to this ledger: the cluster has no recovery secret and
    its password is not one autorecovery knows.  Nothing can be copied, so nothing may be
    repointed (``core.naming.may_unname``: a copy never made is not ``copied_all``)."""

    def __init__(self, ledger_id: int):
        super().__init__(f"ledger {ledger_id}: no key to copy its entries with: the metadata "
                         f"store holds no recovery secret (on ZooKeeper set "
                         f"zkBookieDigestAuthFile) and its password is not in "
                         f"autoRecoveryLedgerPasswords")
        self.ledger_id = ledger_id


class Key(NamedTuple):
    """What a recovery add carries in its master key frame, and the flags that say what it is."""

    key: bytes
    flags: int = 0  # Flag.RECOVERY_CREDENTIAL: ``key`` is the ledger's recovery credential


class EntryMissing(CopyError):
    """No source holds an entry that should exist."""

    def __init__(self, ledger_id: int, entry_id: int, sources):
        super().__init__(f"ledger {ledger_id} entry {entry_id}: no live copy on "
                         f"{', '.join(sources)}")
        self.entry_id = entry_id


class RateLimiter:
    """At most ``rate_bytes_per_s`` on average (<= 0: unlimited); ``clock`` is monotonic s."""

    def __init__(self, rate_bytes_per_s: float, clock=time.monotonic, sleep=time.sleep):
        self.rate = float(rate_bytes_per_s)
        self.clock, self.sleep = clock, sleep
        self._next = clock()

    def spend(self, n_bytes: int) -> None:
        if self.rate <= 0:
            return
        now = self.clock()
        start = max(now, self._next)
        self._next = start + n_bytes / self.rate
        if start > now:
            self.sleep(start - now)


class Bookies:
    """One pair of DEALER sockets per bookie, made on first use; requests one at a time."""

    def __init__(self, timeout_s: float = 10.0, curve=None, resolver=None):
        """``curve``: a ``bookie.client.auth.ClientCurve`` when the bookies speak CURVE.
        ``resolver``: a ``bookie.client.resolver.BookieResolver`` over the metadata store, so
        that bookies with a named id (``bookieId``) are found where they are now; None: only
        address ids."""
        self.ctx = zmq.Context()
        self.curve = curve
        self.resolver = resolver
        self.timeout_ms = int(timeout_s * 1000)
        self._socks: dict[tuple[str, int], zmq.Socket] = {}
        self._proofs: dict[tuple[str, int], object] = {}  # connection.Proof of each socket
        self._ids = itertools.count(1)

    def close(self) -> None:
        for p in self._proofs.values():
            p.close()
        self._proofs.clear()
        for s in self._socks.values():
            s.close(linger=0)
        self._socks.clear()
        self.ctx.term()
        if self.resolver is not None:
            self.resolver.close()

    def _sock(self, bookie: str, read: bool) -> zmq.Socket:
        key = (bookie, int(read))
        sock = self._socks.get(key)
        if sock is None:
            try:
                sock, proof = connect_proved(self.ctx, bookie, int(read), self.curve,
                                             resolver=self.resolver)
            except UnresolvedBookieError as e:
                raise CopyError(str(e)) from None
            self._socks[key] = sock
            if proof is not None:  # None over a local socket: no key to prove there
                self._proofs[key] = proof
        return sock

    def _drop(self, bookie: str, read: bool) -> None:
        sock = self._socks.pop((bookie, int(read)), None)
        proof = self._proofs.pop((bookie, int(read)), None)
        if proof is not None:
            proof.failed()  # a server that could not prove the key: said once, as down
            proof.close()
        if sock is not None:
            sock.close(linger=0)
        if self.resolver is not None:
            self.resolver.forget(bookie)  # no answer: it may have moved

    def request(self, bookie: str, read: bool, op: int, ledger_id: int, flags: int, body
                ) -> tuple[int, list]:
        return self.wait(bookie, read, self.send(bookie, read, op, ledger_id, flags, body))

    def send(self, bookie: str, read: bool, op: int, ledger_id: int, flags: int, body) -> int:
        """Send a request; collect its answer with ``wait`` (one at a time per socket)."""
        sock = self._sock(bookie, read)
        rid = next(self._ids)
        sock.send_multipart([wire.pack_header(op, flags, rid, ledger_id), *body])
        return rid

    def wait(self, bookie: str, read: bool, rid: int) -> tuple[int, list]:
        sock = self._sock(bookie, read)
        deadline = time.monotonic() + self.timeout_ms / 1000.0
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not sock.poll(left_ms):
                self._drop(bookie, read)  # a late answer must not meet the next request
                raise CopyError(f"{bookie}: no answer in {self.timeout_ms} ms")
            frames = sock.recv_multipart()
            _, status, got, _ = wire.unpack_header(frames[0])
            if got == rid:
                return status, frames[1:]

    def read_strided(self, bookie: str, ledger_id: int, first: int, count: int, stride: int
                     ) -> list[bytes]:
        """Entries ``first, first+stride, ...`` (at most ``count``) that ``bookie`` holds from
        ``first`` on without a gap; [] if it holds none of them."""
        flags, body = wire.read_request(first, count, stride)
        status, frames = self.request(bookie, True, Op.READ, ledger_id, flags, [body])
        if status in (Status.NO_ENTRY, Status.NO_LEDGER):
            return []
        if status != Status.OK:
            raise CopyError(f"{bookie}: read of ledger {ledger_id} from {first} answered "
                            f"{Status(status).name}")
        entries = [bytes(e) for e in wire.split_batch(frames[0], frames[1])]
        for k, entry in enumerate(entries):
            got_ledger, got_entry = wire.unpack_entry_header(entry)[:2]
            if got_ledger != ledger_id or got_entry != first + k * stride:
                return entries[:k]  # a wrong answer is no copy
        return entries

    def info(self, bookie: str) -> dict:
        """The bookie's INFO answer (id, free and total bytes of its ledger disk, writable)."""
        status, frames = self.request(bookie, False, Op.INFO, 0, 0, [])
        if status != Status.OK:
            raise CopyError(f"{bookie}: INFO answered {Status(status).name}")
        return orjson.loads(frames[0])

    def add_recovery(self, bookie: str, ledger_id: int, key: Key, entries: list[bytes]) -> None:
        self.add_done(bookie, ledger_id, self.send_add(bookie, ledger_id, key, entries))

    def send_add(self, bookie: str, ledger_id: int, key: Key, entries: list[bytes]) -> int:
        lengths, data = wire.pack_batch(entries)
        return self.send(bookie, False, Op.ADD, ledger_id, int(Flag.RECOVERY_ADD) | key.flags,
                         [key.key, lengths, data])

    def add_done(self, bookie: str, ledger_id: int, rid: int) -> None:
        status, _ = self.wait(bookie, False, rid)
        if status != Status.OK:
            name = Status(status).name if status in Status._value2member_map_ else str(status)
            error = Refused if status in (Status.UNAUTHORIZED, Status.BAD_REQUEST) else CopyError
            raise error(f"{bookie}: recovery add to ledger {ledger_id} answered {name}")


def copy_residue(bookies: Bookies, ledger_id: int, key: Key, copy, stride: int,
                 target: str, batch: int, limiter: RateLimiter, progress=None,
                 missing: list | None = None) -> int:
    """Copy the entries of one ``rules.Copy`` to ``target``; returns the bytes copied.

    ``missing``: when a list, an entry every source answered it does not hold is appended to
    it and skipped (the bookie healed around is gone for good: such an entry is lost whatever
    is done, and the others must still be copied); None: it raises EntryMissing.

    Raises:
        EntryMissing: an entry is on none of the sources (``missing`` None).
        Refused: the target refused the key.
        CopyError: a bookie did not answer or refused.
    """
    copied = 0
    next_entry, left = copy.first_entry, copy.count
    sources = list(copy.sources)
    pending = None  # the add in flight while the next batch is read
    while left > 0:
        want = min(batch, left)
        entries: list[bytes] = []
        failed = None
        for source in list(sources):
            try:
                entries = bookies.read_strided(source, ledger_id, next_entry, want, stride)
            except CopyError as e:
                entries, failed = [], e
            if entries:
                if source != sources[0]:
                    sources.remove(source)
                    sources.insert(0, source)  # keep reading where it worked
                break
        if not entries and missing is not None and failed is None:
            missing.append(next_entry)  # every source answered that it holds none
            next_entry += stride
            left -= 1
            continue
        if not entries:
            raise EntryMissing(ledger_id, next_entry, copy.sources)
        n_bytes = sum(len(e) for e in entries)
        if pending is not None:
            bookies.add_done(target, ledger_id, pending)
        limiter.spend(n_bytes)
        pending = bookies.send_add(target, ledger_id, key, entries)
        copied += n_bytes
        next_entry += len(entries) * stride
        left -= len(entries)
        if progress is not None:
            progress(len(entries), n_bytes)
    if pending is not None:
        bookies.add_done(target, ledger_id, pending)
    return copied
