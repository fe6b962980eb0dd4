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

from bookie.client.client import BookKeeper
from bookie.client.digest import LedgerEntry
from bookie.client.errors import BKTimeoutError
from bookie.client.handle import READ_CHUNK, check_entry_range
from bookie.client.handle_api import LedgerHandle
from bookie.client.log import open_log_async, read_log_async


class AsyncBookKeeper:
    """asyncio client; arguments as for ``BookKeeper``.  Use ``async with`` or ``await
    AsyncBookKeeper.connect(...)``, and ``await close()``."""

    def __init__(self, metadata=None, config=None, **keys):
        self._args = (metadata, config, keys)
        self._bk: BookKeeper | None = None

    @classmethod
    async def connect(cls, metadata=None, config=None, **keys) -> "AsyncBookKeeper":
        self = cls(metadata, config, **keys)
        await self._open()
        return self

    @classmethod
    async def from_conf(cls, path: str, metadata=None, **keys) -> "AsyncBookKeeper":
        """``BookKeeper.from_conf`` (the file read and the client opened off the loop)."""
        self = cls(metadata)
        self._bk = await asyncio.to_thread(BookKeeper.from_conf, path, metadata, **keys)
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
            self._bk.create_ledger_async(*args, **kwargs)), self._bk)

    async def create_ledger_adv(self, *args, **kwargs) -> "AsyncLedgerHandle":
        """``BookKeeper.create_ledger_adv``: the handle's ``add_entry(entry_id, data)``."""
        return AsyncLedgerHandle(await asyncio.wrap_future(
            self._bk.create_ledger_adv_async(*args, **kwargs)), self._bk)

    async def open_ledger(self, *args, **kwargs) -> "AsyncLedgerHandle":
        return AsyncLedgerHandle(await asyncio.wrap_future(
            self._bk.open_ledger_async(*args, **kwargs)), self._bk)

    async def delete_ledger(self, ledger_id: int) -> None:
        await asyncio.wrap_future(self._bk.delete_ledger_async(ledger_id))

    # -- logs (see bookie.client.log) ------------------------------------------------------------

    async def open_log(self, name: str, *args, **kwargs):
        return await open_log_async(self, name, *args, **kwargs)

    def read_log(self, name: str, *args, **kwargs):
        """``async for record in abk.read_log(name): ...``"""
        return read_log_async(self, name, *args, **kwargs)

    async def list_logs(self) -> list[str]:
        return await asyncio.to_thread(self._bk.list_logs)

    async def delete_log(self, name: str) -> None:
        await asyncio.to_thread(self._bk.delete_log, name)


class AsyncLedgerHandle:
    """asyncio view of a ``LedgerHandle`` (``sync`` is the handle itself; ``bookkeeper`` the
    client it belongs to, whose throttle decides whether an add may block)."""

    def __init__(self, handle: LedgerHandle, bookkeeper: BookKeeper | None = None):
        self.sync = handle
        self.ledger_id = handle.ledger_id
        self._bk = bookkeeper

    @property
    def last_add_confirmed(self) -> int:
        return self.sync.last_add_confirmed

    @property
    def metadata(self):
        return self.sync.metadata

    @property
    def is_closed(self) -> bool:
        return self.sync.is_closed

    @property
    def last_add_pushed(self) -> int:
        return self.sync.last_add_pushed

    async def add_entry(self, entry_id: int, data) -> int:
        """A ``create_ledger_adv`` ledger's add: ``data`` as entry ``entry_id`` (ids out of
        order within the window); its id once it and every earlier entry are confirmed."""
        return await asyncio.wrap_future(
            await self._hand_over(1, lambda a: self.sync.add_entry_async(*a), (entry_id, data)))

    async def add(self, data) -> int:
        """Add one entry; its entry id once confirmed (entries confirm in order)."""
        return await asyncio.wrap_future(await self._hand_over(1, self.sync.add_entry_async, data))

    async def add_range(self, payloads) -> range:
        """Add several entries with one completion: the ``range`` of their consecutive entry
        ids, once the last is confirmed (see ``LedgerHandle.add_range_async``)."""
        payloads = list(payloads)
        return await asyncio.wrap_future(
            await self._hand_over(len(payloads), self.sync.add_range_async, payloads))

    async def add_many(self, payloads) -> list[int]:
        """Add several entries; their entry ids (a list) once all are confirmed."""
        return list(await self.add_range(payloads))

    async def _hand_over(self, n: int, call, arg):
        """``call(arg)`` at once when the throttle has room for ``n`` adds (a racy peek; the
        acquire decides), else on a worker thread so the event loop never blocks."""
        if self._bk is not None and self._bk.throttle_available >= n:
            return call(arg)
        return await asyncio.to_thread(call, arg)

    async def close(self) -> None:
        await asyncio.wrap_future(self.sync.close_async())

    async def read_entries(self, first: int, last: int) -> AsyncIterator[LedgerEntry]:
        """Async iterator over entries ``first`` .. ``last``, fetched in chunks."""
        check_entry_range(self.ledger_id, self.sync.last_add_confirmed, first, last)
        lo = first
        while lo <= last:
            hi = min(last, lo + READ_CHUNK - 1)
            for entry in await asyncio.wrap_future(self.sync.read_entries_async(lo, hi)):
                yield entry
            lo = hi + 1

    async def read_entry(self, entry_id: int) -> LedgerEntry:
        return (await asyncio.wrap_future(self.sync.read_entries_async(entry_id, entry_id)))[0]

    async def force(self) -> int:
        """``LedgerHandle.force``: every entry added so far acknowledged, and (deferred sync)
        the LAC advanced over them; the last entry id covered."""
        return await asyncio.wrap_future(self.sync.force_async())

    async def read_unconfirmed_entries(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first`` .. ``last``, past the LAC too (``read_unconfirmed_entries``)."""
        return await asyncio.wrap_future(self.sync.read_unconfirmed_entries_async(first, last))

    async def try_read_last_add_confirmed(self) -> int:
        """The first bookie's LAC, no quorum waited for (``try_read_last_add_confirmed``)."""
        return await asyncio.wrap_future(self.sync.try_read_last_add_confirmed_async())

    async def read_last_add_confirmed(self) -> int:
        return await asyncio.to_thread(self.sync.read_last_add_confirmed)

    async def wait_for_last_add_confirmed(self, after_entry_id: int, timeout_s: float = 10.0) -> int:
        try:
            return await asyncio.to_thread(self.sync.wait_for_last_add_confirmed,
                                           after_entry_id, timeout_s)
        except BKTimeoutError:
            return self.sync.last_add_confirmed
