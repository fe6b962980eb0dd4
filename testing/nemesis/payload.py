"""Self-describing entry payloads: every byte a client writes can be traced to one add.

A payload is ``b"<writer>:<seq>|"`` followed by a body derived from that header alone, so the
checker can regenerate the exact bytes any writer meant to write and tell "this entry is add
number ``seq`` of ``writer``" from "these bytes were never written by anyone" (a torn, mixed or
invented entry).  Lengths vary from 8 to 255 body bytes so that entries of different sizes
share journal groups, entry logs and read answers.
"""

from __future__ import annotations

import hashlib
import zlib


def make_payload(writer: str, seq: int) -> bytes:
    """The exact bytes add number ``seq`` of ``writer`` carries (a pure function of both)."""
    header = f"{writer}:{seq}|".encode()
    size_bytes = 8 + zlib.crc32(header) % 248
    block = hashlib.sha256(header).digest()
    body = (block * (size_bytes // len(block) + 1))[:size_bytes]
    return header + body


def parse_payload(data: bytes) -> tuple[str, int] | None:
    """``(writer, seq)`` if ``data`` is exactly a payload ``make_payload`` produces, else None.

    Never raises: any bytes (truncated, foreign, corrupted) give None."""
    try:
        bar = data.index(b"|")
        writer, _, seq_text = data[:bar].decode("ascii").rpartition(":")
        seq = int(seq_text)
    except (ValueError, UnicodeDecodeError):
        return None
    if not writer or seq < 0 or make_payload(writer, seq) != bytes(data):
        return None
    return writer, seq


def fingerprint(data: bytes) -> str:
    """A short digest of an entry's bytes, as histories record what a reader saw."""
    return hashlib.sha1(bytes(data)).hexdigest()[:16]
