"""The metadata store contract, written once and run against every backend.

``metadata_store`` (tests/conftest.py) is parametrized: the embedded LMDB store, ZooKeeper with
the hierarchical layout and ZooKeeper with the flat layout, each empty and private to the test.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from bookie.metadata import (
    BadVersionError, CookieNotFoundError, CorruptMetadataError, LedgerMetadata, LedgerState,
    MetadataError, NodeExistsError, NoSuchLedgerError, NoSuchNodeError, NoSuchStoreError,
    open_metadata)
from bookie.metadata.errors import NotEmptyError
from bookie.metadata.ledger import key_check_matches, make_key_check
import waiting

ENSEMBLE = ["10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"]


def meta(**changes) -> LedgerMetadata:
    fields = dict(ensemble_size=3, write_quorum=2, ack_quorum=2, digest_type="crc32c",
                  password_digest=b"\x01\x02", custom={"app": "test"},
                  fragments=[(0, list(ENSEMBLE))])
    fields.update(changes)
    return LedgerMetadata(**fields)


def wait_for(predicate, timeout_s: float = 5.0, what: str = "condition"):
    return waiting.wait_for(predicate, timeout_s, what, step_s=0.01)  # watches arrive in ms


class Recorder:
    """Collects callback arguments from the store's delivery thread."""

    def __init__(self):
        self.calls: list[tuple] = []
        self._lock = threading.Lock()

    def __call__(self, *args):
        with self._lock:
            self.calls.append(args)

    def last(self):
        with self._lock:
            return self.calls[-1] if self.calls else None


# -- opening ----------------------------------------------------------------------------------

def _something_is_there(uri: str, request) -> bool:
    """Whether anything at all exists where the URI points (a directory, a ZooKeeper node)."""
    if uri.startswith("lmdb://"):
        return os.path.exists(uri[len("lmdb://"):])
    from kazoo.client import KazooClient
    client = KazooClient(hosts=request.getfixturevalue("zookeeper_server").hosts)
    client.start(timeout=10)
    try:
        return client.exists("/" + uri.split("/", 3)[3]) is not None
    finally:
        client.stop()
        client.close()


def test_a_uri_naming_no_store_is_refused_with_how_to_create_one(uncreated_metadata_uri, request):
    uri = uncreated_metadata_uri
    with pytest.raises(NoSuchStoreError) as refused:
        open_metadata(uri, timeout_s=10.0)
    assert f"bookie shell metaformat --metadata {uri}" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert not _something_is_there(uri, request)  # a typo must not make a new, empty cluster


def test_create_initialises_a_store_once_and_keeps_an_existing_one(uncreated_metadata_uri):
    uri = uncreated_metadata_uri
    with open_metadata(uri, timeout_s=10.0, create=True) as store:
        instance = store.instance_id()
        assert instance and not store.has_data()
        ledger_id, _ = store.create_ledger(meta())
    with open_metadata(uri, timeout_s=10.0, create=True) as store:
        assert store.instance_id() == instance
        assert list(store.list_ledgers()) == [ledger_id]
    with open_metadata(uri, timeout_s=10.0) as store:
        assert store.instance_id() == instance
        assert store.read_ledger(ledger_id)[1] == 0


# -- ledgers ----------------------------------------------------------------------------------

def test_created_ledger_reads_back_with_version_zero(metadata_store):
    original = meta()
    ledger_id, version = metadata_store.create_ledger(original)
    assert ledger_id >= 0 and version == 0
    read, read_version = metadata_store.read_ledger(ledger_id)
    assert read == original and read_version == 0
    assert metadata_store.read_ledger_latest(ledger_id) == (original, 0)


def test_the_key_check_is_kept_and_names_only_its_key(metadata_store):
    key_check = make_key_check(b"k" * 20)
    ledger_id, _ = metadata_store.create_ledger(meta(key_check=key_check))
    read = metadata_store.read_ledger_latest(ledger_id)[0].key_check
    assert read == key_check and key_check_matches(read, b"k" * 20)
    assert not key_check_matches(read, b"j" * 20) and make_key_check(b"k" * 20) != key_check  # salted


