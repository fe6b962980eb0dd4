"""The HTTP servers' admission rules (appliance/admin/http_guard.py), without sockets."""

import pytest

from bookie.appliance.admin.http_guard import (ConnectionPlaces, RequestDeadline, allowed_host_names,
                                         host_name, host_refusal)


def test_host_names_lose_port_and_brackets():
    assert host_name("LocalHost:8080") == "localhost"
    assert host_name("[::1]:80") == "::1"
    assert host_name("::1") == "::1"
    assert host_name("bookie-1") == "bookie-1"


@pytest.mark.parametrize("value", ["[::1]anything", "[::1]evil.example", "[::1]:8x", "[::1",
                                   "[::1]:", "[]"])
def test_a_bracketed_host_followed_by_anything_but_a_port_is_no_loopback_name(value):
    assert host_name(value) != "::1"
    assert host_refusal([value], allowed_host_names()) is not None


def test_only_the_bookies_names_are_served_unless_star():
    allowed = allowed_host_names("0.0.0.0", "10.0.0.5", "", "bk1", extra=["bk1.example"])
    assert host_refusal(["10.0.0.5:8080"], allowed) is None
    assert host_refusal(["BK1.example"], allowed) is None
    assert host_refusal([], allowed) is None
    assert "httpServerAllowedHosts" in host_refusal(["evil.example:8080"], allowed)
    assert host_refusal(["0.0.0.0"], allowed) is not None
    assert host_refusal(["localhost", "localhost"], allowed) is not None
    assert host_refusal(["evil.example"], allowed_host_names(extra=["*"])) is None


def test_a_new_connection_evicts_the_oldest_still_waiting_for_its_request():
    places = ConnectionPlaces(max_total=3, max_per_peer=2)
    assert places.admit("a1", "A", 0).evict == ()
    assert places.admit("a2", "A", 1).evict == ()
    assert places.admit("a3", "A", 2).evict == ("a1",)  # the address's cap
    places.serving("a2")
    assert places.admit("a4", "A", 3).evict == ("a3",)  # a2 is serving: never evicted
    assert places.admit("b1", "B", 4).evict == ()
    assert places.admit("c1", "C", 5).evict == ("a4",)  # the total's cap: the oldest waiting
    places.serving("b1")
    places.serving("c1")
    assert not places.admit("d1", "D", 6).admitted  # all serving: refused
    assert places.refused_total == 1 and places.evicted_total == 3
    places.waiting("b1", 7)  # keep-alive, waiting again
    assert places.admit("d1", "D", 8).evict == ("b1",)


def test_the_deadline_bounds_the_whole_request_not_each_read():
    d = RequestDeadline(request_timeout_s=3.0, idle_timeout_s=10.0)
    assert d.read_timeout_s(0.0) == 10.0
    d.start(100.0)
    assert d.read_timeout_s(101.0) == pytest.approx(2.0)
    with pytest.raises(TimeoutError):
        d.read_timeout_s(103.0)
    d.done()
    assert d.read_timeout_s(200.0) == 10.0
