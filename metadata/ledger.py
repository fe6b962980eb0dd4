"""Ledger metadata: the record, its invariants and its serialized form.

Record format (format version 1).  One JSON object, encoded with orjson, UTF-8:

    {
      "format_version": 1,                # readers refuse versions they do not know
      "ensemble_size": E, "write_quorum": Qw, "ack_quorum": Qa,     # E >= Qw >= Qa >= 1
      "state": "OPEN" | "IN_RECOVERY" | "CLOSED",
      "last_entry_id": int,               # -1 = no entry; meaningful once CLOSED
      "length": int,                      # bytes in the ledger; meaningful once CLOSED
      "digest_type": "crc32" | "crc32c" | "mac" | "dummy",
      "password_digest": base64 string,   # verifier of the ledger password, never the password
      "key_verifier": base64 string,      # optional: the scrypt verifier of the master key (below)
      "key_check": base64 string,         # optional, older records: salt | SHA-256 over the key
      "ctime_ms": int,                    # creation time, ms since the epoch
      "custom": {str: str},
      "fragments": [[first_entry_id, [bookie_id, ...]], ...]   # ascending, first one at 0
    }

Format version 2 (a record with features; a record without any is still written as version 1,
so older readers read every ledger they could before) adds:

      "features": ["verifiable"],         # what a client must understand to change the record
      "merkle_root": 64 hex digits,       # verifiable, once CLOSED: RFC 9162 root of the entries
      "tree_size": int                    # verifiable, once CLOSED: last_entry_id + 1

Older readers refuse version 2 outright (they would close a verifiable ledger without its root);
a reader of version 2 reads a record with features it does not know, but ``unknown_features``
names them and the client refuses to close or recover such a ledger.

Keys a reader does not know are ignored, so a later minor addition does not break older
readers; a change older readers must not misread bumps ``format_version``.  The store's record
version (for compare-and-swap) is kept by the store, never inside the record.

``key_check`` lets a bookie tell the ledger's writer from someone who reached the ledger's id
first (``bookie.workers.claims``), and ``password_digest`` lets a client refuse a wrong password
before it fences anything.  Both are **verifiers**: whoever reads the metadata must not be able
to test password guesses fast, nor against every ledger at once.  A verifier (``make_verifier``,
52 bytes) is self-describing:

    0x02 | log2(N) | r | p | salt (16 random bytes) | scrypt(label | key, salt, N, r, p) (32)

(``hashlib.scrypt``, memory-hard: N=2**12, r=8, p=1 take 4 MiB and about 10 ms per evaluation
on one core, thousands of times a SHA-256; the parameters travel with the verifier, so they can
be raised later and older verifiers still check.  2**14 made a log that rolls every few hundred
entries spend most of its time creating ledgers on a loaded 2-core host).  A new record holds one verifier over the ledger's master key, as
``key_verifier`` and as ``password_digest`` (a client checks a password by its master key: one
scrypt per ``create_ledger`` and per ``open_ledger``, and per guess).  Salted per ledger: two
ledgers of one password share nothing.

Older records still verify: a ``password_digest`` of 32 bytes is SHA-256 over a label and the
password, a ``key_check`` of 48 bytes is 16 bytes of salt and SHA-256 over a label, the salt and
the key (``key_check_matches`` and ``password_matches`` take every form).  A record without a key
check leaves the first binding of the id on each bookie as it was.  Older clients refuse to open
a new record (its ``password_digest`` is not their SHA-256: "wrong password") and older bookies
see no ``key_check`` in it (they keep the first binding): both fail closed.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import collections
import dataclasses
import enum
import hashlib
import hmac
import os
import threading
import time
from typing import Any

import orjson

from bookie.metadata.errors import CorruptMetadataError

FORMAT_VERSION = 1  # records without features
FEATURES_FORMAT_VERSION = 2  # records with features (merkle_root, tree_size)
KNOWN_FEATURES = ("verifiable",)
DIGEST_TYPES = ("crc32", "crc32c", "mac", "dummy")


_KEY_CHECK_LABEL = b"bookie-ledger-key-check\0"
_VERIFIER_LABEL = b"bookie-ledger-key-verifier\0"
_PASSWORD_LABEL = b"bookie-ledger-password:"
KEY_CHECK_SIZE = 48  # older records: 16 bytes of salt, 32 of SHA-256
LEGACY_PASSWORD_DIGEST_SIZE = 32  # older records: SHA-256(label | password)
VERIFIER_VERSION = 2
VERIFIER_SIZE = 52  # version, log2(N), r, p, 16 bytes of salt, 32 of scrypt
SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P = 12, 8, 1  # 4 MiB, ~10 ms: what new verifiers use
_MAX_LOG2_N, _MAX_R, _MAX_P = 20, 16, 4  # a record asking for more is not evaluated
_MEMO_SIZE = 4096
_memo: "collections.OrderedDict[bytes, bool]" = collections.OrderedDict()
_memo_lock = threading.Lock()


def _scrypt(key: bytes, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(_VERIFIER_LABEL + bytes(key), salt=salt, n=n, r=r, p=p,
                          maxmem=2 * 128 * r * n * p + (1 << 20), dklen=32)


def make_verifier(master_key: bytes, log2_n: int = SCRYPT_LOG2_N, r: int = SCRYPT_R,
                  p: int = SCRYPT_P) -> bytes:
    """A new record's verifier of ``master_key`` (format in the module docstring)."""
    salt = os.urandom(16)
    return bytes((VERIFIER_VERSION, log2_n, r, p)) + salt + _scrypt(master_key, salt, log2_n, r, p)