def test_ledger_ids_are_unique_and_listed_ascending(metadata_store):
    ids = [metadata_store.create_ledger(meta())[0] for _ in range(5)]
    assert len(set(ids)) == 5
    assert list(metadata_store.list_ledgers()) == sorted(ids)


def test_write_with_current_version_succeeds_and_bumps_it(metadata_store):
    ledger_id, version = metadata_store.create_ledger(meta())
    closed = meta(state=LedgerState.CLOSED, last_entry_id=41, length=4200)
    assert metadata_store.write_ledger(ledger_id, closed, version) == version + 1
    assert metadata_store.read_ledger(ledger_id) == (closed, version + 1)


def test_write_with_stale_version_raises_bad_version_and_changes_nothing(metadata_store):
    ledger_id, version = metadata_store.create_ledger(meta())
    metadata_store.write_ledger(ledger_id, meta(state="IN_RECOVERY"), version)
    with pytest.raises(BadVersionError):
        metadata_store.write_ledger(ledger_id, meta(state="CLOSED"), version)
    assert metadata_store.read_ledger(ledger_id)[0].state is LedgerState.IN_RECOVERY


def test_missing_ledger_raises_no_such_ledger(metadata_store):
    with pytest.raises(NoSuchLedgerError):
        metadata_store.read_ledger(123456)
    with pytest.raises(NoSuchLedgerError):
        metadata_store.read_ledger_latest(123456)
    with pytest.raises(NoSuchLedgerError):
        metadata_store.write_ledger(123456, meta(), 0)
    with pytest.raises(NoSuchLedgerError):
        metadata_store.remove_ledger(123456)


def test_remove_checks_the_version(metadata_store):
    ledger_id, version = metadata_store.create_ledger(meta())
    with pytest.raises(BadVersionError):
        metadata_store.remove_ledger(ledger_id, version + 1)
    metadata_store.remove_ledger(ledger_id, version)
    with pytest.raises(NoSuchLedgerError):
        metadata_store.read_ledger(ledger_id)
    assert list(metadata_store.list_ledgers()) == []
    other, _ = metadata_store.create_ledger(meta())
    metadata_store.remove_ledger(other)  # version None: any
    assert other != ledger_id  # ids are never reused


def test_ledger_ranges_cover_every_ledger_once_in_order(metadata_store):
    ids = [metadata_store.create_ledger(meta())[0] for _ in range(6)]
    metadata_store.remove_ledger(ids[2])
    ranges = list(metadata_store.ledger_ranges())
    flat = [i for chunk in ranges for i in chunk]
    assert flat == sorted(set(ids) - {ids[2]})
    assert all(chunk for chunk in ranges)


def test_corrupt_record_raises_an_error_naming_the_ledger(metadata_store):
    ledger_id, _ = metadata_store.create_ledger(meta())
    metadata_store._write_raw_ledger(ledger_id, b"\x00garbage{")
    with pytest.raises(CorruptMetadataError, match=f"ledger {ledger_id}"):
        metadata_store.read_ledger(ledger_id)
    assert ledger_id in list(metadata_store.list_ledgers())  # the store itself is fine


def test_watch_ledger_reports_changes_then_removal(metadata_store):
    ledger_id, version = metadata_store.create_ledger(meta())
    seen = Recorder()
    cancel = metadata_store.watch_ledger(ledger_id, seen)
    time.sleep(0.1)
    assert seen.calls == []  # the state at registration is not reported
    closed = meta(state="CLOSED", last_entry_id=9, length=90)
    metadata_store.write_ledger(ledger_id, closed, version)
    wait_for(lambda: seen.last() == (closed, version + 1), what="the close")
    metadata_store.remove_ledger(ledger_id)
    wait_for(lambda: seen.last() == (None, -1), what="the removal")
    cancel()


def test_cancelled_watch_gets_nothing(metadata_store):
    ledger_id, version = metadata_store.create_ledger(meta())
    seen = Recorder()
    metadata_store.watch_ledger(ledger_id, seen)()
    metadata_store.write_ledger(ledger_id, meta(state="CLOSED"), version)
    time.sleep(0.3)
    assert seen.calls == []


