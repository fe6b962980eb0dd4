"""What a crash leaves at the end of a journal, byte by byte, and what the scan makes of it.

A crash can only tear the group being written (each group is made durable before the next one
starts), so whatever is left of the last group, at whatever byte the tear falls, the scan must
give back exactly the whole groups before it.  Client payloads are adversarial here: entries that
carry valid-looking journal group headers must never turn a torn tail into "corruption in the
middle" (and a refusal to start).
"""

import os
import struct
import zlib

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bookie.storage import journal, records
from bookie.storage.journal import (CorruptJournalError, JournalWriter, journal_end, journal_name,
                                    list_journals, scan)
from journal_forgery import adversarial_payload, guessed_salt_group, old_format_group

KEY = b"tail-key"


# -- journals written with the real writer --------------------------------------------------------

def _fence(i: int) -> bytes:
    return records.fence_record(i, b"k" * 40)


def _add_record(ledger_id: int, payload: bytes) -> bytes:
    """An ADD_BATCH record of one entry: the bytes a client's add puts in a journal group."""
    lengths = struct.pack("<I", len(payload))
    parts, _, _ = records.add_batch_parts(ledger_id, KEY, lengths, payload, recovery=False)
    return b"".join(parts)


def _write(d, bodies, max_size=1 << 20, start=0):
    w = JournalWriter(str(d), start, max_size, 4096)
    for body in bodies:
        w.append([body])
    w.close()
    return w


def _bodies(d, mark=0):
    return [bytes(g.body) for g in scan(str(d), mark)]


def _last_file(d) -> str:
    return os.path.join(str(d), journal_name(list_journals(str(d))[-1]))


# -- damage a tear leaves -----------------------------------------------------------------------

def _damage(fd: int, group_at: int, group_len: int, k: int, mode: str) -> None:
    """Damage the group at file offset ``group_at`` as a crash ``k`` bytes into it could.

    truncate: the file ends at the tear; zero_tail: the bytes from the tear to the group's end
    never reached the disk (the file is preallocated, so they read as zeros); lost_head: the
    first ``k`` bytes (the page holding the group header) never reached the disk while the rest
    of the group did.
    """
    if mode == "truncate":
        os.ftruncate(fd, group_at + k)
    elif mode == "zero_tail":
        os.pwrite(fd, b"\0" * (group_len - k), group_at + k)
    else:
        os.pwrite(fd, b"\0" * k, group_at)


def _tears(path: str, group_at: int, group_len: int, mode: str):
    """For every byte ``k`` of the group a tear can fall at: yields ``k`` with the damage in
    place, and undoes it afterwards."""
    pristine = _read(path)[group_at:]
    fd = os.open(path, os.O_RDWR)
    try:
        for k in range(1, group_len) if mode == "lost_head" else range(group_len):
            _damage(fd, group_at, group_len, k, mode)
            yield k
            os.pwrite(fd, pristine, group_at)
    finally:
        os.close(fd)


def _tear_once(path: str, group_at: int, group_len: int, k: int, mode: str) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        _damage(fd, group_at, group_len, k, mode)
    finally:
        os.close(fd)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _expected(path: str, before: list, last) -> tuple[list, int]:
    """(bodies, end) a scan must find: the whole groups before the last one, and the last one
    too only if the tear happened to leave all of its bytes as they were (zeros lost where
    zeros were written)."""
    at, group = last.file_offset, journal.GROUP_HEADER_SIZE + len(last.body)
    with open(path, "rb") as f:
        f.seek(at)
        on_disk = f.read(group)
    if on_disk == journal.pack_group_header(
            last.start, len(last.body), journal.crc_of([last.body]), _salt(path)) + bytes(last.body):
        return before + [bytes(last.body)], last.end
    return before, last.start


def _salt(path: str) -> int:
    return journal.read_file_header(path, _read(path)[:journal.FILE_HEADER_SIZE]).salt


