"""Entry payloads that look like journal groups: what a client could send, knowing the published
journal format but never a journal file (so never a file's salt)."""

from __future__ import annotations

import struct
import zlib


def old_format_group(start: int, body: bytes) -> bytes:
    """A group in journal format 1 (24-byte header, no salt)."""
    head = struct.pack("<4sIQI", b"JGRP", len(body), start, zlib.crc32(body))
    return head + struct.pack("<I", zlib.crc32(head)) + body


def guessed_salt_group(start: int, body: bytes, salt: int) -> bytes:
    """A group in journal format 2 with a salt the client guessed."""
    head = struct.pack("<4sIQQI", b"JGRP", len(body), start, salt, zlib.crc32(body))
    return head + struct.pack("<I", zlib.crc32(head)) + body


def adversarial_payload(expect: int, body: bytes = b"\x07" * 8) -> bytes:
    """Fake groups back to back and between zeros, claiming logical offsets a client could guess
    (0, ``expect`` = the start of the group carrying them, just past it, far ahead), so that a
    fake is whole before almost every byte at which that group can be torn."""
    out = b""
    for i, start in enumerate([0, expect, expect + 1, expect + 300, 1 << 40]):
        out += old_format_group(start, body)
        out += b"\0" * 32
        out += guessed_salt_group(start, body, salt=0)
        out += guessed_salt_group(start, body, salt=i + 1)
        out += old_format_group(start, body)[:5]  # a fake cut short, then a whole one
        out += old_format_group(start + 7, body)
    return out
