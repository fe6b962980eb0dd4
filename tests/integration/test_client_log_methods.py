"""Logs through the client objects' own methods (the issue's API style), sync and asyncio."""

import asyncio

from bookie.client import AsyncBookKeeper


def test_log_methods_on_the_client(bookkeeper):
    log = bookkeeper.open_log("methods", ensemble_size=3, write_quorum=2, ack_quorum=2,
                              digest="crc32c", password=b"pw")
    positions = [log.append(b"a%d" % i) for i in range(5)]
    log.roll()
    positions.append(log.append(b"after roll"))
    log.close()
    assert "methods" in bookkeeper.list_logs()
    got = [(r.position, r.data) for r in bookkeeper.read_log("methods", digest="crc32c", password=b"pw")]
    assert got == list(zip(positions, [b"a0", b"a1", b"a2", b"a3", b"a4", b"after roll"]))
    bookkeeper.delete_log("methods")
    assert "methods" not in bookkeeper.list_logs()


def test_log_methods_on_the_async_client(bookkeeper_ensemble):
    async def main():
        async with AsyncBookKeeper(bookkeeper_ensemble.metadata_uri) as abk:
            log = await abk.open_log("async-methods", 3, 2, 2, digest="crc32c", password=b"pw")
            await log.append(b"x")
            await log.append(b"y")
            await log.close()
            got = [r.data async for r in abk.read_log("async-methods", digest="crc32c", password=b"pw")]
            assert got == [b"x", b"y"]
            assert "async-methods" in await abk.list_logs()
            await abk.delete_log("async-methods")

    asyncio.run(main())
