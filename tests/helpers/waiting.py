"""Waiting for a condition in a test, written once.

``poll`` answers whether the condition came true in time (for ``assert poll(...)`` with a
message of the test's own); ``wait_for`` returns the condition's first true value or fails the
test naming what it waited for."""

from __future__ import annotations

import time
from typing import Any, Callable


def poll(pred: Callable[[], Any], timeout_s: float, step_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step_s)
    return False


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str = "condition",
             step_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(step_s)
