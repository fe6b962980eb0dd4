"""Helpers shared by the client's recovery scenario tests."""

from __future__ import annotations

import threading

from bookie.client import BookKeeper


def recover_concurrently(metadata_uri: str, ledger_id: int, password: bytes, config=None,
                         n: int = 2, timeout_s: float = 90.0) -> list[tuple]:
    """``n`` clients open (and so recover) the ledger at the same time.

    Returns:
        one (last_add_confirmed, metadata, [entry data]) per client.
    Raises:
        AssertionError: a client failed or did not finish within ``timeout_s``.
    """
    results, errors = [], []

    def recover():
        try:
            with BookKeeper(metadata_uri, config) as bk:
                rh = bk.open_ledger(ledger_id, password=password)
                results.append((rh.last_add_confirmed, rh.metadata,
                                [e.data for e in rh.read_entries(0, rh.last_add_confirmed)]))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=recover) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not errors, errors
    assert len(results) == n, f"{n - len(results)} recoveries did not finish in {timeout_s} s"
    return results
