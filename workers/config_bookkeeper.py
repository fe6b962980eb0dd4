"""BookKeeper's bookie keys that mean nothing here, and what a configuration file says twice.

A stock ``bk_server.conf`` sets a hundred keys; many name a part this bookie does not have
(Netty's threads and buffers, the JVM's allocator, RocksDB and the other ledger storages, the
stats providers, ZooKeeper ledger-manager layouts).  They are accepted and ignored, named on one
line apart from the unknown keys, so that a real typo (``journalDirectoy``) stands out instead of
drowning among them (the client's configuration does the same: client/config.py's
``IGNORED_KEYS``).  Keys whose absence would weaken something asked for (TLS, authentication
providers) are deliberately not here: they stay unknown keys, each warned about.

A key set twice in one file is taken from its later line, as BookKeeper's properties reader
does, and named in a warning (``duplicate_keys``): the earlier value was probably meant.
"""

from __future__ import annotations

from bookie.properties import property_lines

IGNORED_SERVER_KEYS = frozenset({
    # threads, sockets, buffers and allocators of the JVM server
    "numHighPriorityWorkerThreads", "numJournalCallbackThreads",
    "readWorkerThreadsThrottlingEnabled", "enableBusyWait",
    "serverTcpNoDelay", "serverSockKeepalive", "serverSockLinger", "serverNumIOThreads",
    "serverWriteBufferLowWaterMark", "serverWriteBufferHighWaterMark",
    "byteBufAllocatorSizeInitial", "byteBufAllocatorSizeMin", "byteBufAllocatorSizeMax",
    "allocatorPoolingPolicy", "allocatorPoolingConcurrency", "allocatorOutOfMemoryPolicy",
    "allocatorLeakDetectionPolicy", "readBufferSizeBytes", "writeBufferSizeBytes",
    "enableLocalTransport", "disableServerSocketBind", "allowLoopback",
    "bookieDeathWatchInterval", "enableTaskExecutionStats", "enableStatistics",
    # other ledger storages and their caches
    "ledgerStorageClass", "sortedLedgerStorageEnabled", "skipListSizeLimit",
    "skipListArenaChunkSize", "skipListArenaMaxAllocSize", "openFileLimit", "pageSize",
    "pageLimit", "fileInfoCacheInitialCapacity", "fileInfoMaxIdleTime",
    "fileInfoFormatVersionToWrite", "flushEntrylogBytes", "entryLogPerLedgerEnabled", "journalRemoveFromPageCache", "journalFormatVersionToWrite",
    "journalAlignmentSize", "journalQueueSize", "journalMaxMemorySizeMb",
    "dbStorage_writeCacheMaxSizeMb", "dbStorage_readAheadCacheMaxSizeMb",
    "dbStorage_readAheadCacheBatchSize", "dbStorage_rocksDB_blockCacheSize",
    "dbStorage_rocksDB_writeBufferSizeMB", "dbStorage_rocksDB_sstSizeInMB",
    "dbStorage_rocksDB_blockSize", "dbStorage_rocksDB_bloomFilterBitsPerKey",
    "dbStorage_rocksDB_numLevels", "dbStorage_rocksDB_numFilesInLevel0",
    "dbStorage_rocksDB_maxSizeInLevel1MB", "compactionMaxOutstandingRequests",
    "compactionRate", "useTransactionalCompaction",
    # stats providers, the JVM's HTTP server, plug-in components
    "statsProviderClass", "prometheusStatsHttpAddress", 
    "prometheusStatsLatencyRolloverSeconds", "codahaleStatsPrefix", "httpServerClass",
    "extraServerComponents", "ignoreExtraServerComponentsStartupFailures",
    # ZooKeeper ledger-manager layouts (the metadata store keeps its own)
    "ledgerManagerType", "ledgerManagerFactoryClass", "allowShadedLedgerManagerFactoryClass",
    "zkRetryBackoffStartMs", "zkRetryBackoffMaxMs", "zkRequestRateLimit",
})


def ignored_keys_warning(names: list[str]) -> str:
    """The one line naming BookKeeper's keys that were given and mean nothing here."""
    return (f"{len(names)} BookKeeper key(s) with no meaning in this bookie accepted and "
            f"ignored: {', '.join(sorted(names))}")


def duplicate_keys(text: str, source: str) -> list[str]:
    """A warning for each key set on more than one line of ``text`` (Java-properties text; the
    later line wins, as ``bookie.properties.parse_properties`` reads it)."""
    lines: dict[str, list[int]] = {}
    for lineno, key, _ in property_lines(text, source):
        lines.setdefault(key, []).append(lineno)
    return [f"{source}: {key} is set {len(at)} times (lines {', '.join(map(str, at))}): the "
            f"last one is used" for key, at in lines.items() if len(at) > 1]
