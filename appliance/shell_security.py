"""``bookie shell genkey``: make a CURVE keypair for a bookie or a client (docs/security.md).

    bookie shell genkey NAME [--dir DIR] [--force]

Writes ``DIR/NAME.key`` (the public key: give it to the other side, enrol it, pin it) and
``DIR/NAME.key_secret`` (public and secret key, mode 0600: it never leaves this host), in
ZeroMQ's certificate format.  An existing pair is not overwritten without ``--force``: a
replaced bookie key locks out every client that pinned the old one.
"""

from __future__ import annotations

import argparse
import os
import re

from bookie.appliance.errors import CliError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def register(commands) -> None:
    p = commands.add_parser("genkey", help="Make a CURVE keypair (NAME.key, NAME.key_secret).",
                            description="Make a CURVE keypair for a bookie or a client: "
                                        "NAME.key (public) and NAME.key_secret (mode 0600).")
    p.add_argument("name", metavar="NAME", help="principal or bookie name: the files' stem")
    p.add_argument("--dir", default=".", help="directory to write to (default: .)")
    p.add_argument("--force", action="store_true", help="overwrite an existing keypair")
    p.set_defaults(func=_genkey)


def genkey(directory: str, name: str, force: bool = False) -> tuple[str, str]:
    """Write the pair; returns (public path, secret path).  Raises CliError on a user mistake."""
    import zmq
    import zmq.auth

    if not NAME.match(name):
        raise CliError(f"genkey: name {name!r}: letters, digits, '.', '_', '-' only")
    if not os.path.isdir(directory):
        raise CliError(f"genkey: {directory} is not a directory")
    public = os.path.join(directory, f"{name}.key")
    secret = public + "_secret"
    present = [p for p in (public, secret) if os.path.exists(p)]
    if present and not force:
        raise CliError(f"genkey: {present[0]} exists; --force replaces it (clients that pinned "
                       f"or enrolled the old key lose access)")
    for p in present:
        os.unlink(p)
    old = os.umask(0o077)  # the secret file is never readable by others, not even for a moment
    try:
        zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old)
    os.chmod(secret, 0o600)
    os.chmod(public, 0o644)  # public: anyone may read it
    return public, secret


def _genkey(args: argparse.Namespace) -> int:
    public, secret = genkey(args.dir, args.name, args.force)
    print(f"genkey: public key {public}, secret key {secret} (0600)")
    return 0