# -- bookies ----------------------------------------------------------------------------------

def test_registered_bookies_are_listed_by_mode(metadata_store):
    a = metadata_store.register_bookie("127.0.0.1:3182", info={"port": 3182})
    b = metadata_store.register_bookie("127.0.0.1:3181", readonly=True)
    assert metadata_store.list_bookies() == ["127.0.0.1:3182"]
    assert metadata_store.list_bookies(readonly=True) == ["127.0.0.1:3181"]
    assert metadata_store.bookie_info("127.0.0.1:3182") == {"port": 3182}
    assert metadata_store.bookie_info("127.0.0.1:3181") == {}
    assert metadata_store.bookie_info("127.0.0.1:9") is None
    b.set_readonly(False)
    a.set_readonly(True)
    assert metadata_store.list_bookies() == ["127.0.0.1:3181"]
    assert metadata_store.list_bookies(readonly=True) == ["127.0.0.1:3182"]
    a.close()
    b.close()
    assert metadata_store.list_bookies() == metadata_store.list_bookies(readonly=True) == []


def test_registration_vanishes_when_its_store_closes(metadata_uri, metadata_store):
    other = open_metadata(metadata_uri, timeout_s=10.0, lease_ms=1000)
    other.register_bookie("127.0.0.1:4000")
    assert metadata_store.list_bookies() == ["127.0.0.1:4000"]
    other.close()
    assert metadata_store.list_bookies() == []


def test_second_live_registration_of_a_bookie_is_refused(metadata_uri, metadata_store):
    metadata_store.register_bookie("127.0.0.1:4001")
    other = open_metadata(metadata_uri, timeout_s=10.0, lease_ms=1000)
    other.timeout_s = 0.5  # the open gets the ordinary timeout; the refusal need not wait long
    try:
        with pytest.raises(NodeExistsError, match="already registered"):
            other.register_bookie("127.0.0.1:4001")
    finally:
        other.close()


def test_watch_bookies_reports_membership_changes(metadata_store):
    seen = Recorder()
    cancel = metadata_store.watch_bookies(seen)
    registration = metadata_store.register_bookie("127.0.0.1:5000")
    wait_for(lambda: seen.last() == (["127.0.0.1:5000"], []), what="the registration")
    registration.set_readonly(True)
    wait_for(lambda: seen.last() == ([], ["127.0.0.1:5000"]), what="read-only mode")
    registration.close()
    wait_for(lambda: seen.last() == ([], []), what="the unregistration")
    cancel()


# -- cookies ----------------------------------------------------------------------------------

def test_cookie_lifecycle(metadata_store):
    bookie = "127.0.0.1:3181"
    with pytest.raises(CookieNotFoundError):
        metadata_store.read_cookie(bookie)
    assert metadata_store.write_cookie(bookie, b"v1") == 0
    with pytest.raises(NodeExistsError):
        metadata_store.write_cookie(bookie, b"again")
    assert metadata_store.read_cookie(bookie) == (b"v1", 0)
    with pytest.raises(BadVersionError):
        metadata_store.write_cookie(bookie, b"v2", version=5)
    assert metadata_store.write_cookie(bookie, b"v2", version=0) == 1
    metadata_store.remove_cookie(bookie, version=1)
    with pytest.raises(CookieNotFoundError):
        metadata_store.remove_cookie(bookie)


# -- generic primitives -----------------------------------------------------------------------

