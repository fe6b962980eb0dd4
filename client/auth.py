"""The client's CURVE keys: its own keypair, and the bookie key each connection pins.

Every connection to a bookie is a CURVE client (DESIGN.md, "Identity"): the server must prove
the public key the bookie's registration publishes (``bookie.client.resolver``), or the
handshake fails and nothing is ever sent to it.

The client's own key: ``curveSecretKeyFile`` (NAME.key_secret from ``bookie shell genkey``;
its public half is what the bookie operator enrols, with a role) where bookies enrol client
keys (``curveClientKeysDirectory``); otherwise an *ephemeral* keypair made for this client,
which a bookie without enrolment admits and never takes for an identity (shares and quotas go
by the peer's address).

``curveServerKeys`` (optional) pins bookie keys: a public key file used for every bookie, or a
directory holding one ``HOST_PORT.key`` per bookie (its id with ``:`` as ``_``).  An explicit
pin wins over the key a registration publishes (issue 39 item 6: whoever can write a
registration cannot swap the key of a bookie the operator pinned); without one, the published
key is pinned.  A registration that publishes no key (a bookie from before keys, or one serving
a benchmark's clear-text baseline) is refused (``bookie.client.connection``: the bookie counts
as down) unless the client sets ``allowClearTextBookies=true``: then it is spoken to in the
clear.  A bookie reached without a metadata store (an address given by hand) with no pin is
spoken to in the clear, as before: no registration was read there to forge.
"""

from __future__ import annotations

import os

import zmq
import zmq.auth

from bookie.client.errors import InvalidArgumentError


class ClientCurve:
    """Args:
        secret_key_file: the client's enrolled key; "" makes an ephemeral one.
        server_keys: ``curveServerKeys`` ("" none).
        allow_clear: ``allowClearTextBookies``: speak in the clear to a bookie whose
            registration publishes no key (else it is refused).
        use_local: ``useLocalSockets``: connect to a bookie on this host over its local
            sockets where they pass the checks of ``bookie.client.local_sockets`` (no CURVE
            there: the kernel vouches for both ends).
    """

    def __init__(self, secret_key_file: str = "", server_keys: str = "", allow_clear: bool = False,
                 use_local: bool = True):
        if secret_key_file:
            try:
                self.public, self.secret = zmq.auth.load_certificate(secret_key_file)
            except (OSError, ValueError) as e:
                raise InvalidArgumentError(f"curveSecretKeyFile={secret_key_file}: {e}") from None
            if not self.secret:
                raise InvalidArgumentError(f"curveSecretKeyFile={secret_key_file} holds no secret key")
        else:
            self.public, self.secret = zmq.curve_keypair()
        self.ephemeral = not secret_key_file  # never an identity at the bookie
        self.allow_clear = allow_clear
        self.use_local = use_local  # useLocalSockets: a bookie's local sockets where trusted
        self.server_keys = server_keys
        self.shared = None if not server_keys or os.path.isdir(server_keys) \
            else self._load(server_keys)

    @staticmethod
    def _load(path: str) -> bytes | None:
        try:
            return zmq.auth.load_certificate(path)[0]
        except (OSError, ValueError):
            return None

    def server_key(self, bookie: str) -> bytes | None:
        """The key ``curveServerKeys`` pins for ``bookie`` (None: none)."""
        if not self.server_keys:
            return None
        if self.shared is not None:
            return self.shared
        return self._load(os.path.join(self.server_keys, bookie.replace(":", "_") + ".key"))

    def apply(self, sock, bookie: str, published: bytes | None = None) -> bool:
        """Make ``sock`` (not yet connected) a CURVE client of ``bookie``, pinning the key
        ``curveServerKeys`` names for it, else ``published`` (the key its registration names).

        No key known (``published`` ``b""``: a registration without a key; None: no store
        was asked, an address given by hand; and no ``curveServerKeys``): the socket is left
        alone and False is returned (the caller refuses it or speaks in the clear), else
        True."""
        key = self.server_key(bookie) or published
        if not key:
            return False
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
        sock.setsockopt(zmq.CURVE_SERVERKEY, key)
        return True


def client_curve(cfg) -> ClientCurve:
    """The client's CURVE keys as ``cfg`` configures them (always some: an ephemeral key when
    ``curveSecretKeyFile`` is not set).  Raises InvalidArgumentError for unusable files."""
    if cfg.curveServerKeys and not os.path.exists(cfg.curveServerKeys):
        raise InvalidArgumentError(f"curveServerKeys={cfg.curveServerKeys}: no such file or directory")
    return ClientCurve(cfg.curveSecretKeyFile, cfg.curveServerKeys, cfg.allowClearTextBookies,
                       cfg.useLocalSockets)
