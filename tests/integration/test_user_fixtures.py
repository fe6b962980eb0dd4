"""The fixtures a user's suite gets from the installed plugin, used without any import."""

BOOKKEEPER_OPTIONS = {"bookies": 3}


def test_the_plugin_hands_out_a_connected_client(bookkeeper, bookkeeper_ensemble):
    assert len(bookkeeper_ensemble.bookies) == 3
    lh = bookkeeper.create_ledger(ensemble_size=3, write_quorum=2, ack_quorum=2,
                                  digest="crc32c", password=b"pw")
    assert [lh.add_entry(b"e%d" % i) for i in range(3)] == [0, 1, 2]
    lh.close()
    rh = bookkeeper.open_ledger(lh.ledger_id, digest="crc32c", password=b"pw")
    assert [e.data for e in rh.read_entries(0, rh.last_add_confirmed)] == [b"e0", b"e1", b"e2"]
