"""The bookie's own CURVE keypair: its identity on the wire (DESIGN.md, "Identity").

Invariants
----------
1. Every bookie has one keypair from its first start on.  Its secret half is a file the bookie
   alone reads (0600, in its 0700 ``current/`` directory, never logged); its public half is
   recorded in the bookie's cookie (``PUBLIC_KEY_FIELD``, in every directory and in the
   metadata store) and published in its registration, where clients pin it.
2. Where ``curveSecretKeyFile`` is set, that file's key is the bookie's key; otherwise the key
   lives in the first journal directory, ``current/KEY_FILE`` (``key_path``), made at the
   first start.  Formatting the bookie wipes it with the rest: a new bookie, a new key.
3. A key never changes silently: a key file that differs from the cookie's key, or that is gone
   while the cookie names one, refuses the start (``KeyChanged``, naming the verb).  Only
   ``bookie shell rotatekey`` changes it, with the bookie stopped.  A cookie written before
   keys existed names none: the start records the key in it (an upgrade is not refused).

The file format is ZeroMQ's certificate (``zmq.auth``): ``public-key = "..."`` and
``secret-key = "..."`` in a ``curve`` section, so ``zmq.auth.load_certificate`` reads it.
"""

from __future__ import annotations

import os

import zmq
import zmq.auth

from bookie.storage.layout import KEY_FILE, PUBLIC_KEY_FIELD, ROTATE_VERB, LayoutError, current_dir
from bookie.storage.replace_file import replace_file


class ServerKeyError(LayoutError):
    """The bookie's key file cannot be used; one line naming it."""


class KeyChanged(ServerKeyError):
    """The key differs from (or is missing against) the one the cookie records."""


def key_path(conf) -> str:
    """Where the bookie's secret key is: ``curveSecretKeyFile``, or its own file."""
    if conf.curve_secret_key_file:
        return conf.curve_secret_key_file
    return os.path.join(current_dir(conf.journal_dir), KEY_FILE)


def load(path: str, hint: str = "") -> tuple[bytes, bytes]:
    """(public, secret) z85 keys of the secret key file ``path`` (the one reader of ZeroMQ
    certificate files with a secret half).  Raises ServerKeyError (one line; ``hint`` is added
    when the file holds no secret key)."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as e:
        raise ServerKeyError(f"curve key file {path}: {e}") from None
    if not secret:
        raise ServerKeyError(f"curve key file {path} holds no secret key{hint}")
    return public, secret


def write_new(path: str) -> bytes:
    """Make a new keypair and write it to ``path`` (0600, replacing atomically, never through a
    link: storage/replace_file.py); returns its public key (z85)."""
    public, secret = zmq.curve_keypair()
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    replace_file(path, ("#   the bookie's CURVE keypair (storage/server_key.py): do not copy, do not edit\n"
                        "metadata\ncurve\n"
                        f'    public-key = "{public.decode("ascii")}"\n'
                        f'    secret-key = "{secret.decode("ascii")}"\n').encode("ascii"))
    return public


def recorded_key(cookie: dict | None) -> str | None:
    """The public key a cookie records, or None (no cookie, or one from before keys)."""
    if not isinstance(cookie, dict):
        return None
    key = cookie.get(PUBLIC_KEY_FIELD)
    return key if isinstance(key, str) and key else None


def ensure(conf, cookie: dict | None) -> str:
    """The bookie's public key (z85 text), making its keypair at the first start.

    Args:
        cookie: the cookie in the bookie's journal directory now (None before the first start).
    Raises:
        KeyChanged: the key file is gone, or holds another key, while the cookie records one.
        ServerKeyError: the key file cannot be read.
    """
    path = key_path(conf)
    recorded = recorded_key(cookie)
    if not os.path.exists(path):
        if conf.curve_secret_key_file:
            raise ServerKeyError(f"curveSecretKeyFile={path}: no such file")
        if recorded is not None:
            raise KeyChanged(f"the bookie's key file {path} is gone while its cookie records key "
                             f"{recorded[:8]}...: restore the file, or run '{ROTATE_VERB}' to "
                             f"give the bookie a new key on purpose")
        return write_new(path).decode("ascii")
    public = load(path)[0].decode("ascii")
    if recorded is not None and recorded != public:
        raise KeyChanged(f"the bookie's key file {path} holds key {public[:8]}... but its cookie "
                         f"records {recorded[:8]}... (clients pin that one): restore the file, "
                         f"or run '{ROTATE_VERB}' to change the key on purpose")
    return public
