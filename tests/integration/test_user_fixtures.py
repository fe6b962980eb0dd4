"""The fixtures a user's suite gets from the installed plugin, used without any import.

The first test uses the plugin in this suite directly; the others run small user suites in a
subprocess (pytester), as a user's ``pytest`` would run them.
"""

import os
import re

import pytest

pytest_plugins = ["pytester"]

BOOKKEEPER_OPTIONS = {"bookies": 3}
README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
SUBPROCESS_TIMEOUT_S = 240


def test_the_plugin_hands_out_a_connected_client(bookkeeper, bookkeeper_ensemble):
    assert len(bookkeeper_ensemble.bookies) == 3
    lh = bookkeeper.create_ledger(ensemble_size=3, write_quorum=2, ack_quorum=2,
                                  digest="crc32c", password=b"pw")
    assert [lh.add_entry(b"e%d" % i) for i in range(3)] == [0, 1, 2]
    lh.close()
    rh = bookkeeper.open_ledger(lh.ledger_id, digest="crc32c", password=b"pw")
    assert [e.data for e in rh.read_entries(0, rh.last_add_confirmed)] == [b"e0", b"e1", b"e2"]


def _run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "addopts=", *args,
                                         timeout=SUBPROCESS_TIMEOUT_S)


def _readme_example() -> str:
    with open(README, encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"```python\n(# test_mylog\.py\n.*?)```", text, re.S)
    assert len(blocks) == 1, "README.md has no '# test_mylog.py' example block"
    return blocks[0]


@pytest.mark.parametrize("rounds", [2, pytest.param(10, marks=pytest.mark.soak)])
def test_the_readme_example_passes_rounds_in_a_row(pytester, rounds):
    # Each round runs both of the README's tests against the same module's bookies: the crash
    # test kills a bookie of the ledger's ensemble, the next round must find them all back.
    # Two rounds in the default suite (the second finds the bookie the first's crash test
    # killed back; a third only repeated that, about 4 s); ten in a row under -m soak.
    pytester.makepyfile(test_mylog=_readme_example())
    pytester.makeconftest(f"""
        def pytest_generate_tests(metafunc):
            metafunc.fixturenames.append("readme_round")
            metafunc.parametrize("readme_round", range({rounds}))
    """)
    result = _run(pytester, "-q")
    result.assert_outcomes(passed=2 * rounds)


def test_a_marker_on_a_test_function_gets_the_bookies_it_asks_for(pytester):
    pytester.makepyfile(test_marked="""
        import pytest

        BOOKKEEPER_OPTIONS = {"bookies": 2}

        def test_module_default(bookkeeper_ensemble):
            assert bookkeeper_ensemble.n == 2

        @pytest.mark.bookkeeper(bookies=3, bookie_config={"nettyMaxFrameSizeBytes": 4096},
                                client_config={"addEntryTimeout": 1.5})
        def test_marked(bookkeeper, bookkeeper_ensemble):
            assert bookkeeper_ensemble.n == 3
            assert bookkeeper.config.addEntryTimeout == 1.5
            lh = bookkeeper.create_ledger(3, 3, 3, password=b"pw")
            assert lh.add_entry(b"x" * 1000) == 0
            with pytest.raises(Exception):   # the bookies refuse entries over 4096 bytes
                lh.add_entry(b"x" * 8192)

        def test_module_default_again(bookkeeper_ensemble):
            assert bookkeeper_ensemble.n == 2
    """)
    result = _run(pytester, "-q")
    result.assert_outcomes(passed=3)


def test_module_markers_and_bookie_config_apply_to_the_shared_bookies(pytester):
    pytester.makepyfile(test_module_marker="""
        import pytest

        pytestmark = pytest.mark.bookkeeper(bookies=1,
                                            bookie_config={"nettyMaxFrameSizeBytes": 4096})

        def test_small_entries_only(bookkeeper, bookkeeper_ensemble):
            assert bookkeeper_ensemble.n == 1
            lh = bookkeeper.create_ledger(1, 1, 1, password=b"pw")
            with pytest.raises(Exception):
                lh.add_entry(b"x" * 8192)

        def test_same_bookies(bookkeeper_ensemble, bookkeeper_module_ensemble):
            assert bookkeeper_ensemble is bookkeeper_module_ensemble
    """)
    result = _run(pytester, "-q")
    result.assert_outcomes(passed=2)


