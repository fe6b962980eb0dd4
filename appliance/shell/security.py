"""``bookie shell genkey``: make a CURVE keypair for a bookie or a client (docs/security.md);
``bookie shell gentoken``: make the HTTP admin API's bearer token (docs/admin.md);
``bookie shell rotatekey``: change a stopped bookie's own key, on purpose.

    bookie shell genkey NAME [--dir DIR] [--force]
    bookie shell gentoken FILE [--owner USER]
    bookie shell rotatekey --conf FILE [--set KEY=VALUE ...]

``rotatekey`` is the one way a bookie's key changes (``bookie.storage.server_key``): with the
bookie stopped (its directory lock), it makes a new keypair in the bookie's own key file, or,
where ``curveSecretKeyFile`` is set, adopts the key that file holds now; then it records the
new public key in the bookie's cookies (every directory, and the metadata store's).  Clients
pin the key the registration publishes at the bookie's next start; a bookie whose enrolled key
(as admin at other bookies, for autorecovery) was the old one must be enrolled again.  Started
as root it becomes the directories' owner first (``bookie.appliance.privileges``), so the key
and the cookies (0600) stay the bookie's; each file is replaced through a fresh ``.tmp``
never followed through a link (``bookie.storage.replace_file``).

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
import pwd
import re
import secrets

import orjson

from bookie.appliance.errors import CliError
from bookie.appliance.shell.registry import add_bookie_conf_arguments
from bookie.appliance.startchecks import with_stamped_port
from bookie.appliance.privileges import run_as_owner
from bookie.appliance.shell.registry import import_store_modules
from bookie.metadata import CookieNotFoundError, MetadataError, open_metadata
from bookie.storage.dirlock import DirectoryLock
from bookie.storage.layout import (
    LayoutError, PUBLIC_KEY_FIELD, all_dirs, local_cookie, rewrite_cookies)
from bookie.storage.replace_file import create_new
from bookie.workers.config import BookieConfig, ConfigError, parse_overrides

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
    p.add_argument("--owner", metavar="USER", default=None,
                   help="give the new file to USER (and its group): the bookie's user, which "
                        "reads it (the package's postinst); set on the file made, never by path")
    p.set_defaults(func=_gentoken)
    p = commands.add_parser("rotatekey", help="Give a stopped bookie a new CURVE key (its own "
                                              "key file, or curveSecretKeyFile's key now) and "
                                              "record it in its cookies.",
                            description="Change a stopped bookie's key on purpose: a new keypair "
                                        "in its own key file (or the key curveSecretKeyFile "
                                        "holds now), recorded in its cookies in every directory "
                                        "and in the metadata store. Clients pin the new key "
                                        "from the bookie's registration at its next start.")
    add_bookie_conf_arguments(p)
    p.set_defaults(func=_rotatekey)


def _create_private(path: str, text: str, mode: int) -> None:
    """Create ``path`` anew (O_EXCL, O_NOFOLLOW: never through a link, never over a file) with
    ``text`` and ``mode``.  Raises OSError; a half-written file is removed."""
    create_new(path, text.encode(), mode)


def _key_file(public: bytes, secret: bytes | None = None) -> str:
    """ZeroMQ's certificate format (what ``zmq.auth.load_certificate`` reads)."""
    kind = "secret" if secret else "public"
    lines = [f"#   ****  Generated by bookie shell genkey: CurveZMQ {kind} key  ****",
             "metadata", "curve", f'    public-key = "{public.decode()}"']
    if secret:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return "\n".join(lines) + "\n"


def genkey(directory: str, name: str, force: bool = False) -> tuple[str, str]:
    """Write the pair; returns (public path, secret path).  Raises CliError on a user mistake.

    Each file is created anew with O_EXCL | O_NOFOLLOW (the secret one 0600 from its first
    byte): a link planted under either name, dangling or not, is refused, never written
    through; with ``force`` an existing file or link is removed first (the link, not its
    target)."""
    import zmq  # lazy: zmq

    if not NAME.match(name):
        raise CliError(f"genkey: name {name!r}: letters, digits, '.', '_', '-' only")
    if not os.path.isdir(directory):
        raise CliError(f"genkey: {directory} is not a directory")
    public = os.path.join(directory, f"{name}.key")
    secret = public + "_secret"
    present = [p for p in (public, secret) if os.path.lexists(p)]
    if present and not force:
        raise CliError(f"genkey: {present[0]} exists; --force replaces it (clients that pinned "
                       f"or enrolled the old key lose access)")
    try:
        for p in present:
            os.unlink(p)
        public_key, secret_key = zmq.curve_keypair()
        _create_private(secret, _key_file(public_key, secret_key), 0o600)
        _create_private(public, _key_file(public_key), 0o644)  # public: anyone may read it
    except FileExistsError as e:
        raise CliError(f"genkey: {e.filename} appeared meanwhile; nothing replaced") from None
    except OSError as e:
        raise CliError(f"genkey: cannot create {e.filename or directory}: {e.strerror}") from None
    return public, secret


