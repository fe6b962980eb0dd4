"""What a bookie's processes import to start: every bookie start runs five interpreters (the
supervisor, ``bookie run``, and four workers), and a test suite starts hundreds of bookies
(docs/architecture.md, "How long a start takes")."""

from __future__ import annotations

import os
import subprocess
import sys

from bookie.appliance import cli, console

COMMANDS = {"run", "localbookie", "shell", "autorecovery", "bench", "version"}


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(*sys.modules)"],
                         capture_output=True, text=True, timeout=60, check=True)
    return set(out.stdout.split())


def test_bookie_run_imports_neither_the_shell_nor_the_client_nor_the_benchmarks():
    mods = modules_after("from bookie.appliance import cli\ncli.build_parser(['run'])")
    assert "bookie.appliance.run_cmd" in mods
    assert not {m for m in mods if m.startswith((
        "bookie.client", "bookie.bench", "bookie.testing", "bookie.spark", "bookie.appliance.shell"))}


def test_the_parser_without_a_command_still_has_every_command_and_run_parses_the_same():
    def commands(parser):
        return set(parser._subparsers._group_actions[0].choices)  # noqa: SLF001 - argparse has no public list

    assert commands(cli.build_parser()) == COMMANDS
    assert commands(cli.build_parser(["shell"])) == {"shell"}
    argv = ["run", "--set", "bookiePort=3181", "--log-format", "json"]
    assert vars(cli.build_parser(argv).parse_args(argv)) == vars(cli.build_parser().parse_args(argv))


def test_a_group_imported_for_its_command_still_turns_its_errors_into_one_line(capsys):
    assert cli.main(["localbookie", "0"]) == 2  # LocalBookieError / CliError: usage, status 2
    assert capsys.readouterr().err.count("\n") == 1


def test_workers_import_no_asyncio():
    mods = modules_after("import bookie.workers.__main__, bookie.workers.journal_worker, "
                         "bookie.workers.add_worker, bookie.workers.read_worker, "
                         "bookie.workers.gc_worker")
    assert "asyncio" not in mods
    assert "prometheus_client" not in mods  # imported by the worker's main before its go


def test_the_bookie_command_gives_numpy_one_blas_thread_unless_the_environment_says(monkeypatch, capsys):
    monkeypatch.delenv(console.BLAS_THREADS_ENV, raising=False)
    monkeypatch.setattr(sys, "argv", ["bookie", "localbookie", "0"])
    assert console.main() == 2
    assert os.environ[console.BLAS_THREADS_ENV] == "1"
    monkeypatch.setenv(console.BLAS_THREADS_ENV, "3")
    assert console.main() == 2
    assert os.environ[console.BLAS_THREADS_ENV] == "3"
