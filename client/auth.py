"""The client's CURVE keys: its own keypair and the bookie public keys it pins.

``curveSecretKeyFile`` is the client's secret key file (NAME.key_secret from ``bookie shell
genkey``; its public half is what the bookie operator enrols).  ``curveServerKeys`` pins the
bookies: a public key file used for every bookie, or a directory holding one ``HOST_PORT.key``
per bookie (its id with ``:`` as ``_``).  A bookie whose key is not pinned is not connected to
unencrypted: its socket gets no server key and every request to it times out, as to a dead one.
"""

from __future__ import annotations

import os

import zmq
import zmq.auth

from bookie.client.errors import InvalidArgumentError


class ClientCurve:
    def __init__(self, secret_key_file: str, server_keys: str):
        try:
            self.public, self.secret = zmq.auth.load_certificate(secret_key_file)
        except (OSError, ValueError) as e:
            raise InvalidArgumentError(f"curveSecretKeyFile={secret_key_file}: {e}") from None
        if not self.secret:
            raise InvalidArgumentError(f"curveSecretKeyFile={secret_key_file} holds no secret key")
        self.server_keys = server_keys
        self.shared = None if os.path.isdir(server_keys) else self._load(server_keys)

    @staticmethod
    def _load(path: str) -> bytes | None:
        try:
            return zmq.auth.load_certificate(path)[0]
        except (OSError, ValueError):
            return None

    def server_key(self, bookie: str) -> bytes | None:
        if self.shared is not None:
            return self.shared
        return self._load(os.path.join(self.server_keys, bookie.replace(":", "_") + ".key"))

    def apply(self, sock, bookie: str) -> None:
        """Make ``sock`` (not yet connected) a CURVE client of ``bookie``."""
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
        # no pinned key: a key that no bookie holds, so the handshake fails rather than the
        # socket falling back to the clear
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_key(bookie) or self.public)


def client_curve(cfg) -> ClientCurve | None:
    if not cfg.curveSecretKeyFile and not cfg.curveServerKeys:
        return None
    if not (cfg.curveSecretKeyFile and cfg.curveServerKeys):
        raise InvalidArgumentError("curveSecretKeyFile and curveServerKeys go together")
    if not os.path.exists(cfg.curveServerKeys):
        raise InvalidArgumentError(f"curveServerKeys={cfg.curveServerKeys}: no such file or directory")
    return ClientCurve(cfg.curveSecretKeyFile, cfg.curveServerKeys)
