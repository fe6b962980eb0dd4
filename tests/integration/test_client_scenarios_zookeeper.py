"""The failure scenarios of test_client_ledgers.py again, with ZooKeeper as the metadata store:
the same tests, run against 5 real bookies registered in a real ZooKeeper server (fresh root).
Registrations there are ephemeral nodes, so a killed bookie leaves when its session expires."""

import pytest

from bookie.client import BookKeeper
from bookie.testing import LocalBookies
from bookie.testing.client_fixtures import TEST_CONFIG
from test_client_ledgers import (  # noqa: F401  (collected here with this module's fixtures)
    test_bookie_killed_mid_write_changes_ensemble_and_loses_nothing,
    test_read_only_bookies_are_not_chosen_for_new_ledgers,
    test_reads_work_with_ack_quorum_minus_one_bookies_down,
    test_two_concurrent_recoveries_converge,
    test_writer_in_another_process_is_fenced_by_recovery,
    test_writer_killed_mid_write_every_acknowledged_entry_survives_recovery,
    test_wrong_password_fails_without_fencing_and_wrong_digest_is_named,
)


@pytest.fixture(scope="module")
def bookkeeper_ensemble(zookeeper_server):
    uri = zookeeper_server.uri(zookeeper_server.chroot("/scenarios"))
    # A short ZooKeeper session: a killed bookie's registration goes within ~2 s.
    with LocalBookies(5, metadata_uri=uri, conf={"zkTimeout": 2000}) as ens:
        yield ens


@pytest.fixture(scope="module")
def bookkeeper(bookkeeper_ensemble):
    with BookKeeper(bookkeeper_ensemble.metadata_uri, TEST_CONFIG) as bk:
        yield bk


def test_this_module_runs_on_zookeeper(bookkeeper_ensemble, bookkeeper):
    assert bookkeeper_ensemble.metadata_uri.startswith("zk://")
    assert sorted(bookkeeper.metadata_store.list_bookies()) == sorted(bookkeeper_ensemble.bookies)
