"""core/named.py: a normal add or a fence is served only for a ledger whose metadata names the
bookie, refused only on metadata read for the request; recovery adds always pass."""

import itertools

from bookie.core.named import Verdict, names, verdict
from bookie.wire import Flag, Op

FRAGMENTS = [(0, ["bk-0", "bk-1"]), (10, ["bk-0", "bk-2"])]


def test_names_looks_in_every_fragment():
    assert names(FRAGMENTS, "bk-1") and names(FRAGMENTS, "bk-2")
    assert names(FRAGMENTS, "bk-3") is False
    assert names(None, "bk-3") is None


def test_every_request_against_an_oracle():
    ops = [Op.ADD, Op.READ, Op.READ_LAC, Op.WRITE_LAC, Op.INFO]
    flag_sets = [0, Flag.RECOVERY_ADD, Flag.FENCE, Flag.FENCE | Flag.RECOVERY_CREDENTIAL,
                 Flag.RECOVERY_ADD | Flag.RECOVERY_CREDENTIAL, Flag.LONG_POLL]
    for op, flags, named, fresh in itertools.product(ops, flag_sets, (True, False, None),
                                                     (True, False)):
        normal_add = op == Op.ADD and not flags & Flag.RECOVERY_ADD
        fence = op in (Op.READ, Op.READ_LAC) and bool(flags & Flag.FENCE)
        if (normal_add or fence) and named is False:
            want = Verdict.REFUSE if fresh else Verdict.REREAD
        else:
            want = Verdict.ALLOW
        assert verdict(op, flags, named, fresh) is want, (op, flags, named, fresh)