def _journal_with_last_group(tmp_path, last_body: bytes, n_before=5, start=1000):
    """A journal of ``n_before`` small groups and then ``last_body`` as the last group."""
    before = [_fence(i) for i in range(n_before)]
    _write(tmp_path, before + [last_body], start=start)
    path = _last_file(tmp_path)
    groups = list(journal.scan_file(path))
    last = groups[-1]
    assert bytes(last.body) == last_body
    return before, path, last


@pytest.mark.parametrize("mode", ["truncate", "zero_tail", "lost_head"])
def test_a_tear_at_every_byte_of_the_last_group_keeps_exactly_the_whole_groups_before(tmp_path, mode):
    before, path, last = _journal_with_last_group(tmp_path, _add_record(1, os.urandom(300)))
    group_len = journal.GROUP_HEADER_SIZE + len(last.body)
    for k in _tears(path, last.file_offset, group_len, mode):
        bodies, end = _expected(path, before, last)
        assert _bodies(tmp_path) == bodies, f"{mode} at byte {k} of the last group"
        assert journal_end(str(tmp_path)) == end, f"{mode} at byte {k}"


@pytest.mark.parametrize("mode", ["truncate", "zero_tail", "lost_head"])
def test_entries_that_look_like_journal_groups_cannot_turn_a_torn_tail_into_a_refusal(tmp_path, mode):
    # The last group carries an add whose entry is made of valid-looking groups; whatever byte
    # of that group the crash tears at, the scan must see a torn tail, never junk in the middle.
    payload = adversarial_payload(expect=1000 + 5 * len(_fence(0)))
    before, path, last = _journal_with_last_group(tmp_path, _add_record(1, payload))
    group_len = journal.GROUP_HEADER_SIZE + len(last.body)
    for k in _tears(path, last.file_offset, group_len, mode):
        bodies, end = _expected(path, before, last)
        try:
            assert _bodies(tmp_path) == bodies, f"{mode} at byte {k} of the last group"
            assert journal_end(str(tmp_path)) == end, f"{mode} at byte {k}"
        except CorruptJournalError as e:
            pytest.fail(f"{mode} at byte {k} of the last group: a torn tail was refused: {e}")


_chunk = st.one_of(
    st.binary(min_size=1, max_size=64),
    st.integers(1, 40).map(lambda n: b"\0" * n),
    st.tuples(st.integers(0, 1 << 20), st.binary(min_size=1, max_size=48)).map(
        lambda t: old_format_group(*t)),
    st.tuples(st.integers(0, 1 << 20), st.binary(min_size=1, max_size=48),
              st.integers(0, (1 << 64) - 1)).map(lambda t: guessed_salt_group(*t)),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(_chunk, min_size=1, max_size=12), where=st.floats(0, 1),
       mode=st.sampled_from(["truncate", "zero_tail", "lost_head"]))
@example(chunks=[b"\0"], where=1.0, mode="zero_tail")  # the lost byte was a zero: nothing torn
def test_whatever_the_payload_a_torn_last_group_is_a_torn_tail(tmp_path_factory, chunks, where, mode):
    d = tmp_path_factory.mktemp("j")
    before, path, last = _journal_with_last_group(d, _add_record(3, b"".join(chunks)), n_before=2)
    group_len = journal.GROUP_HEADER_SIZE + len(last.body)
    k = min(group_len - 1, max(1, int(where * group_len)))
    _tear_once(path, last.file_offset, group_len, k, mode)
    bodies, end = _expected(path, before, last)
    assert _bodies(d) == bodies
    assert journal_end(str(d)) == end


# -- corruption in the middle is still refused ---------------------------------------------------

def test_a_damaged_group_before_whole_ones_is_refused_even_with_adversarial_payloads(tmp_path):
    payload = adversarial_payload(expect=0)
    bodies = [_add_record(i, payload) for i in range(4)]
    _write(tmp_path, bodies)
    path = _last_file(tmp_path)
    second = list(journal.scan_file(path))[1]
    with open(path, "r+b") as f:
        f.seek(second.file_offset + journal.GROUP_HEADER_SIZE + 50)
        f.write(b"\xff" * 8)
    with pytest.raises(CorruptJournalError, match=os.path.basename(path)):
        list(scan(str(tmp_path)))


