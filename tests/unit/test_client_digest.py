"""Entry format and digests: round trips, tamper detection, master keys."""

import dataclasses
import gc
import sys
import weakref
import zlib

import crc32c
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie import compiled
from bookie.client import digest as digest_module
from bookie.client.digest import DigestManager, EntryRun, LedgerEntry, master_key, password_digest
from bookie.client.protocol.actions import RawEntries
from bookie.client.errors import DigestMismatchError, InvalidArgumentError
from bookie.wire import DIGEST_SIZES, ENTRY_HEADER_SIZE, unpack_entry_header


@given(digest=st.sampled_from(sorted(DIGEST_SIZES)), payload=st.binary(max_size=300),
       entry_id=st.integers(0, 2**62), lac=st.integers(-1, 2**62))
def test_encode_decode_round_trip(digest, payload, entry_id, lac):
    dm = DigestManager(42, digest, b"secret")
    raw = dm.encode(entry_id, lac, 1000, payload)
    assert len(raw) == ENTRY_HEADER_SIZE + DIGEST_SIZES[digest] + len(payload)
    assert unpack_entry_header(raw) == (42, entry_id, lac, 1000)
    entry = dm.decode(raw)
    assert (entry.entry_id, entry.lac, entry.length, entry.data) == (entry_id, lac, 1000, payload)


@pytest.mark.parametrize("digest", ["crc32", "crc32c", "mac"])
def test_any_flipped_bit_is_a_digest_mismatch_naming_the_entry(digest):
    dm = DigestManager(1, digest, b"pw")
    raw = dm.encode(5, 4, 3, b"abc")
    for i in range(8, len(raw)):  # from entry_id on (a changed ledger id is caught too)
        bad = bytearray(raw)
        bad[i] ^= 0x10
        with pytest.raises(DigestMismatchError):
            dm.decode(bytes(bad))
    bad = bytearray(raw)
    bad[-1] ^= 1
    with pytest.raises(DigestMismatchError, match="entry 5") as err:
        dm.decode(bytes(bad))
    assert err.value.entry_id == 5


def test_crc_digests_are_the_standard_checksums_as_big_endian_u64():
    header_and_payload = None
    for digest, fn in (("crc32", zlib.crc32), ("crc32c", crc32c.crc32c)):
        raw = DigestManager(9, digest, b"").encode(1, 0, 2, b"hi")
        header_and_payload = raw[:32] + raw[40:]
        assert raw[32:40] == fn(header_and_payload).to_bytes(8, "big")


def test_mac_depends_on_password_and_entry_of_another_ledger_is_refused():
    raw = DigestManager(1, "mac", b"right").encode(0, -1, 1, b"x")
    with pytest.raises(DigestMismatchError):
        DigestManager(1, "mac", b"wrong").decode(raw)
    with pytest.raises(DigestMismatchError, match="ledger 1"):
        DigestManager(2, "crc32", b"").decode(DigestManager(1, "crc32", b"").encode(0, -1, 1, b"x"))


def test_master_key_and_password_digest():
    assert len(master_key(b"pw")) == 20 and master_key(b"pw") == master_key(b"pw")
    assert master_key(b"pw") != master_key(b"pw2")
    assert password_digest(b"pw") != master_key(b"pw")
    with pytest.raises(InvalidArgumentError, match="crc32c"):
        DigestManager(1, "md5", b"")


def test_entries_read_are_outside_the_garbage_collector_where_compiled():
    """Compiled, decoded entries are untracked (they can be in no cycle; a collection that
    scanned every entry a reader holds cost a quarter of the read path); plain, tracked."""
    assert digest_module._COMPILED == ("client.digest" in compiled.compiled_modules())
    dm = DigestManager(3, "crc32", b"")
    copies = [dm.encode(e, e - 1, e, b"p%d" % e) for e in range(digest_module.RUN_MIN_ENTRIES)]
    run = dm.decode_many(RawEntries(np.array(list(map(len, copies)), "<u4").tobytes(),
                                    b"".join(copies)))
    assert isinstance(run, EntryRun) and run.intact
    one = dm.decode(copies[5])
    assert one == run[5] and one.data == b"p5"
    mac = DigestManager(3, "mac", b"pw")
    by_mac = mac.decode(mac.encode(5, 4, 5, b"p5"))  # the generic path
    assert by_mac == one
    assert {gc.is_tracked(e) for e in [*run, one, by_mac]} == {not digest_module._COMPILED}


def test_entries_built_by_the_run_decoder_are_ordinary_frozen_ledger_entries():
    """``_new_entries`` and ``_new_single`` (untracked where compiled) make the same objects as
    the dataclass's own, equal, hashed, printed and frozen alike, holding their values (counted
    references: a payload outlives no entry and dies with the last)."""
    columns = ([7, 7, 7], [0, 1, 2], [b"x0", b"x1", b"x2"], [-1, 0, 1], [2, 4, 6])
    built = digest_module._new_entries(*columns)
    made = [LedgerEntry(*row) for row in zip(*columns)]
    assert [digest_module._new_single(*row) for row in zip(*columns)] == made
    assert built == made and list(map(hash, built)) == list(map(hash, made))
    assert list(map(repr, built)) == list(map(repr, made))
    assert all(type(e) is LedgerEntry for e in built)
    assert [e.data for e in built] == [b"x0", b"x1", b"x2"] and built[2].length == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        built[0].data = b"y"
    held = object()  # any object in a column is held once per entry that holds it
    before = sys.getrefcount(held)
    rows = digest_module._new_entries([held, held], [0, 1], [b"", b""], [0, 0], [0, 0])
    assert sys.getrefcount(held) == before + 2
    del rows
    assert sys.getrefcount(held) == before
    single = digest_module._new_single(held, 0, b"", 0, 0)
    assert sys.getrefcount(held) == before + 1
    del single
    assert sys.getrefcount(held) == before
    class Payload:
        pass
    payload = Payload()
    ref = weakref.ref(payload)
    one = digest_module._new_entries([1], [1], [payload], [1], [1])
    del payload
    assert ref() is not None and one[0].data is ref()
    del one
    assert ref() is None


@given(digest=st.sampled_from(["crc32", "crc32c"]),
       rows=st.lists(st.tuples(st.integers(0, 2**62), st.integers(-1, 2**62),
                               st.integers(0, 2**62), st.binary(max_size=40)),
                     min_size=24, max_size=40),
       flip=st.one_of(st.none(), st.integers(0, 10**6)))
def test_a_run_decoded_in_one_pass_is_what_entry_by_entry_decoding_says(digest, rows, flip):
    """decode_many's one pass (header CRCs from tables, any header byte: ids, lacs, lengths)
    against ``decode`` entry by entry, a flipped bit anywhere included."""
    dm = DigestManager(5, digest, b"")
    copies = [dm.encode(e, lac, length, p) for e, lac, length, p in rows]
    if flip is not None:
        i = flip % len(copies)
        bad = bytearray(copies[i])
        bad[flip % len(bad)] ^= 1 << (flip % 8)
        copies[i] = bytes(bad)
    run = dm.decode_many(RawEntries(np.array(list(map(len, copies)), "<u4").tobytes(),
                                    b"".join(copies)))
    assert isinstance(run, EntryRun)
    for got, raw in zip(run, copies):
        try:
            want = dm.decode(raw)
        except DigestMismatchError as exc:
            assert isinstance(got, DigestMismatchError) and str(got) == str(exc)
        else:
            assert got == want
    assert run.intact == all(not isinstance(e, DigestMismatchError) for e in run)