def _genkey(args: argparse.Namespace) -> int:
    public, secret = genkey(args.dir, args.name, args.force)
    print(f"genkey: public key {public}, secret key {secret} (0600)")
    return 0


TOKEN_BYTES = 32


def gentoken(path: str, owner: str | None = None) -> None:
    """Create ``path`` (O_EXCL, O_NOFOLLOW, mode 0600) holding a new token; with ``owner``,
    the file is that user's (``fchown`` of the descriptor just made: no link swapped in
    between can redirect it).  Raises CliError on a user mistake (it exists, its directory does
    not, no permission, no such user)."""
    ids = None
    if owner is not None:
        try:
            entry = pwd.getpwnam(owner)
        except KeyError:
            raise CliError(f"gentoken: --owner {owner}: no such user") from None
        ids = (entry.pw_uid, entry.pw_gid)
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
        if ids is not None:
            os.fchown(fd, *ids)
        if os.write(fd, token) != len(token):
            raise OSError(0, "short write")
        os.fsync(fd)
    except OSError as e:
        os.close(fd)
        os.unlink(path)
        raise CliError(f"gentoken: cannot write {path}: {e.strerror}") from None
    os.close(fd)


def _gentoken(args: argparse.Namespace) -> int:
    gentoken(args.file, args.owner)
    print(f"gentoken: new token in {args.file} (0600); set httpServerAuthTokenFile={args.file} "
          f"and send it as 'Authorization: Bearer <token>'")
    return 0


def rotatekey(conf) -> tuple[str | None, str]:
    """Change the stopped bookie's key (module doc); returns (old public key or None, new).

    Raises:
        CliError: the bookie runs, was never started, or its store or key cannot be used.
    """

    from bookie.storage import server_key  # lazy: zmq

    # as root: become the directories' owner first, as every verb that writes there does
    # (appliance/privileges.py), after the imports and the reads only root may make
    import_store_modules(conf.metadata_uri)
    try:
        conf.zk_security  # noqa: B018 - the credentials file may be readable by root only
    except ConfigError as e:
        raise CliError(f"rotatekey: {e}") from None
    run_as_owner(all_dirs(conf), "rotatekey")
    try:
        lock = DirectoryLock.acquire(all_dirs(conf), purpose="rotate its key")
    except LayoutError as e:
        raise CliError(f"rotatekey: {e}") from None
    try:
        cookie = local_cookie(conf)
        if cookie is None:
            raise CliError("rotatekey: the bookie has no cookie (never started): its first "
                           "start makes its key")
        old = server_key.recorded_key(cookie)
        path = server_key.key_path(conf)
        try:
            if conf.curve_secret_key_file:
                new = server_key.load(path)[0].decode("ascii")
            else:
                new = server_key.write_new(path).decode("ascii")
        except server_key.ServerKeyError as e:
            raise CliError(f"rotatekey: {e}") from None
        cookie = {**cookie, PUBLIC_KEY_FIELD: new}
        if conf.metadata_uri:
            try:
                with open_metadata(conf.metadata_uri, timeout_s=conf.metadata_timeout_s,
                                   zk_security=conf.zk_security) as store:
                    try:
                        raw, version = store.read_cookie(conf.bookie_id)
                        stored = orjson.loads(raw)
                        store.write_cookie(conf.bookie_id,
                                           orjson.dumps({**stored, PUBLIC_KEY_FIELD: new}), version)
                    except CookieNotFoundError:
                        store.write_cookie(conf.bookie_id, orjson.dumps(cookie))
            except MetadataError as e:
                raise CliError(f"rotatekey: metadata store {conf.metadata_uri}: {e}") from None
        rewrite_cookies(conf, cookie)
        return old, new
    finally:
        lock.release()


def _rotatekey(args: argparse.Namespace) -> int:

    try:
        conf = BookieConfig.load(args.conf, parse_overrides(args.set), check_dirs=False)
    except ConfigError as e:
        raise CliError(str(e)) from None
    old, new = rotatekey(with_stamped_port(conf))
    print(f"rotatekey: bookie {conf.bookie_id} key {new[:8]}... (was "
          f"{old[:8] + '...' if old else 'none'}); clients pin it from its registration at its "
          f"next start")
    return 0