def test_a_lost_group_header_before_whole_groups_is_refused(tmp_path):
    _write(tmp_path, [_fence(i) for i in range(6)])
    path = _last_file(tmp_path)
    third = list(journal.scan_file(path))[2]
    with open(path, "r+b") as f:
        f.seek(third.file_offset)
        f.write(b"\0" * journal.GROUP_HEADER_SIZE)
    with pytest.raises(CorruptJournalError, match="followed by a valid group"):
        journal_end(str(tmp_path))


def test_a_group_that_does_not_continue_the_logical_offsets_is_refused(tmp_path):
    _write(tmp_path, [_fence(i) for i in range(3)])
    path = _last_file(tmp_path)
    header = journal.read_file_header(path, _read(path))
    second = list(journal.scan_file(path))[1]
    body = bytes(second.body)
    forged = journal.pack_group_header(second.start + 1, len(body), journal.crc_of([body]), header.salt)
    with open(path, "r+b") as f:
        f.seek(second.file_offset)
        f.write(forged)
    with pytest.raises(CorruptJournalError, match="logical offset"):
        list(scan(str(tmp_path)))


# -- backups wholly before LastLogMark ------------------------------------------------------------

def _several_files(tmp_path, n_groups=24, max_size=400):
    bodies = [_fence(i) for i in range(n_groups)]
    _write(tmp_path, bodies, max_size=max_size)
    ids = list_journals(str(tmp_path))
    assert len(ids) >= 5
    starts = {}
    for jid in ids:
        path = os.path.join(str(tmp_path), journal_name(jid))
        starts[jid] = journal.read_file_header(path, _read(path))[1]  # (journal_id, start, ...)
    return bodies, ids, starts


def _flip_in_second_group(path: str) -> None:
    second = list(journal.scan_file(path))[1]
    with open(path, "r+b") as f:
        f.seek(second.file_offset + journal.GROUP_HEADER_SIZE + 3)
        f.write(b"\xee" * 4)


