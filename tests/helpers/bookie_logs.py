"""What a failing integration test shows of its bookies, and what it reads of their metrics,
written once."""

from __future__ import annotations

import contextlib
import urllib.request


@contextlib.contextmanager
def dumped(bookies):
    """``bookies`` (a ``LocalBookies``) started; on a failure, every bookie's log tail printed
    before they stop."""
    with bookies as lb:
        try:
            yield lb
        except BaseException:
            for i in range(lb.n):
                print(f"--- bookie {i} ({lb.bookies[i]}) log tail ---\n{lb.log(i)[-4000:]}")
            raise


def metric(lb, i: int, name: str) -> float:
    """Bookie ``i``'s metric ``name`` from its /metrics (``admin_http=True``); 0 when absent."""
    with urllib.request.urlopen(f"{lb.admin_url(i)}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0
