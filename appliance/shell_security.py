"""``bookie shell genkey``: make a CURVE keypair for a bookie or a client (docs/security.md);
``bookie shell gentoken``: make the HTTP admin API's bearer token (docs/admin.md).

    bookie shell genkey NAME [--dir DIR] [--force]
    bookie shell gentoken FILE

Writes ``DIR/NAME.key`` (the public key: give it to the other side, enrol it, pin it) and
``DIR/NAME.key_secret`` (public and secret key, mode 0600: it never leaves this host), in
ZeroMQ's certificate format.  An existing pair is not overwritten without ``--force``: a
replaced bookie key locks out every client that pinned the old one.

``gentoken`` writes 32 random bytes, base64url (43 characters) and a newline, to a new FILE of
mode 0600, for ``httpServerAuthTokenFile``.  It never replaces a file (nor follows a symbolic
link): the bookie and every script that calls its admin API hold the old token.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import secrets

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
    p = commands.add_parser("gentoken", help="Make a bearer token for the HTTP admin API (FILE, "
                                             "mode 0600).",
                            description="Write a new random token (32 bytes, base64url) to FILE, "
                                        "mode 0600, for httpServerAuthTokenFile; an existing FILE "
                                        "is never replaced.")
    p.add_argument("file", metavar="FILE", help="the token file to create (must not exist)")
    p.set_defaults(func=_gentoken)


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


TOKEN_BYTES = 32


def gentoken(path: str) -> None:
    """Create ``path`` (O_EXCL, O_NOFOLLOW, mode 0600) holding a new token.  Raises CliError on
    a user mistake (it exists, its directory does not, no permission)."""
    token = base64.urlsafe_b64encode(secrets.token_bytes(TOKEN_BYTES)).rstrip(b"=") + b"\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except FileExistsError:
        raise CliError(f"gentoken: {path} exists; it is not replaced (the bookie and the "
                       f"admin API's callers hold its token): remove it first") from None
    except OSError as e:
        raise CliError(f"gentoken: cannot create {path}: {e.strerror}") from None
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        if os.write(fd, token) != len(token):
            raise OSError(0, "short write")
        os.fsync(fd)
    except OSError as e:
        os.close(fd)
        os.unlink(path)
        raise CliError(f"gentoken: cannot write {path}: {e.strerror}") from None
    os.close(fd)


def _gentoken(args: argparse.Namespace) -> int:
    gentoken(args.file)
    print(f"gentoken: new token in {args.file} (0600); set httpServerAuthTokenFile={args.file} "
          f"and send it as 'Authorization: Bearer <token>'")
    return 0
