"""Write the man page bookie(1) from the command's own help (``bookie --help`` and each
command's and shell verb's), so the page says what the program says: run by build-deb.sh with
the package's interpreter.

    python systemd/manpage.py VERSION > bookie.1
"""

import argparse
import datetime
import sys

from bookie.appliance.cli import build_parser


def roff(text: str) -> str:
    """Help text as roff lines: a leading dot or quote escaped, backslashes doubled."""
    out = []
    for line in text.rstrip().splitlines():
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def subcommands(parser: argparse.ArgumentParser) -> dict:
    for action in parser._actions:  # argparse has no public accessor for its subparsers
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main() -> int:
    version = sys.argv[1] if len(sys.argv) > 1 else ""
    parser = build_parser()
    parser.formatter_class = argparse.HelpFormatter
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    page = [f'.TH BOOKIE 1 "{date}" "bookie {version}" "User Commands"',
            ".SH NAME",
            "bookie \\- BookKeeper-style bookie appliance: run a bookie, a local ensemble, "
            "the admin shell and the benchmarks",
            ".SH SYNOPSIS",
            ".B bookie",
            "COMMAND [OPTIONS]",
            ".SH DESCRIPTION",
            ".nf", roff(parser.format_help()), ".fi"]
    for name, sub in subcommands(parser).items():
        page += [f".SH COMMAND: {name.upper()}", ".nf", roff(sub.format_help()), ".fi"]
        for verb, verb_parser in subcommands(sub).items():
            page += [f".SS bookie {name} {verb}", ".nf", roff(verb_parser.format_help()), ".fi"]
    page += [".SH FILES", "/etc/bookie/bookie.conf, /var/lib/bookie, "
             "/lib/systemd/system/bookie.service",
             ".SH SEE ALSO", "/usr/share/doc/bookie/appliance.md"]
    sys.stdout.write("\n".join(page) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