def test_nodes_support_cas_and_children(metadata_store):
    assert metadata_store.create("/underreplication/ledgers/00/L1", b"x") == \
        "/underreplication/ledgers/00/L1"
    assert metadata_store.children("/underreplication/ledgers") == ["00"]
    assert metadata_store.get("/underreplication/ledgers/00") == (b"", 0)
    with pytest.raises(NodeExistsError):
        metadata_store.create("/underreplication/ledgers/00/L1")
    assert metadata_store.set("/underreplication/ledgers/00/L1", b"y", 0) == 1
    with pytest.raises(BadVersionError):
        metadata_store.set("/underreplication/ledgers/00/L1", b"z", 0)
    assert metadata_store.exists("/underreplication/ledgers/00/L1") == 1
    with pytest.raises(NotEmptyError):
        metadata_store.delete("/underreplication/ledgers/00")
    with pytest.raises(BadVersionError):
        metadata_store.delete("/underreplication/ledgers/00/L1", version=0)
    metadata_store.delete("/underreplication/ledgers/00/L1", version=1)
    assert metadata_store.exists("/underreplication/ledgers/00/L1") is None
    with pytest.raises(NoSuchNodeError):
        metadata_store.get("/underreplication/ledgers/00/L1")
    with pytest.raises(NoSuchNodeError):
        metadata_store.children("/nowhere")


def test_sequential_nodes_ascend_and_ephemeral_nodes_end_with_the_session(
        metadata_uri, metadata_store):
    other = open_metadata(metadata_uri, timeout_s=10.0, lease_ms=1000)
    first = other.create("/election/candidate-", b"a", ephemeral=True, sequential=True)
    second = other.create("/election/candidate-", b"b", ephemeral=True, sequential=True)
    assert first < second and first.startswith("/election/candidate-")
    assert metadata_store.children("/election") == [first.rsplit("/", 1)[1],
                                                    second.rsplit("/", 1)[1]]
    with pytest.raises(MetadataError):
        other.create(first + "/child")
    other.close()
    assert metadata_store.children("/election") == []


def test_watch_children_and_node(metadata_store):
    kids, node = Recorder(), Recorder()
    cancel_kids = metadata_store.watch_children("/locks", kids)
    cancel_node = metadata_store.watch_node("/locks/a", node)
    metadata_store.create("/locks/a", b"1")
    wait_for(lambda: kids.last() == (["a"],), what="child a")
    wait_for(lambda: node.last() == (b"1", 0), what="node a created")
    metadata_store.set("/locks/a", b"2", 0)
    wait_for(lambda: node.last() == (b"2", 1), what="node a changed")
    metadata_store.delete("/locks/a")
    wait_for(lambda: kids.last() == ([],), what="no children")
    wait_for(lambda: node.last() == (None, -1), what="node a deleted")
    cancel_kids()
    cancel_node()


# -- format -----------------------------------------------------------------------------------

def test_format_refuses_existing_data_unless_forced(metadata_store):
    metadata_store.format()
    assert metadata_store.instance_id()
    assert metadata_store.list_bookies() == []
    metadata_store.format()  # an empty, formatted store may be formatted again
    ledger_id, _ = metadata_store.create_ledger(meta())
    metadata_store.write_cookie("127.0.0.1:3181", b"c")
    with pytest.raises(NodeExistsError):
        metadata_store.format()
    assert metadata_store.read_ledger(ledger_id)[1] == 0
    metadata_store.format(force=True)
    assert list(metadata_store.list_ledgers()) == []
    with pytest.raises(CookieNotFoundError):
        metadata_store.read_cookie("127.0.0.1:3181")
    assert metadata_store.create_ledger(meta())[1] == 0  # usable after the wipe


def test_the_ledger_id_high_water_mark_bounds_every_id_handed_out_and_none_to_come(metadata_store):
    # The GC's rule (bookie.core.gc_policy): an id above a mark read earlier was never
    # handed out; an id handed out is at or below every mark read after its create.
    marks = [metadata_store.ledger_id_high_water()]
    ids = []
    for _ in range(4):
        ledger_id = metadata_store.create_ledger(meta())[0]
        assert ledger_id > marks[-1], "an id at or below an earlier mark was handed out"
        ids.append(ledger_id)
        marks.append(metadata_store.ledger_id_high_water())
        assert ledger_id <= marks[-1], "an id handed out is above the mark read after it"
    metadata_store.remove_ledger(ids[0])
    assert metadata_store.ledger_id_high_water() >= max(ids)  # a removal never lowers it
    assert marks == sorted(marks)