def test_damage_in_a_backup_wholly_before_the_mark_is_a_warning_naming_the_file(tmp_path):
    bodies, ids, starts = _several_files(tmp_path)
    mark = starts[ids[3]]  # files ids[0..2] end at or before the mark: backups, never replayed
    damaged = os.path.join(str(tmp_path), journal_name(ids[1]))
    _flip_in_second_group(damaged)
    size = len(bodies[0])
    assert _bodies(tmp_path, mark) == bodies[mark // size:]
    check = journal.check_journal(str(tmp_path), mark)
    assert check.end == size * len(bodies)
    assert len(check.warnings) == 1 and os.path.basename(damaged) in check.warnings[0]
    assert "LastLogMark" in check.warnings[0]


def test_an_unreadable_backup_header_before_the_mark_is_a_warning(tmp_path):
    bodies, ids, starts = _several_files(tmp_path)
    damaged = os.path.join(str(tmp_path), journal_name(ids[0]))
    with open(damaged, "r+b") as f:
        f.write(b"\x13" * 16)
    check = journal.check_journal(str(tmp_path), starts[ids[2]])
    assert check.end == len(bodies[0]) * len(bodies)
    assert [os.path.basename(damaged) in w for w in check.warnings] == [True]


def test_damage_in_the_file_that_holds_the_mark_still_refuses(tmp_path):
    bodies, ids, starts = _several_files(tmp_path)
    damaged = os.path.join(str(tmp_path), journal_name(ids[2]))
    _flip_in_second_group(damaged)
    mark = starts[ids[2]] + 2 * len(bodies[0]) + 1  # inside ids[2], after its damaged group
    assert mark < starts[ids[3]]
    with pytest.raises(CorruptJournalError, match=os.path.basename(damaged)):
        list(scan(str(tmp_path), mark))
    with pytest.raises(CorruptJournalError, match=os.path.basename(damaged)):
        journal.check_journal(str(tmp_path), mark)


def test_a_journal_file_torn_while_being_created_holds_nothing(tmp_path):
    # The writer syncs a new file's header before it writes any group into it, so a file whose
    # header did not reach the disk holds nothing: it must not stop the bookie from starting.
    bodies = [_fence(i) for i in range(3)]
    w = _write(tmp_path, bodies)
    torn = os.path.join(str(tmp_path), journal_name(list_journals(str(tmp_path))[-1] + 1))
    with open(torn, "wb") as f:
        f.write(b"\0" * 4096)
    assert _bodies(tmp_path) == bodies and journal_end(str(tmp_path)) == w.position
    check = journal.check_journal(str(tmp_path), 0)
    assert check.end == w.position
    assert any(os.path.basename(torn) in x for x in check.warnings)
    more = [_fence(9)]
    _write(tmp_path, more, start=check.end)  # the next writer goes on in a new file after it
    assert _bodies(tmp_path) == bodies + more


def test_a_journal_of_the_older_format_is_refused_with_its_format_named(tmp_path):
    path = os.path.join(str(tmp_path), journal_name(1))
    head = struct.pack("<8sQQ", b"BKJRNL01", 1, 0)
    head += struct.pack("<I", zlib.crc32(head))
    with open(path, "wb") as f:
        f.write(head.ljust(64, b"\0") + old_format_group(0, _fence(1)))
    with pytest.raises(journal.JournalFormatError, match="format 1") as e:
        journal_end(str(tmp_path))
    assert journal_name(1) in str(e.value)


def _as_format_2(path: str) -> None:
    """Rewrite a format 3 journal file as the release before wrote it: magic b"BKJRNL02" and
    each group's body CRC zlib's CRC-32 (the headers' CRCs redone)."""
    header = journal.read_file_header(path, _read(path))
    groups = list(journal.scan_file(path))
    with open(path, "r+b") as f:
        head = journal.FILE_HEADER.pack(b"BKJRNL02", header.journal_id, header.start, header.salt,
                                        0)[:journal.FILE_HEADER_CRC_END]
        f.write(head + struct.pack("<I", zlib.crc32(head)))
        for g in groups:
            f.seek(g.file_offset)
            f.write(journal.pack_group_header(g.start, len(g.body), zlib.crc32(g.body), header.salt))


def test_a_format_2_journal_left_by_the_release_before_is_read_with_its_own_crc(tmp_path):
    """Format 3 changed only the body CRC (CRC-32C for zlib's CRC-32): a journal a bookie of
    the release before left behind (a crash just before the upgrade) still replays, whole."""
    bodies = [_fence(i) for i in range(5)]
    _write(tmp_path, bodies)
    path = _last_file(tmp_path)
    assert journal.read_file_header(path, _read(path)).format == 3
    _as_format_2(path)
    assert journal.read_file_header(path, _read(path)).format == 2
    assert _bodies(tmp_path) == bodies
    more = [_fence(9)]
    _write(tmp_path, more, start=journal_end(str(tmp_path)))  # the new writer: format 3
    assert journal.read_file_header(_last_file(tmp_path), _read(_last_file(tmp_path))).format == 3
    assert _bodies(tmp_path) == bodies + more


def test_format_3_bodies_are_checked_by_crc32c_not_zlibs_crc(tmp_path):
    """A format 3 group whose body CRC is zlib's does not check out: it is a torn tail (the
    scan stops there) and never a group that was written."""
    bodies = [_fence(i) for i in range(3)]
    _write(tmp_path, bodies)
    path = _last_file(tmp_path)
    header = journal.read_file_header(path, _read(path))
    last = list(journal.scan_file(path))[-1]
    assert journal.crc_of([last.body]) != zlib.crc32(last.body)
    with open(path, "r+b") as f:
        f.seek(last.file_offset)
        f.write(journal.pack_group_header(last.start, len(last.body), zlib.crc32(last.body),
                                          header.salt))
    assert _bodies(tmp_path) == bodies[:-1]