# Each bad option in a module of its own, all run by one pytest (each run costs seconds).
BAD_OPTIONS = {
    "test_unknown_option": (
        'BOOKKEEPER_OPTIONS = {"bookie": 4}',
        "BOOKKEEPER_OPTIONS of test_unknown_option.py: unknown option 'bookie' "
        "(did you mean 'bookies'?)"),
    "test_no_bookies": (
        'BOOKKEEPER_OPTIONS = {"bookies": 0}',
        "BOOKKEEPER_OPTIONS of test_no_bookies.py: bookies must be an integer >= 1, got 0"),
    "test_unknown_bookie_key": (
        'BOOKKEEPER_OPTIONS = {"bookie_config": {"journalDir": "/x"}}',
        "bookie_config: unknown bookie configuration key 'journalDir' "
        "(did you mean 'journalDirectory'?)"),
    "test_harness_key": (
        'BOOKKEEPER_OPTIONS = {"bookie_config": {"bookiePort": 4000}}',
        "bookie_config: bookiePort is set by the harness for each bookie"),
    "test_bad_bookie_value": (
        'BOOKKEEPER_OPTIONS = {"bookie_config": {"flushInterval": "soon"}}',
        "bookie_config: flushInterval: 'soon' is not an integer"),
    "test_unknown_client_key": (
        'BOOKKEEPER_OPTIONS = {"client_config": {"addTimeout": 1}}',
        "client_config: unknown client configuration key 'addTimeout'"),
    "test_positional_marker": (
        "pytestmark = pytest.mark.bookkeeper(4)",
        "pytest.mark.bookkeeper on test_positional_marker.py: takes keyword options only"),
    "test_function_marker": (
        "",
        "pytest.mark.bookkeeper on test_uses_bookies: unknown option 'bookie' "
        "(did you mean 'bookies'?)"),
}


def test_options_the_fixtures_cannot_honour_fail_in_one_line(pytester):
    for module, (module_text, _) in BAD_OPTIONS.items():
        marker = "@pytest.mark.bookkeeper(bookie=2)" if module == "test_function_marker" else ""
        pytester.makepyfile(**{module: f"""
            import pytest

            {module_text}

            {marker}
            def test_uses_bookies(bookkeeper):
                pass
        """})
    result = _run(pytester, "-q", "-rE")
    result.assert_outcomes(errors=len(BAD_OPTIONS))
    out = result.stdout.str()
    for module, (_, words) in BAD_OPTIONS.items():
        assert words in out, module
    # One line each, no traceback into the fixtures; no bookie was started for any of them.
    assert "Traceback" not in out and "client_fixtures.py" not in out
    assert "localbookie-" not in out


def test_each_test_starts_with_every_bookie_running_and_writable(pytester):
    pytester.makepyfile(test_order="""
        from bookie.metadata import open_metadata

        BOOKKEEPER_OPTIONS = {"bookies": 3}

        def test_breaks_the_bookies(bookkeeper_ensemble):
            bookkeeper_ensemble.kill(0)
            bookkeeper_ensemble.stop(1)
            bookkeeper_ensemble.set_readonly(2, True)

        def test_finds_them_whole(bookkeeper, bookkeeper_ensemble):
            assert all(bookkeeper_ensemble.running(i) for i in range(3))
            with open_metadata(bookkeeper_ensemble.metadata_uri) as store:
                assert sorted(store.list_bookies()) == sorted(bookkeeper_ensemble.bookies)
                assert store.list_bookies(readonly=True) == []
            lh = bookkeeper.create_ledger(3, 3, 3, password=b"pw")
            assert lh.add_entry(b"all three") == 0
    """)
    result = _run(pytester, "-q")
    result.assert_outcomes(passed=2)


def test_a_failing_test_reports_the_bookie_log_tails(pytester):
    pytester.makepyfile(test_fails="""
        BOOKKEEPER_OPTIONS = {"bookies": 1}

        def test_fails(bookkeeper_ensemble):
            assert False, "on purpose"
    """)
    result = _run(pytester, "-q")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*bookie logs*", "--- bookie 0 (127.0.0.1:*) ---",
                                 "*supervisor: bookie serving*"])


# -- the option rules alone (pure: no bookies) -------------------------------------------------

def test_later_option_layers_win_and_dicts_merge_key_by_key():
    from bookie.testing.client_fixtures import TEST_CONFIG, ensemble_options, merge_options

    opts = merge_options([
        ("module", {"bookies": 4, "bookie_config": {"flushInterval": 50, "gcWaitTime": 1000},
                    "config": {"readTimeout": 1}}),
        ("function", {"bookie_config": {"gcWaitTime": 2000}}),
    ])
    assert opts["bookies"] == 4
    assert opts["bookie_config"] == {"flushInterval": 50, "gcWaitTime": 2000}
    assert opts["client_config"] == {**TEST_CONFIG, "readTimeout": 1}
    # Client settings alone never call for other bookies; bookie settings do.
    same = merge_options([("m", {"bookies": 4, "bookie_config": {"flushInterval": 50,
                                                                  "gcWaitTime": 2000}})])
    assert ensemble_options(opts) == ensemble_options(same)
    assert ensemble_options(opts) != ensemble_options(merge_options([("m", {"bookies": 4})]))


@pytest.mark.parametrize("layer, words", [
    ({"config": {}, "client_config": {}}, "give client_config or config, not both"),
    ({"bookies": True}, "bookies must be an integer >= 1, got True"),
    ({"bookie_config": ["flushInterval"]}, "bookie_config must be a dict"),
    ({"bookie_config": {"zkServers": "zk1:2181"}}, "zkServers is set by the harness"),
])
def test_options_that_cannot_be_honoured_are_named(layer, words):
    from bookie.testing.client_fixtures import FixtureOptionError, merge_options

    with pytest.raises(FixtureOptionError) as e:
        merge_options([("where", layer)])
    assert str(e.value).startswith("where: ") and words in str(e.value)
