"""Self-healing: the auditor that marks ledgers which lost a copy, and the replication workers
that copy the missing fragments to other bookies and repoint the metadata (docs/autorecovery.md).

``rules`` holds every decision as plain code; ``auditor``, ``replicator``, ``copier`` and
``worker`` drive it with a metadata store and bookie sockets.  It uses the client (recovery of
open ledgers), so it sits in the tools layer, above ``client/``.
"""