def verifier_parameters(verifier: bytes) -> dict | None:
    """``{"kdf": "scrypt", "n": N, "r": r, "p": p}`` of a verifier, None for an older form."""
    if len(verifier) != VERIFIER_SIZE or verifier[0] != VERIFIER_VERSION:
        return None
    return {"kdf": "scrypt", "n": 1 << verifier[1], "r": verifier[2], "p": verifier[3]}


def make_key_check(master_key: bytes) -> bytes:
    """The ``key_check`` a writer stores with a new ledger: ``make_verifier(master_key)``."""
    return make_verifier(master_key)


def key_check_matches(check: bytes, master_key: bytes) -> bool:
    """True when ``master_key`` is the key ``check`` was made from (constant time): a verifier
    (one scrypt), or an older record's salted SHA-256.  Answers are remembered (the last 4,096
    pairs, by a SHA-256 of both), so asking again about one pair costs a SHA-256."""
    check = bytes(check)
    if len(check) == KEY_CHECK_SIZE:
        salt = check[:16]
        return hmac.compare_digest(check[16:], hashlib.sha256(_KEY_CHECK_LABEL + salt + bytes(master_key)).digest())
    params = verifier_parameters(check)
    if params is None or check[1] > _MAX_LOG2_N or not 1 <= check[2] <= _MAX_R or not 1 <= check[3] <= _MAX_P:
        return False
    pair = hashlib.sha256(check + b"\0" + bytes(master_key)).digest()
    with _memo_lock:
        known = _memo.get(pair)
        if known is not None:
            _memo.move_to_end(pair)
            return known
    answer = hmac.compare_digest(check[20:], _scrypt(master_key, check[4:20], check[1], check[2], check[3]))
    with _memo_lock:
        _memo[pair] = answer
        if len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
    return answer


def legacy_password_digest(password: bytes) -> bytes:
    """An older record's ``password_digest``: SHA-256(label | password), unsalted."""
    return hashlib.sha256(_PASSWORD_LABEL + bytes(password)).digest()


def password_matches(digest: bytes, password: bytes, master_key: bytes) -> bool:
    """True when a record's ``password_digest`` names ``password`` (whose master key is
    ``master_key``): a verifier of the master key, or an older record's SHA-256."""
    digest = bytes(digest)
    if len(digest) == LEGACY_PASSWORD_DIGEST_SIZE:
        return hmac.compare_digest(digest, legacy_password_digest(password))
    return verifier_parameters(digest) is not None and key_check_matches(digest, master_key)


