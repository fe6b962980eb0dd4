"""A corrupt replica is skipped (the pure ReadOp against scripted replicas).

A copy whose digest, ledger id or entry id does not match moves its entry to the next replica:
the read succeeds whenever some replica of each entry holds an intact copy, never asks a
replica twice for an entry it answered badly, and - finished or failed - asks for nothing more.
The replicas answer as bookies do: the entries they hold of the run asked for (consecutive, or
every stride-th one with STRIDE) from its first one, or NO_ENTRY.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.client.digest import DigestManager
from bookie.client.errors import BookKeeperError, DigestMismatchError
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.quorum import write_set
from bookie.client.protocol.reader import Deliver, ReadOp
from bookie.wire import Status

LEDGER = 9
DIGEST = DigestManager(LEDGER, "crc32c", b"pw")
OTHER_LEDGER = DigestManager(LEDGER + 1, "crc32c", b"pw")
MAX_ANSWERS = 2_000  # far more than any read here needs; the old reader never stopped


def payload(entry_id: int) -> bytes:
    return b"value-%04d" % entry_id  # all the same size: a forged copy fits in its place


def intact(entry_id: int) -> bytes:
    return DIGEST.encode(entry_id, entry_id - 1, 10 * (entry_id + 1), payload(entry_id))


def flip(raw: bytes, offset: int, mask: int) -> bytes:
    out = bytearray(raw)
    out[offset] ^= mask
    return bytes(out)


# Each makes a bad copy of entry e that a broken disk or bookie could return in its place.
CORRUPTIONS = {
    "bad_digest": lambda e: flip(intact(e), -1, 0xFF),
    "entry_id_in_header": lambda e: flip(intact(e), 15, 0x40),  # claims entry e ^ 0x40
    "ledger_id_in_header": lambda e: flip(intact(e), 7, 0x01),
    "another_entry": lambda e: intact(e + 50),  # a good copy, of another entry
    "another_ledger": lambda e: OTHER_LEDGER.encode(e, e - 1, 10 * (e + 1), payload(e)),
    "truncated": lambda e: intact(e)[:20],
}


class Replicas:
    """Scripted bookies: ``held[bookie][entry_id]`` is the copy a bookie returns (absent: it
    does not hold the entry).  Counts every READ and when it came."""

    def __init__(self, held: dict[str, dict[int, bytes]]):
        self.held = held
        self.reads: list[A.SendRead] = []

    def answer(self, a: A.SendRead) -> A.ReadResponse:
        self.reads.append(a)
        copies = self.held.get(a.bookie, {})
        out = []
        entry_id = a.first_entry_id
        while entry_id in copies and len(out) < a.max_count:
            out.append(copies[entry_id])
            entry_id += a.stride
        if not out:
            return A.ReadResponse(a, Status.NO_ENTRY)
        return A.ReadResponse(a, Status.OK, out)

    def asked_for(self, bookie: str, entry_id: int) -> int:
        """READs to ``bookie`` whose range covered ``entry_id``."""
        return sum(1 for r in self.reads if r.bookie == bookie and
                   entry_id in range(r.first_entry_id, r.first_entry_id + r.max_count * r.stride,
                                     r.stride))


def ledger(e: int, w: int) -> tuple[LedgerInfo, tuple[str, ...]]:
    names = tuple(f"b{i}:3181" for i in range(e))
    return LedgerInfo(LEDGER, e, w, w, fragments=((0, names),)), names


def replicas_of(info: LedgerInfo, entry_id: int) -> list[str]:
    ensemble = info.ensemble_for(entry_id)
    return [ensemble[p] for p in write_set(entry_id, info.ensemble_size, info.write_quorum)]


def run(op: ReadOp, replicas: Replicas, rng: random.Random):
    """Deliver the op's READs (in an order ``rng`` picks) until it finished; returns the
    Finished action and the entries it delivered.  Fails if it keeps asking."""
    queue = list(op.start())
    delivered, finished = [], None
    for _ in range(MAX_ANSWERS):
        if not queue:
            break
        a = queue.pop(rng.randrange(len(queue)))
        for out in op.handle(replicas.answer(a)):
            if isinstance(out, A.SendRead):
                assert finished is None, "asked for more after finishing"
                queue.append(out)
            elif isinstance(out, Deliver):
                delivered += out.entries
            elif isinstance(out, A.Finished):
                finished = out
    else:
        raise AssertionError(f"the read did not finish within {MAX_ANSWERS} answers "
                             f"({len(replicas.reads)} READs sent)")
    assert finished is not None, "the read stopped asking without finishing"
    return finished, delivered, queue


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
@pytest.mark.parametrize("max_count", [1, 16])
def test_a_bad_copy_on_the_first_replica_is_read_from_the_next(kind, max_count):
    info, names = ledger(3, 3)
    n = 12
    held = {b: {e: intact(e) for e in range(n)} for b in names}
    bad = {}
    for e in (0, 4, 5, 11):  # first replica of e is b[e % 3]
        first = replicas_of(info, e)[0]
        held[first][e] = CORRUPTIONS[kind](e)
        bad[e] = first
    replicas = Replicas(held)
    op = ReadOp(info, 0, n - 1, DIGEST.decode, max_count=max_count,
                decode_many=DIGEST.decode_many)
    finished, delivered, _ = run(op, replicas, random.Random(1))
    assert finished.error is None, finished.error
    assert [x.data for x in delivered] == [payload(e) for e in range(n)]
    for e, bookie in bad.items():
        assert replicas.asked_for(bookie, e) <= 1 + (max_count > 1), (e, bookie)


def test_no_intact_copy_fails_naming_the_entry_and_asks_nothing_more():
    info, names = ledger(3, 3)
    held = {b: {0: intact(0), 1: CORRUPTIONS["entry_id_in_header"](1)} for b in names}
    replicas = Replicas(held)
    op = ReadOp(info, 0, 1, DIGEST.decode, decode_many=DIGEST.decode_many)
    finished, _, pending = run(op, replicas, random.Random(2))
    assert isinstance(finished.error, DigestMismatchError)
    assert "entry 1" in str(finished.error)
    assert len(replicas.reads) <= 3 + 3  # at most once per replica for each of the 2 entries
    for a in pending:  # answers still on their way change nothing and ask for nothing
        assert op.handle(replicas.answer(a)) == []


@settings(max_examples=300, deadline=None)
@given(shape=st.sampled_from([(1, 1), (2, 2), (3, 2), (3, 3), (4, 3), (5, 2)]),
       n=st.integers(1, 20), max_count=st.sampled_from([1, 3, 64]),
       copies=st.lists(st.sampled_from(["intact", "missing", *sorted(CORRUPTIONS)]),
                       min_size=100, max_size=100),
       seed=st.integers(0, 2**32))
def test_a_read_succeeds_exactly_when_every_entry_has_an_intact_copy(shape, n, max_count,
                                                                    copies, seed):
    info, names = ledger(*shape)
    held: dict[str, dict[int, bytes]] = {b: {} for b in names}
    choice = iter(copies * 10)
    readable = True
    for e in range(n):
        kinds = [next(choice) for _ in replicas_of(info, e)]
        readable &= "intact" in kinds
        for bookie, kind in zip(replicas_of(info, e), kinds):
            if kind == "intact":
                held[bookie][e] = intact(e)
            elif kind != "missing":
                held[bookie][e] = CORRUPTIONS[kind](e)
    replicas = Replicas(held)
    op = ReadOp(info, 0, n - 1, DIGEST.decode, max_count=max_count,
                decode_many=DIGEST.decode_many)
    finished, delivered, pending = run(op, replicas, random.Random(seed))
    if readable:
        assert finished.error is None, finished.error
        assert [x.data for x in delivered] == [payload(e) for e in range(n)]
    else:
        assert isinstance(finished.error, BookKeeperError)
    # no READ is ever repeated: a bookie that answered badly is not asked the same again
    asked = [(r.bookie, r.first_entry_id) for r in replicas.reads]
    assert len(asked) == len(set(asked)), "a READ was sent twice"
    for a in pending:
        assert op.handle(replicas.answer(a)) == []
