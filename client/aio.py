"""asyncio face of the client: the same core, awaited through ``asyncio.wrap_future``.

    async with AsyncBookKeeper("lmdb:///var/lib/bookie/metadata") as bk:
        lh = await bk.create_ledger(3, 2, 2, digest="crc32c", password=b"pw")
        entry_id = await lh.add(b"payload")
        await lh.close()
        rh = await bk.open_ledger(lh.ledger_id, digest="crc32c", password=b"pw")
        async for entry in rh.read_entries(0, rh.last_add_confirmed):
            ...

No call blocks the event loop: metadata steps run on the client's thread pool, bookie traffic
on its I/O thread.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from bookie.client.client import READ_CHUNK, BookKeeper, LedgerHandle
from bookie.client.digest import LedgerEntry
from bookie.client.errors import BKTimeoutError


class AsyncBookKeeper:
    """asyncio client; arguments as for ``BookKeeper``.  Use ``async with`` or ``await
    AsyncBookKeeper.connect(...)``, and ``await close()``."""

    def __init__(self, metadata, config=None, **keys):
        self._args = (metadata, config, keys)
        self._bk: BookKeeper | None = None

    @classmethod
    async def connect(cls, metadata, config=None, **keys) -> "AsyncBookKeeper":
        self = cls(metadata, config, **keys)
        await self._open()
        return self

    async def _open(self) -> None:
        metadata, config, keys = self._args
        self._bk = await asyncio.to_thread(BookKeeper, metadata, config, **keys)

    async def __aenter__(self) -> "AsyncBookKeeper":
        if self._bk is None:
            await self._open()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self._bk is not None:
            await asyncio.to_thread(self._bk.close)

    @property
    def sync(self) -> BookKeeper:
        """The synchronous client underneath."""
        return self._bk

    async def create_ledger(self, *args, **kwargs) -> "AsyncLedgerHandle":
        return AsyncLedgerHandle(await asyncio.wrap_future(
            self._bk.create_ledger_async(*args, **kwargs)))

    async def open_ledger(self, *args, **kwargs) -> "AsyncLedgerHandle":
        return AsyncLedgerHandle(await asyncio.wrap_future(
            self._bk.open_ledger_async(*args, **kwargs)))

    async def delete_ledger(self, ledger_id: int) -> None:
        await asyncio.wrap_future(self._bk.delete_ledger_async(ledger_id))


class AsyncLedgerHandle:
    """asyncio view of a ``LedgerHandle`` (``sync`` is the handle itself)."""

    def __init__(self, handle: LedgerHandle):
        self.sync = handle
        self.ledger_id = handle.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self.sync.last_add_confirmed

    @property
    def metadata(self):
        return self.sync.metadata

    @property
    def is_closed(self) -> bool:
        return self.sync.is_closed

    async def add(self, data) -> int:
        """Add one entry; its entry id once confirmed (entries confirm in order)."""
        return await asyncio.wrap_future(await self._submit([data]))

    async def add_many(self, payloads) -> list[int]:
        futures = self.sync.add_entries_async(payloads) if self._room(len(payloads)) else \
            await asyncio.to_thread(self.sync.add_entries_async, payloads)
        return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))

    async def _submit(self, payloads):
        if self._room(len(payloads)):
            return self.sync.add_entries_async(payloads)[0]
        # throttled: wait for room on a worker thread, not on the event loop
        return (await asyncio.to_thread(self.sync.add_entries_async, payloads))[0]

    def _room(self, n: int) -> bool:
        # BoundedSemaphore._value is the free room; a racy peek is fine, the acquire decides.
        return self.sync._bk._throttle._value >= n

    async def close(self) -> None:
        await asyncio.wrap_future(self.sync.close_async())

    async def read_entries(self, first: int, last: int) -> AsyncIterator[LedgerEntry]:
        """Async iterator over entries ``first`` .. ``last``, fetched in chunks."""
        self.sync._check_range(first, last)
        lo = first
        while lo <= last:
            hi = min(last, lo + READ_CHUNK - 1)
            for entry in await asyncio.wrap_future(self.sync._read_op(lo, hi)):
                yield entry
            lo = hi + 1

    async def read_entry(self, entry_id: int) -> LedgerEntry:
        return (await asyncio.wrap_future(self.sync.read_entries_async(entry_id, entry_id)))[0]

    async def read_last_add_confirmed(self) -> int:
        return await asyncio.to_thread(self.sync.read_last_add_confirmed)

    async def wait_for_last_add_confirmed(self, after_entry_id: int, timeout_s: float = 10.0) -> int:
        try:
            return await asyncio.to_thread(self.sync.wait_for_last_add_confirmed,
                                           after_entry_id, timeout_s)
        except BKTimeoutError:
            return self.sync.last_add_confirmed