class LedgerState(str, enum.Enum):
    """Lifecycle of a ledger: OPEN -> (IN_RECOVERY ->) CLOSED; a CLOSED ledger never reopens."""

    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"

    def __str__(self) -> str:
        return self.value


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass
class LedgerMetadata:
    """The metadata of one ledger.

    Invariants (checked on construction, by ``validate()`` and on every encode and decode):
    E >= Qw >= Qa >= 1; every fragment's ensemble has exactly E distinct bookies; fragments are in
    strictly ascending order of first entry id and the first starts at entry 0.
    """

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: str = "crc32c"
    password_digest: bytes = b""
    key_check: bytes = b""  # make_key_check(master key); b"": written by an older client
    ctime_ms: int = dataclasses.field(default_factory=_now_ms)
    custom: dict[str, str] = dataclasses.field(default_factory=dict)
    fragments: list[tuple[int, list[str]]] = dataclasses.field(default_factory=list)
    features: list[str] = dataclasses.field(default_factory=list)  # format 2: "verifiable"
    merkle_root: str = ""  # verifiable and CLOSED: the RFC 9162 root (hex) of its entries
    tree_size: int = 0  # verifiable and CLOSED: last_entry_id + 1

    def __post_init__(self) -> None:
        self.state = LedgerState(self.state)
        fragments = []
        for fragment in self.fragments:
            if not (isinstance(fragment, (tuple, list)) and len(fragment) == 2
                    and isinstance(fragment[0], int) and not isinstance(fragment[0], bool)
                    and isinstance(fragment[1], (tuple, list))):
                raise ValueError(f"a fragment is (first_entry_id, [bookie_id, ...]), got {fragment!r}")
            fragments.append((fragment[0], list(fragment[1])))
        self.fragments = fragments
        self.validate()

    # -- invariants --------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first broken invariant; return None when all hold."""
        for name in ("ensemble_size", "write_quorum", "ack_quorum", "last_entry_id", "length",
                     "ctime_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise ValueError(
                f"need ensemble_size >= write_quorum >= ack_quorum >= 1, got "
                f"E={self.ensemble_size} Qw={self.write_quorum} Qa={self.ack_quorum}")
        if not isinstance(self.state, LedgerState):
            raise ValueError(f"state must be a LedgerState, got {self.state!r}")
        if self.last_entry_id < -1:
            raise ValueError(f"last_entry_id must be >= -1, got {self.last_entry_id}")
        if self.length < 0:
            raise ValueError(f"length must be >= 0, got {self.length}")
        if self.digest_type not in DIGEST_TYPES:
            raise ValueError(f"digest_type must be one of {DIGEST_TYPES}, got {self.digest_type!r}")
        if not isinstance(self.password_digest, (bytes, bytearray)):
            raise ValueError("password_digest must be bytes")
        if not isinstance(self.key_check, (bytes, bytearray)) or len(self.key_check) not in (
                0, KEY_CHECK_SIZE, VERIFIER_SIZE):
            raise ValueError(f"key_check must be {VERIFIER_SIZE} bytes (or {KEY_CHECK_SIZE}: an "
                             f"older record's) or empty")
        if not isinstance(self.custom, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.custom.items()):
            raise ValueError("custom must map str to str")
        if not isinstance(self.features, list) or not all(isinstance(f, str) for f in self.features):
            raise ValueError("features must be a list of strings")
        if self.verifiable and self.state is LedgerState.CLOSED:
            if not (isinstance(self.merkle_root, str) and len(self.merkle_root) == 64
                    and all(c in "0123456789abcdef" for c in self.merkle_root)):
                raise ValueError(f"a closed verifiable ledger needs merkle_root (64 lower-case "
                                 f"hex digits), got {self.merkle_root!r}")
            if self.tree_size != self.last_entry_id + 1:
                raise ValueError(f"a closed verifiable ledger's tree_size must be last_entry_id "
                                 f"+ 1 = {self.last_entry_id + 1}, got {self.tree_size!r}")
        previous = -1
        for first, ensemble in self.fragments:
            if first < 0 or first <= previous:
                raise ValueError(f"fragment first entry ids must ascend from 0, got {first} "
                                 f"after {previous}")
            if previous == -1 and first != 0:
                raise ValueError(f"the first fragment must start at entry 0, not {first}")
            if len(ensemble) != self.ensemble_size:
                raise ValueError(f"fragment at entry {first} has {len(ensemble)} bookies, "
                                 f"ensemble_size is {self.ensemble_size}")
            if not all(isinstance(b, str) and b and "/" not in b for b in ensemble):
                raise ValueError(f"fragment at entry {first}: bookie ids must be non-empty strings without '/' (host:port or a bookieId)")
            if len(set(ensemble)) != len(ensemble):
                raise ValueError(f"fragment at entry {first} names a bookie twice: {ensemble}")
            previous = first

    # -- helpers -----------------------------------------------------------------------------

    def ensemble_for(self, entry_id: int) -> list[str]:
        """The ensemble of the fragment that holds ``entry_id`` (the last one starting at or
        before it).  Raises ``ValueError`` for a negative id or a ledger without fragments."""
        if entry_id < 0:
            raise ValueError(f"entry id must be >= 0, got {entry_id}")
        if not self.fragments:
            raise ValueError("ledger has no fragments")
        firsts = [first for first, _ in self.fragments]
        return list(self.fragments[bisect.bisect_right(firsts, entry_id) - 1][1])

    @property
    def verifiable(self) -> bool:
        return "verifiable" in self.features

    @property
    def unknown_features(self) -> list[str]:
        """Features of the record this build does not know: it must not close the ledger."""
        return [f for f in self.features if f not in KNOWN_FEATURES]

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    # -- codec -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON types (the on-store form, also used by ``--json`` output)."""
        doc = {
            "format_version": FORMAT_VERSION,
            "ensemble_size": self.ensemble_size,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "state": self.state.value,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "digest_type": self.digest_type,
            "password_digest": base64.b64encode(bytes(self.password_digest)).decode("ascii"),
            "ctime_ms": self.ctime_ms,
            "custom": dict(self.custom),
            "fragments": [[first, list(ensemble)] for first, ensemble in self.fragments],
        }
        if self.key_check:  # a verifier under its own name: older bookies see no key_check
            field = "key_check" if len(self.key_check) == KEY_CHECK_SIZE else "key_verifier"
            doc[field] = base64.b64encode(bytes(self.key_check)).decode("ascii")
        if self.features:
            doc["format_version"] = FEATURES_FORMAT_VERSION
            doc["features"] = list(self.features)
            if self.merkle_root:
                doc["merkle_root"], doc["tree_size"] = self.merkle_root, self.tree_size
        return doc

    def to_bytes(self) -> bytes:
        self.validate()  # fields may have been assigned since construction
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_bytes(cls, data: bytes, *, what: str = "ledger metadata") -> "LedgerMetadata":
        """Decode a record.  Raises ``CorruptMetadataError`` (its message starts with ``what``,
        e.g. "ledger 42") for anything that is not a valid record of a known format version."""
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise CorruptMetadataError(f"{what}: metadata record is not valid JSON ({e})") from None
        if not isinstance(doc, dict):
            raise CorruptMetadataError(f"{what}: metadata record is not a JSON object")
        version = doc.get("format_version")
        if version not in (FORMAT_VERSION, FEATURES_FORMAT_VERSION):
            raise CorruptMetadataError(
                f"{what}: unknown metadata format version {version!r} (this build reads "
                f"{FORMAT_VERSION} and {FEATURES_FORMAT_VERSION})")
        try:
            return cls(
                ensemble_size=doc["ensemble_size"],
                write_quorum=doc["write_quorum"],
                ack_quorum=doc["ack_quorum"],
                state=LedgerState(doc["state"]),
                last_entry_id=doc["last_entry_id"],
                length=doc["length"],
                digest_type=doc["digest_type"],
                password_digest=base64.b64decode(doc["password_digest"], validate=True),
                key_check=base64.b64decode(doc.get("key_verifier") or doc.get("key_check", ""),
                                           validate=True),
                ctime_ms=doc["ctime_ms"],
                custom=doc["custom"],
                fragments=list(doc["fragments"]),
                features=list(doc.get("features", [])) if version == FEATURES_FORMAT_VERSION else [],
                merkle_root=doc.get("merkle_root", ""),
                tree_size=doc.get("tree_size", 0),
            )
        except KeyError as e:
            raise CorruptMetadataError(f"{what}: metadata record lacks field {e}") from None
        except (ValueError, TypeError, binascii.Error) as e:
            raise CorruptMetadataError(f"{what}: invalid metadata record: {e}") from None
