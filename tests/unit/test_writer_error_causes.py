"""The writer's errors name the cause a bookie's answer points to: a bookie that answered
read-only is named read-only with no CURVE hint; only a bookie that never answered may be a CURVE
bookie that does not admit this client, and then that hint comes before "start more bookies";
a client without a CURVE key of its own is told to set curveSecretKeyFile instead of starting
bookies (issue 39 item 9);
an UNAUTHORIZED answer to a client without a CURVE key is a password matter, not a role one."""

from __future__ import annotations

import random

from bookie.client.errors import NotEnoughBookiesError, UnauthorizedError
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.writer import LedgerWriter
from bookie.client.digest import DigestManager
from bookie.wire import Status

from test_protocol_model import LEDGER, SimCluster


class AnsweringCluster(SimCluster):
    """A SimCluster whose bookies in ``status`` answer every add with that status; a silent one
    (TIMEOUT) is still registered as writable unless ``registered`` is false (it is down)."""

    def __init__(self, *args, status: dict[str, int], registered: bool = True):
        super().__init__(*args)
        self.status, self.registered = status, registered

    def answer(self, a):
        if isinstance(a, A.SendAdd) and a.bookie in self.status:
            return A.AddResponse(a, self.status[a.bookie])
        if isinstance(a, A.ListBookies):
            return A.BookiesListed([n for n in self.bookies if n not in self.status or (
                self.registered and self.status[n] == A.TIMEOUT)])
        return super().answer(a)


def _fail_with(status: int, curve: bool = True, registered: bool = True) -> Exception:
    rng = random.Random(7)
    names = ["b0:3181", "b1:3181"]
    info = LedgerInfo(LEDGER, 2, 2, 2, fragments=((0, tuple(names)),))
    cluster = AnsweringCluster(names, info, rng, status={"b1:3181": status},
                               registered=registered)
    digest = DigestManager(LEDGER, "crc32c", b"pw")
    writer = LedgerWriter(info, 0, digest.encode, rng=rng, curve=curve)
    cluster.run(writer, writer.add([b"x"])[1])
    cluster.deliver_until(lambda: False)
    fails = [a for a in cluster.outputs[writer] if isinstance(a, A.FailAdds)]
    assert fails, cluster.outputs[writer]
    return fails[0].error


def test_a_read_only_bookie_is_named_read_only_without_a_curve_hint():
    error = _fail_with(Status.READ_ONLY)
    assert isinstance(error, NotEnoughBookiesError)
    message = str(error)
    assert "b1:3181 refused adds: read-only" in message, message
    assert "CURVE" not in message and "start more bookies" in message, message


def test_a_silent_bookie_gets_the_curve_hint_before_start_more_bookies():
    message = str(_fail_with(A.TIMEOUT))
    assert "b1:3181 did not answer" in message, message
    assert message.index("curveSecretKeyFile") < message.index("start more bookies"), message


def test_unauthorized_for_a_client_without_a_curve_key_names_the_password_only():
    message = str(_fail_with(Status.UNAUTHORIZED, curve=False))
    assert "CURVE" not in message and "another password" in message, message
    assert isinstance(_fail_with(Status.UNAUTHORIZED, curve=False), UnauthorizedError)
    assert "CURVE" in str(_fail_with(Status.UNAUTHORIZED, curve=True))


def test_a_client_without_a_curve_key_is_told_to_set_one_not_to_start_bookies():
    message = str(_fail_with(A.TIMEOUT, curve=False))
    assert "b1:3181 did not answer" in message, message
    assert "CURVE" in message and "curveSecretKeyFile" in message, message
    assert "start more bookies" not in message, message


class StopsAnsweringCluster(SimCluster):
    """A SimCluster whose bookie ``silent`` acknowledges its first ``after`` adds, then never
    answers again (a journal disk with no room holds adds unanswered)."""

    def __init__(self, *args, silent: str, after: int):
        super().__init__(*args)
        self.silent, self.after = silent, after

    def answer(self, a):
        if isinstance(a, A.SendAdd) and a.bookie == self.silent:
            if self.after <= 0:
                return A.AddResponse(a, A.TIMEOUT)
            self.after -= 1
        if isinstance(a, A.ListBookies):
            return A.BookiesListed([n for n in self.bookies if n != self.silent])
        return super().answer(a)


def test_a_bookie_that_acknowledged_adds_then_went_silent_is_not_blamed_on_keys():
    """A full journal disk (issue 44): the bookie acknowledged this writer's adds, so it admits
    the client; the error says it stopped answering and names no CURVE key, with or without one."""
    for curve in (True, False):
        rng = random.Random(7)
        names = ["b0:3181", "b1:3181"]
        info = LedgerInfo(LEDGER, 2, 2, 2, fragments=((0, tuple(names)),))
        cluster = StopsAnsweringCluster(names, info, rng, silent="b1:3181", after=1)
        writer = LedgerWriter(info, 0, DigestManager(LEDGER, "crc32c", b"pw").encode, rng=rng,
                              curve=curve)
        cluster.run(writer, writer.add([b"x"])[1])
        cluster.deliver_until(lambda: False)
        cluster.run(writer, writer.add([b"y"])[1])
        cluster.deliver_until(lambda: False)
        fails = [a for a in cluster.outputs[writer] if isinstance(a, A.FailAdds)]
        assert fails, cluster.outputs[writer]
        message = str(fails[0].error)
        assert "b1:3181 stopped answering after acknowledging adds" in message, message
        assert "CURVE" not in message and "curveSecretKeyFile" not in message, message
        assert "start more bookies" in message, message


def test_a_silent_bookie_that_is_not_registered_is_down_not_a_key_matter():
    """A bookie lost or stopped (no registration) that never answered: the error says it is not
    registered, with or without a CURVE key of the client's, and gives no key hint."""
    for curve in (True, False):
        message = str(_fail_with(A.TIMEOUT, curve=curve, registered=False))
        assert "b1:3181 did not answer and is not registered as writable" in message, message
        assert "CURVE" not in message and "curveSecretKeyFile" not in message, message
        assert "start more bookies" in message, message
