"""The sink's driver-side commit over a fake client: what it reads from the metadata store.

A batch write without a sinkId tags its ledgers with a sink id made for it alone, so its commit
needs neither the tail scan (``batch_in_log``: one metadata read per ledger of the log's tail)
nor, while the write is younger than the sweep's grace period, the sweep (``find_ledgers``: one
read per ledger in the cluster).  Both were paid by every ``save()``; both are skipped only
where they could find nothing.  (No Spark, no bookie.)"""

from __future__ import annotations

import dataclasses
import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from bookie.client import BadVersionError  # noqa: E402
from bookie.spark import sink  # noqa: E402
from bookie.spark.options import SinkOptions  # noqa: E402


@dataclasses.dataclass
class Meta:
    custom: dict
    ctime_ms: float
    state: str = "CLOSED"


class FakeClient:
    """The calls commit_batch and sweep make, over an in-memory log and ledger table; counts
    the metadata reads and the full scans."""

    def __init__(self, foreign_ledgers: int):
        old = (time.time() - 3600) * 1000
        self.meta = {lid: Meta({"owner": "someone else"}, old) for lid in range(foreign_ledgers)}
        self.log = list(self.meta)
        self.version = 0
        self.reads = self.scans = 0
        self.deleted: list[int] = []

    def create_log(self, name):
        return False

    def log_ledgers(self, name):
        return list(self.log), self.version

    def link_ledgers(self, name, ledger_ids, version):
        if version != self.version:
            raise BadVersionError("moved")
        self.log += list(ledger_ids)
        self.version += 1
        return self.version

    def ledger_metadata(self, lid):
        self.reads += 1
        return self.meta[lid]

    def find_ledgers(self, custom):
        self.scans += 1
        self.reads += len(self.meta)
        return sorted(lid for lid, m in self.meta.items()
                      if all(m.custom.get(k) == v for k, v in custom.items()))

    def delete_ledger(self, lid):
        self.deleted.append(lid)
        del self.meta[lid]

    def attempt(self, writer, partition, attempt=0, created_s=None):
        """A task attempt's ledger, tagged as write_task tags it; its commit message."""
        lid = max(self.meta, default=-1) + 1
        created_ms = (time.time() if created_s is None else created_s) * 1000
        self.meta[lid] = Meta({sink.TAG_SINK: writer.sink_id, sink.TAG_BATCH: str(writer.so.batch_id),
                               sink.TAG_LOG: writer.so.log}, created_ms)
        return sink.SinkMessage(writer.sink_id, writer.so.batch_id, partition, attempt, lid, 10)


@pytest.fixture
def client(monkeypatch):
    bk = FakeClient(foreign_ledgers=500)
    monkeypatch.setattr(sink, "client_for", lambda conn: bk)
    return bk


def writer(**options):
    return sink.BookieBatchWriter(SinkOptions.parse(
        {"metadataServiceUri": "lmdb:///tmp/m", "log": "out", **options}))


def test_a_batch_write_without_sink_id_commits_without_scanning_the_store(client):
    w = writer()
    messages = [client.attempt(w, p) for p in range(4)]
    w.commit(messages)
    assert client.log[-4:] == [m.ledger_id for m in messages]
    assert client.scans == 0
    # one read: is the log's last ledger closed (_close_tail); was 1 + 500 (the tail scan)
    # + 504 (every ledger, for the sweep)
    assert client.reads == 1


def test_a_batch_write_without_sink_id_sweeps_once_it_is_older_than_the_grace(client):
    w = writer(sweepGraceMs=1000)
    w.started_s -= 2  # the job has run for two seconds
    killed = client.attempt(w, 1, created_s=time.time() - 1.5)  # never reported its ledger
    messages = [client.attempt(w, p, attempt=1 if p == 1 else 0) for p in range(4)]
    w.commit(messages)
    assert client.scans == 1
    assert client.deleted == [killed.ledger_id]
    assert client.log[-4:] == [m.ledger_id for m in messages]


def test_a_replayed_commit_of_a_batch_without_sink_id_links_nothing(client):
    w = writer()
    messages = [client.attempt(w, p) for p in range(2)]
    w.commit(messages)
    linked = list(client.log)
    extra = client.attempt(w, 0, attempt=1)
    assert sink.commit_batch(w.so, w.sink_id, 0, messages[1:] + [extra],
                             own_sink_id=True) == []
    assert client.log == linked and client.deleted == [extra.ledger_id]


def test_a_write_with_a_sink_id_still_scans_the_tail_and_sweeps(client):
    w = writer(sinkId="nightly", batchId="3")
    messages = [client.attempt(w, p) for p in range(2)]
    w.commit(messages)
    assert client.scans == 1 and client.reads >= 500  # earlier jobs' ledgers may be anywhere
    again = [client.attempt(w, p) for p in range(2)]
    w.commit(again)  # the same batch id again: in the log already, nothing linked
    assert client.log[-2:] == [m.ledger_id for m in messages]
    assert sorted(client.deleted) == sorted(m.ledger_id for m in again)


def test_a_retried_partition_of_a_batch_without_sink_id_leaves_no_ledger_behind(client):
    """An attempt whose worker died mid-write never reports (nor deletes) its ledger.  No later
    commit sweeps a sink id made for one write, so this commit must: it sees the retry (a
    message of attempt 1) and sweeps with no grace - every attempt of the write has ended."""
    w = writer()  # default sweepGraceMs: ten minutes, and the write took seconds
    killed = client.attempt(w, 1, attempt=0)  # its worker died: no message, no delete
    messages = [client.attempt(w, p, attempt=1 if p == 1 else 0) for p in range(4)]
    w.commit(messages)
    assert client.deleted == [killed.ledger_id]
    assert client.log[-4:] == [m.ledger_id for m in messages]
