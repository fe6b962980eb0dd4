"""The cluster recovery secret: the one credential autorecovery needs to heal any ledger.

Theory of operation
-------------------
Healing a ledger writes recovery copies of its entries to a new bookie and, for a ledger left
open, fences it first; a bookie lets both through only to whoever proves a right to the
ledger.  The ledger's master key would do, but nothing hands it out: the metadata holds a
digest of the password, the bookies an HMAC of the key (``bookie.core.ledgers``).  So the
cluster keeps one more secret, 32 random bytes in the bookies' private place of the store
(``bookie.metadata.private``: on ZooKeeper a node only the bookies' own principal,
``zkBookieDigestAuthFile``, may read; in the embedded store a 0600 file beside it), created once
by the first bookie or healer that needs it (create-if-absent, then read back, so two racing
creators end up with the same bytes).  Where the store has no private place (ZooKeeper without
``zkBookieDigestAuthFile``) there is no recovery secret: bookies accept no credential and
autorecovery heals with ``autoRecoveryLedgerPasswords`` only, as before the secret existed (the
supervisor says so once at start).  An older ordinary node ``/RECOVERYSECRET`` (readable by
every client) is never used.  From it each ledger gets its own
*recovery credential*::

    credential(ledger) = HMAC-SHA256(secret, b"bookie-recovery\\0" | ledger id as u64 big-endian)

A request that carries it (wire flag RECOVERY_CREDENTIAL) may do what the ledger's writer does
when it recovers - a recovery add, a fence - and nothing else: never a normal add or an
explicit LAC write.  The bookie's supervisor reads the secret at start and hands it to its add
worker in a file of its private run directory (mode 0600); it never travels on a command line
or in a log.  Whoever can read the secret can fence and write recovery copies of every ledger
(docs/autorecovery.md, docs/security.md).
"""

from __future__ import annotations

import hmac
import os
import secrets
import struct

from bookie.metadata.errors import CorruptMetadataError, NodeExistsError
from bookie.metadata.store import RECOVERYSECRET

SECRET_PATH = RECOVERYSECRET  # older versions' ordinary node: never read
SECRET_NAME = "RECOVERYSECRET"  # in the private place
SECRET_SIZE = 32
RUN_DIR_FILE = "recovery.secret"  # the supervisor's hand-over to its add worker
_LABEL = b"bookie-recovery\0"
_LEDGER = struct.Struct(">Q")


def recovery_secret(store, create: bool = True) -> bytes | None:
    """The cluster's recovery secret; made now if there is none and ``create`` (else None).
    None too where the store has no place only bookies reach (``protected(store)`` is None).

    Raises:
        CorruptMetadataError: the secret holds something other than SECRET_SIZE bytes.
        AccessDeniedError: the private place is not private (named in the message).
        MetadataError: the store failed.
    """
    from bookie.metadata.private import private_store  # lazy: kazoo
    place = private_store(store)
    if place is None:
        return None
    data = place.get(SECRET_NAME)
    if data is None:
        if not create:
            return None
        try:
            place.create(SECRET_NAME, secrets.token_bytes(SECRET_SIZE))
        except NodeExistsError:
            pass  # another bookie or healer made it first: its bytes win
        data = place.get(SECRET_NAME)
    if data is None or len(data) != SECRET_SIZE:
        raise CorruptMetadataError(f"{place.where}: {SECRET_NAME} holds "
                                   f"{0 if data is None else len(data)} bytes, not a "
                                   f"{SECRET_SIZE}-byte recovery secret")
    return bytes(data)


def protected(store) -> str | None:
    """Where ``store`` keeps the secret from everyone but the bookies, or None: no such place
    (no recovery secret; autorecovery uses autoRecoveryLedgerPasswords)."""
    from bookie.metadata.private import private_store  # lazy: kazoo
    place = private_store(store)
    return None if place is None else place.where


def credential(secret: bytes, ledger_id: int) -> bytes:
    """The recovery credential of one ledger (module docstring)."""
    return hmac.digest(secret, _LABEL + _LEDGER.pack(ledger_id), "sha256")


def write_secret_file(run_dir: str, secret: bytes) -> None:
    """Hand the secret to this bookie's workers: a 0600 file in the supervisor's run dir."""
    path = os.path.join(run_dir, RUN_DIR_FILE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, secret)
    finally:
        os.close(fd)


def read_secret_file(run_dir: str) -> bytes | None:
    """The secret the supervisor handed over; None when the bookie has no metadata store."""
    try:
        with open(os.path.join(run_dir, RUN_DIR_FILE), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return data if len(data) == SECRET_SIZE else None
