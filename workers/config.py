"""Bookie configuration: BookKeeper's key names, typed, validated, documented in one table.

A configuration file is Java-properties style, as BookKeeper's ``bk_server.conf``: one
``key=value`` per line, ``#`` or ``!`` starts a comment, blank lines are ignored.  ``--set
key=value`` on the command line overrides the file.  Every key has a type, a default, a check
and a meaning (``KEYS`` below); docs/configuration.md and ``bookie run --help`` are generated
from that table, so they cannot drift from the code.

Errors: a wrong type, an impossible value, a missing directory or a file where a directory
belongs raise ``ConfigError`` whose message is one line naming the key.  An unknown key is
returned as a warning, not an error, naming the nearest known key when there is one ("did you
mean"): a misspelt key silently falling back to its default is how a journal ends up in /tmp.

The metadata store is ``metadataServiceUri``, or, as older BookKeeper configurations say it,
``zkServers`` (hosts separated by ``,`` or ``;``) under ``zkLedgersRootPath``; the ``metadata_uri``
accessor resolves the two into one URI (``metadataServiceUri`` wins when both are set, as in
BookKeeper).  BookKeeper's own URIs separate ZooKeeper hosts with ``;``
(``zk+hierarchical://zk1:2181;zk2:2181/ledgers``); that is accepted and normalised to ``,``.

Inside the code a key is read through its typed accessor, named in the table (``attr``) with
the unit in the name: the table's ``unit`` says what the operator writes, and the accessor
converts once, here, to seconds (``*_s``) or bytes (``*_bytes``): ``conf.flush_interval_s``,
``conf.ring_size_bytes``.  ``conf.value(name)`` gives a key's value as written, by its
BookKeeper name, for code that lists keys (``to_properties``, the admin API).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Any, Callable

from bookie import properties
from bookie.metadata.access import access_problem, owner_name
from bookie.metadata.bookie_ids import bookie_id_problem
from bookie.metadata.errors import AccessDeniedError, InvalidUriError
from bookie.properties import (PropertiesError, check_location, format_bool, normalise_uri,  # noqa: F401
                               parse_value, resolve_metadata_uri, zk_hosts)
from bookie.metadata.uri import SCHEMES_HELP, known_scheme, parse_uri
from bookie.workers.interfaces import InterfaceError, resolve_listening_interface
from bookie.workers.local_sockets import roles_problem
from bookie.workers.config_bookkeeper import IGNORED_SERVER_KEYS, duplicate_keys, ignored_keys_warning
from bookie.metadata.secret_file import read_private_file


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key."""


# What an operator writes -> the factor to the accessor's unit (seconds or bytes).
UNIT_SCALE = {"": None, "us": 1e-6, "ms": 0.001, "s": 1.0, "bytes": 1, "KB": 1 << 10, "MB": 1 << 20}
ACCESSOR_SUFFIX = {"us": "_s", "ms": "_s", "s": "_s", "bytes": "_bytes", "KB": "_bytes", "MB": "_bytes"}


@dataclasses.dataclass(frozen=True)
class Key:
    name: str
    type: str  # "int", "float", "bool", "str", "dirs", "dir"
    default: Any
    meaning: str
    check: Callable[[Any], str | None] | None = None  # returns a complaint or None
    unit: str = ""  # what the operator writes: "", "us", "ms", "s", "bytes", "KB", "MB"
    attr: str = ""  # the typed accessor on BookieConfig, unit in its name

    def __post_init__(self):
        if self.unit not in UNIT_SCALE:
            raise ValueError(f"{self.name}: unknown unit {self.unit!r}")
        if self.unit and not self.attr.endswith(ACCESSOR_SUFFIX[self.unit]):
            raise ValueError(f"{self.name}: accessor {self.attr!r} must end in "
                             f"{ACCESSOR_SUFFIX[self.unit]} (unit {self.unit})")

    def accessor_value(self, value: Any) -> Any:
        """``value`` as written (this key's unit) in the accessor's unit."""
        scale = UNIT_SCALE[self.unit]
        return value if scale is None else value * scale


def _range(lo=None, hi=None):
    def check(v):
        if lo is not None and v < lo:
            return f"must be >= {lo}"
        if hi is not None and v > hi:
            return f"must be <= {hi}"
        return None
    return check


def _port(v):
    return None if 0 <= v <= 65535 else "must be a TCP port (0..65535; 0 picks a free one)"


def _uri(v):
    if v == "":
        return None
    if not known_scheme(v):
        return f"must be {SCHEMES_HELP}"
    return None


def _bookie_id(v):
    return bookie_id_problem(v) if v else None


def _location(v):
    return check_location(v) if v else None


# ensemblePlacementPolicy's spellings (client.config.PLACEMENT_POLICIES names the same; a test
# keeps them equal: the bookie side does not import the client)
PLACEMENT_SPELLINGS = ("default", "rackaware", "regionaware",
                       "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy",
                       "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
                       "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy")


def _placement(v):
    return None if v in PLACEMENT_SPELLINGS else f"must be one of {', '.join(PLACEMENT_SPELLINGS[:3])}"


def _zk_root(v):
    return None if v.startswith("/") and v.strip("/") else "must be an absolute ZooKeeper path such as /ledgers"


KEYS: tuple[Key, ...] = (
    # -- network -------------------------------------------------------------------------------
    Key("bookiePort", "int", 3181, "Port of the add socket; the read socket listens on bookiePort+1.", _port, attr="bookie_port"),
    Key("listeningInterface", "str", "127.0.0.1", "Address both sockets bind to: an address of this host, 0.0.0.0, or an interface name (eth0, lo), which stands for its address.", attr="listening_interface"),
    Key("bookieLocation", "str", "", "Where the bookie is, /REGION/RACK (BookKeeper's rack names): published in its registration, so clients with ensemblePlacementPolicy=rackaware or regionaware spread every write quorum over racks or regions (docs/client.md). Empty: /default-region/default-rack.", _location, attr="bookie_location"),
    Key("advertisedAddress", "str", "", "Host the bookie registers under (default: listeningInterface).", attr="advertised_address"),
    Key("bookieId", "str", "", "A stable id for the bookie (BookKeeper's BP-41), e.g. bk-1: it registers under it, its cookie records it and ledger ensembles name it, so it keeps serving its data when its host or port changes (clients find its address in its registration). ASCII letters, digits, ':', '-', '_', '.'; not 'readonly', not shaped host:port unless it is the bookie's own address. Empty: the id is the address advertisedAddress:bookiePort.", _bookie_id, attr="configured_bookie_id"),
    Key("nettyMaxFrameSizeBytes", "int", 5 * 1024 * 1024, "Largest entry accepted, in bytes; larger adds get BAD_REQUEST.", _range(64, 1 << 30), unit="bytes", attr="max_entry_size_bytes"),
    Key("maxPendingAddRequestsPerThread", "int", 100_000, "Adds waiting for the journal before new ones get TOO_MANY_REQUESTS.", _range(1), attr="max_pending_adds"),
    # -- security: what one client may cost a worker (docs/security.md) ------------------------
    Key("maxAddMessageSizeBytes", "int", 0, "Largest frame an add-socket message may carry (a batch's data frame; ZMQ_MAXMSGSIZE): a larger one drops its connection before it is buffered. 0: the larger of 16 MiB and nettyMaxFrameSizeBytes + 1 MiB. Clients' addBatchMaxBytes plus one entry must fit.", _range(0, 1 << 31), unit="bytes", attr="configured_max_add_message_size_bytes"),
    Key("ledgerStorageQuotaBytes", "int", 0, "Bytes this bookie stores at most for the ledgers of one writer identity: an enrolled CURVE key (curveClientKeysDirectory), or without enrolment the ledger's owner (so each ledger). An add past it gets OVER_QUOTA, a RECOVERY_ADD too; the recovery principal's adds (the recovery credential, an admin key), recovery adds to a ledger held fenced, fences and WRITE_LACs never do. A deleted ledger's bytes count again for its writer once the GC has deleted it. 0: no quota.", _range(0), unit="bytes", attr="ledger_storage_quota_bytes"),
    Key("maxPendingReadRequestsPerThread", "int", 10_000, "Long polls parked plus fences waiting in the read worker before new ones get TOO_MANY_REQUESTS.", _range(1, 10_000_000), attr="max_pending_reads"),
    Key("maxClientConnections", "int", 4096, "TCP connections each client socket (add, read) keeps; one more is shut down as soon as it is accepted. A writing client holds two on the add socket (its adds, and its LAC notices and explicit LACs), a reading client one on the read socket. Keep it well under the open-files limit (the unit's LimitNOFILE).", _range(1, 1_000_000), attr="max_client_connections"),
    Key("maxReadReplyBytesPerConnection", "int", 64 * 1024 * 1024, "Reply bytes a client connection may leave unread in the read worker; its reads past that get TOO_MANY_REQUESTS until it reads.", _range(8 * 1024 * 1024, 1 << 40), unit="bytes", attr="max_read_reply_bytes"),
    Key("clientHeartbeatIntervalMs", "int", 10_000, "ZMTP heartbeat to every client connection (ZMQ_HEARTBEAT_IVL); a connection silent for 3 intervals, or that has not finished its handshake in one, is closed.", _range(100, 600_000), unit="ms", attr="client_heartbeat_interval_s"),
    Key("curveSecretKeyFile", "str", "", "The bookie's CURVE key (NAME.key_secret from `bookie shell genkey`): the key it proves to clients and publishes in its registration and cookie; needs curveClientKeysDirectory. Empty: the bookie's own key, made at its first start in JOURNAL_DIR/current/bookie.key_secret (0600). Either way both client sockets are CURVE; a key change is `bookie shell rotatekey` (docs/security.md).", attr="curve_secret_key_file"),
    Key("curveClientKeysDirectory", "str", "", "Enrolled client public keys, one subdirectory per role: reader/, writer/, admin/, each holding NAME.key files (NAME is the principal). Re-read while the bookie runs: a key added or removed takes effect within 1 s (docs/security.md). Empty: any client key is admitted (allowed only on loopback, or with allowInsecureClients).", attr="curve_client_keys_dir"),
    Key("curveServerKeys", "str", "", "Public keys of the other bookies for this bookie's autorecovery, pinned over the key a registration publishes: one NAME.key for all (every bookie must then have that key), or a directory of HOST_PORT.key files. A bookie with no pin gets its registration's key. Its client key is the bookie's own (curveSecretKeyFile): enrol each bookie's public key as admin at the others.", attr="curve_server_keys"),
    Key("localSocketDirectory", "str", "", "Directory of the bookie's local sockets (ZeroMQ ipc://, PORT.add and PORT.read) for clients on this host, who connect there instead of over TCP and are known by their uid (docs/security.md, \"Local sockets\"). It must be the bookie user's, not a link, writable by nobody else, every parent searchable by all; the socket paths must fit 107 bytes. Empty: /run/bookie, and where that cannot be used one warning and TCP only; set explicitly, an unusable directory refuses the start. none: no local sockets.", attr="local_socket_dir"),
    Key("localClientRoles", "str", "", "Roles of local clients by uid: UID_OR_USER:ROLE,... (roles reader, writer, admin as for enrolled keys). Empty: every local uid is admitted as a TCP client without an enrolled key is (everything, unless curveClientKeysDirectory is set: then no local uid is admitted and clients use TCP with their key). Set: a uid not listed is refused.", roles_problem, attr="local_client_roles"),
    Key("allowInsecureClients", "bool", False, "Let a bookie without curveClientKeysDirectory listen beyond loopback: anyone who reaches its ports reads and writes every ledger (connections are still encrypted, and the bookie still proves its key).", attr="allow_insecure_clients"),
    # -- journal -------------------------------------------------------------------------------
    Key("journalDirectory", "dir", "/var/lib/bookie/journal", "Directory of the write-ahead journal, ideally on its own disk (the one-journal form of journalDirectories).", attr="configured_journal_dir"),
    Key("journalDirectories", "dirs", "", "Comma-separated journal directories, one journal worker (and ring) each, ideally one disk each; a ledger's records all go to journal ledger_id % count (docs/architecture.md, \"Several journals\"). Empty: journalDirectory alone; set, it wins over journalDirectory.", attr="configured_journal_dirs"),
    Key("journalMaxSizeMB", "int", 2048, "A journal file is rolled when it reaches this size (MB).", _range(1), unit="MB", attr="journal_max_size_bytes"),
    Key("journalMaxBackups", "int", 5, "Old journal files (all older than the last checkpoint) kept after rolling.", _range(0), attr="journal_max_backups"),
    Key("journalPreAllocSizeMB", "int", 16, "Journal files grow by this much at a time (MB): written as zeros while groups are small (a group's fdatasync then commits no extent change), fallocated while they are large (zeros would double the bytes written).", _range(1, 1024), unit="MB", attr="journal_prealloc_size_bytes"),
    Key("journalWriteBufferSizeKB", "int", 64, "Accepted for BookKeeper compatibility; no effect: groups are written straight from shared memory in one writev (KB).", _range(1), unit="KB", attr="journal_write_buffer_size_bytes"),
    Key("journalAdaptiveGroupWrites", "bool", True, "Group journal force-writes (group commit): one fdatasync for many adds.", attr="journal_adaptive_group_writes"),
    Key("journalMaxGroupWaitMSec", "int", 2, "Longest an add waits to share an fdatasync with others (ms).", _range(0, 10_000), unit="ms", attr="journal_max_group_wait_s"),
    Key("journalBufferedWritesThreshold", "int", 512 * 1024, "A group is forced to disk once it holds this many bytes.", _range(1), unit="bytes", attr="journal_buffered_writes_threshold_bytes"),
    Key("journalFlushWhenQueueEmpty", "bool", True, "Force-write as soon as no more adds are queued, without waiting for the group wait.", attr="journal_flush_when_queue_empty"),
    Key("journalRingSizeMB", "int", 64, "Size of the shared-memory ring between the add and journal workers (MB).", _range(1, 4096), unit="MB", attr="ring_size_bytes"),
    # -- ledger storage ------------------------------------------------------------------------
    Key("ledgerDirectories", "dirs", "/var/lib/bookie/ledgers", "Comma-separated directories for entry logs.", attr="ledger_dirs"),
    Key("indexDirectories", "dirs", "", "Directories for the LMDB entry index (default: ledgerDirectories).", attr="configured_index_dirs"),
    Key("logSizeLimit", "int", 1024 * 1024 * 1024, "An entry log is rolled when it reaches this size (bytes).", _range(4096, (1 << 32) - 1), unit="bytes", attr="log_size_limit_bytes"),
    Key("entryLogFilePreallocationEnabled", "bool", True, "Preallocate the next entry log file's space when one is created.", attr="entry_log_preallocation"),
    Key("flushInterval", "int", 10000, "Interval between checkpoints: flush entry logs, sync the index, persist LastLogMark (ms). BookKeeper's default; a shorter interval shortens replay after a crash and keeps fewer journal files, at the price of more syncs of the ledger disk.", _range(1), unit="ms", attr="flush_interval_s"),
    Key("indexMapSizeMB", "int", 256 * 1024, "Largest size the LMDB index may grow to (MB); the file is sparse, so a large value costs only address space (about 60 bytes per entry).", _range(16), unit="MB", attr="index_map_size_bytes"),
    Key("dbStorage_readAheadCacheMaxSizeMb", "int", 64, "Read-ahead cache of the read worker (storage/read_ahead.py): bytes of entry logs read past a run of entries that missed it, kept for the reader's next request, at most this much (MB; 0: off). Counts toward the read worker's workerMemoryLimitMB: set, it must be at most half of it; unset, it is at most a quarter of it (BookKeeper's default: a quarter of its direct memory).", _range(0, 1 << 20), unit="MB", attr="read_ahead_cache_max_size_bytes"),
    Key("dbStorage_readAheadCacheBatchSize", "int", 2048, "Entries' worth of bytes (at the run's mean entry size, at most 1 MiB) the read worker reads ahead past a run that missed its cache, never past the entries its index holds. BookKeeper's default, 100, is for reads of one entry each; a read here asks for up to 2048 (the client's read chunk), so the default reads ahead one such read.", _range(1, 1 << 20), attr="read_ahead_cache_batch_size"),
    # -- workers -------------------------------------------------------------------------------
    Key("numAddWorkerThreads", "int", 1, "Add workers per ledger directory (this release runs 1).", _range(1, 1), attr="num_add_workers"),
    Key("numReadWorkerThreads", "int", 1, "Read workers (this release runs 1).", _range(1, 1), attr="num_read_workers"),
    Key("idleSpinMicros", "int", 500, "While an answer waits on the journal, the add worker looks again for this long before it sleeps in poll (a tenth of it back to back, the rest yielding its CPU between looks; none while the host's 1-minute load average is at its core count or above, and it sleeps at once when it finds it lost its CPU to another thread): an answer due is then sent without waking a process, which on an idle host costs more than the work (a lone add's durable-to-answer step 64 -> 10 us). Spends up to this much CPU per wait; 0: sleep at once (a host whose other work needs the CPU). (us)", _range(0, 100_000), unit="us", attr="idle_spin_s"),
    Key("addTraceDirectory", "str", "", "When set, the add and journal workers append CLOCK_MONOTONIC timestamps of every answered add and written group to add.trace and journal.trace here (bookie bench bookie --trace; costs a write per add: for measurements only). Empty: off.", attr="add_trace_dir"),
    # -- garbage collection --------------------------------------------------------------------
    Key("gcWaitTime", "int", 60_000, "Interval between garbage collections (ms).", _range(100), unit="ms", attr="gc_wait_s"),
    Key("gcOverreplicatedLedgerWaitTime", "int", 86_400_000, "A bookie drops its copies of a closed ledger whose metadata names it in no fragment (it came back after it was healed around) once that held, with the same copies, for this long; looked for once per this interval (ms; 0: never).", _range(0), unit="ms", attr="gc_overreplicated_wait_s"),
    Key("minorCompactionThreshold", "float", 0.2, "A minor compaction rewrites entry logs whose live share is under this fraction (0 or less: no minor compaction).", _range(hi=1.0), attr="minor_compaction_threshold"),
    Key("minorCompactionInterval", "int", 3600, "Interval between minor compactions (s; 0 or less: none).", unit="s", attr="minor_compaction_interval_s"),
    Key("majorCompactionThreshold", "float", 0.8, "A major compaction rewrites entry logs whose live share is under this fraction (0 or less: no major compaction).", _range(hi=1.0), attr="major_compaction_threshold"),
    Key("majorCompactionInterval", "int", 86400, "Interval between major compactions (s; 0 or less: none).", unit="s", attr="major_compaction_interval_s"),
    Key("minorCompactionMaxTimeMillis", "int", -1, "Longest one minor compaction pass runs; the log being copied when it runs out is undone and left for the next pass (ms; -1: no bound).", _range(-1), unit="ms", attr="minor_compaction_max_time_s"),
    Key("majorCompactionMaxTimeMillis", "int", -1, "Longest one major compaction pass runs, as minorCompactionMaxTimeMillis (ms; -1: no bound).", _range(-1), unit="ms", attr="major_compaction_max_time_s"),
    Key("compactionRateByEntries", "int", 1000, "Entries per second compaction copies at most, so foreground adds keep their latency (0: no limit); used unless isThrottleByBytes.", _range(0), attr="compaction_rate_entries_per_s"),
    Key("compactionRateByBytes", "int", 1_000_000, "Bytes per second compaction copies at most (0: no limit); used when isThrottleByBytes.", _range(0), attr="compaction_rate_bytes_per_s"),
    Key("isThrottleByBytes", "bool", False, "Limit compaction by compactionRateByBytes instead of compactionRateByEntries.", attr="is_throttle_by_bytes"),
    Key("compactionDiskMargin", "float", 0.03, "Fraction of a disk above diskUsageThreshold that compaction may still fill, so it can run (and free space) on a disk that is full for adds.", _range(0.0, 0.5), attr="compaction_disk_margin"),
    # -- disks and read-only mode --------------------------------------------------------------
    Key("readOnlyModeEnabled", "bool", True, "Turn read-only (refuse adds) instead of stopping when a disk fills up.", attr="read_only_mode_enabled"),
    Key("diskUsageThreshold", "float", 0.95, "Fraction of a disk in use at which it counts as full: the bookie turns read-only (and registers so) and asks for a GC pass with major compaction.", _range(0.0, 1.0), attr="disk_usage_threshold"),
    Key("diskUsageWarnThreshold", "float", 0.90, "Fraction of a disk in use at which the bookie logs a warning (the line `disk warn`).", _range(0.0, 1.0), attr="disk_usage_warn_threshold"),
    Key("diskUsageLwmThreshold", "float", 0.90, "A full disk counts as full until its use falls below this fraction (hysteresis: no flapping at the threshold).", _range(0.0, 1.0), attr="disk_usage_lwm_threshold"),
    Key("diskCheckInterval", "int", 10_000, "Interval between disk usage checks (ms).", _range(100), unit="ms", attr="disk_check_interval_s"),
    # -- metadata ------------------------------------------------------------------------------
    Key("metadataServiceUri", "str", "", "Metadata store: lmdb:///abs/path or zk://host:port[,host:port]/ledgers (BookKeeper's `;` between hosts is accepted). Empty: zkServers, or no store at all (the bookie is not registered).", _uri, attr="configured_metadata_uri"),
    Key("zkServers", "str", "", "ZooKeeper servers (host:port, separated by `,` or `;`) of the metadata store, BookKeeper's older alternative to metadataServiceUri; used only when metadataServiceUri is empty.", attr="zk_servers"),
    Key("zkLedgersRootPath", "str", "/ledgers", "ZooKeeper path under which zkServers keeps the metadata.", _zk_root, attr="zk_ledgers_root_path"),
    Key("zkTimeout", "int", 10_000, "Metadata store session / call timeout (ms).", _range(100), unit="ms", attr="metadata_timeout_s"),
    Key("zkEnableSecurity", "bool", False, "ZooKeeper: every node the bookie creates gets an ACL giving ALL to the digest principal of zkDigestAuthFile only; false: open ACL (docs/security.md). Needs zkDigestAuthFile.", attr="zk_enable_security"),
    Key("zkDigestAuthFile", "str", "", "ZooKeeper: a file (mode 0600 or stricter) holding the cluster's digest credentials `user:password` on one line, sent to ZooKeeper on every connection (docs/security.md).", attr="zk_digest_auth_file"),
    Key("zkBookieDigestAuthFile", "str", "", "Bookies only: a file (mode 0600) holding the bookies' own ZooKeeper credentials user:password, another principal than zkDigestAuthFile's. The cluster recovery secret lives under <root>/PRIVATE, readable by this principal only; without it (on ZooKeeper) there is no recovery secret and autorecovery heals with autoRecoveryLedgerPasswords (docs/security.md).", attr="zk_bookie_digest_auth_file"),
    Key("registrationLeaseMs", "int", 5_000, "Lease of the bookie's registration in the embedded store (ms).", _range(200), unit="ms", attr="registration_lease_s"),
    # -- supervision and observability ---------------------------------------------------------
    Key("workerRestartLimit", "int", 5, "Worker restarts allowed within a minute before the bookie stops.", _range(0), attr="worker_restart_limit"),
    Key("workerMemoryLimitMB", "int", 1024, "A worker whose anonymous resident memory (heap and ZeroMQ buffers, not mapped files) passes this is killed and restarted by the supervisor, not counted towards workerRestartLimit; 0: off (appliance/memory_watch.py).", _range(0), unit="MB", attr="worker_memory_limit_bytes"),
    Key("prometheusStatsHttpPort", "int", 0, "Port of the Prometheus /metrics endpoint (0: off); serves the same registry as the admin API's /metrics.", _port, attr="metrics_port"),
    Key("httpServerEnabled", "bool", False, "Serve the HTTP admin API (BookKeeper's /api/v1/... paths, /heartbeat, /metrics); docs/admin.md.", attr="http_server_enabled"),
    Key("httpServerPort", "int", 8080, "Port of the HTTP admin API (0 picks a free one, logged at start-up).", _port, attr="http_server_port"),
    Key("httpServerMaxConnections", "int", 32, "Connections the admin API serves at once (one thread each); one more is answered 503 and closed.", _range(1, 1024), attr="http_server_max_connections"),
    Key("httpServerIdleTimeoutMs", "int", 10_000, "An admin API connection that sends nothing for this long is closed (ms).", _range(100, 600_000), unit="ms", attr="http_server_idle_timeout_s"),
    Key("httpServerRequestTimeoutMs", "int", 10_000, "An admin API or /metrics connection must send a whole request (line, headers, body) within this long of starting to wait for it, or it is closed, however steadily it trickles (ms).", _range(100, 600_000), unit="ms", attr="http_server_request_timeout_s"),
    Key("httpServerMaxConnectionsPerAddress", "int", 8, "Connections one peer address may hold on each HTTP server (admin API, /metrics). Past this, or past httpServerMaxConnections, a new connection takes the place of the one that has waited longest for a request it has not sent whole (503 only when every place is serving a request).", _range(1, 1024), attr="http_server_max_connections_per_address"),
    Key("httpServerAllowedHosts", "str", "", "Comma-separated extra names accepted in the Host header of the HTTP servers when they take no token (besides localhost, loopback addresses, httpServerHost, listeningInterface, advertisedAddress and the host's name); `*`: any. Against DNS rebinding: a web page in a browser on the host must not reach the API.", attr="http_server_allowed_hosts"),
    Key("httpServerTlsCertFile", "str", "", "A PEM certificate (chain): both HTTP servers (admin API and /metrics) speak HTTPS only, with httpServerTlsKeyFile. Empty: plain HTTP.", attr="http_server_tls_cert_file"),
    Key("httpServerTlsKeyFile", "str", "", "The PEM private key of httpServerTlsCertFile (mode 0600 or stricter).", attr="http_server_tls_key_file"),
    Key("httpServerHost", "str", "127.0.0.1", "Address the HTTP admin API binds to; it changes state (read-only, GC), so keep it on loopback or a management network.", attr="http_server_host"),
    Key("httpServerAuthTokenFile", "str", "", "A file (mode 0600 or stricter; `bookie shell gentoken FILE` makes one) holding one token of at least 32 characters. Set: every admin API request but GET /heartbeat must carry `Authorization: Bearer TOKEN`, else 401 (docs/admin.md). Empty: the admin API is unauthenticated, allowed only on a loopback httpServerHost (or with httpServerAllowUnauthenticated). prometheusStatsHttpPort is never authenticated.", attr="http_server_auth_token_file"),
    Key("httpServerAllowUnauthenticated", "bool", False, "Let the admin API serve without httpServerAuthTokenFile on an httpServerHost beyond loopback: anyone who reaches it can force the bookie read-only, start GC passes and read every ledger's metadata.", attr="http_server_allow_unauthenticated"),
    Key("statsDirectory", "str", "", "Accepted so older configuration files load; no effect: the workers' metric files live in the bookie's run directory (docs/metrics.md).", attr="configured_stats_dir"),
    # -- autorecovery (docs/autorecovery.md) -----------------------------------------------------
    Key("autoRecoveryDaemonEnabled", "bool", True, "Run the autorecovery worker (auditor election and replication) beside the others; only when the bookie has a metadata store. LocalBookies and `bookie localbookie` turn it off unless asked.", attr="autorecovery_enabled"),
    Key("lostBookieRecoveryDelay", "int", 0, "A bookie unregistered for this long is lost: its ledgers are marked under-replicated (s). One back within it costs no copy.", _range(0), unit="s", attr="lost_bookie_recovery_delay_s"),
    Key("auditorPeriodicBookieCheckInterval", "int", 86_400, "Interval between the auditor's full checks of membership against every ledger, besides the checks a membership change starts (s; 0: off).", _range(0), unit="s", attr="auditor_bookie_check_interval_s"),
    Key("auditorPeriodicCheckInterval", "int", 604_800, "Interval between the auditor's checks that every entry of every closed ledger is on each bookie of its write set (s; 0: off).", _range(0), unit="s", attr="auditor_check_interval_s"),
    Key("openLedgerRereplicationGracePeriod", "int", 30_000, "A marked ledger still open is fenced and recovered (closed) only after this long, so a live writer can replace the bookie itself (ms).", _range(0), unit="ms", attr="open_ledger_rereplication_grace_s"),
    Key("ensemblePlacementPolicy", "str", "default", "How autorecovery picks a replacement bookie, as the client picks one at an ensemble change (docs/client.md): default (at random), rackaware or regionaware (keep every write set spread over racks or regions, bookieLocation / setrack).", _placement, attr="ensemble_placement_policy"),
    Key("minNumRacksPerWriteQuorum", "int", 2, "With enforceMinNumRacksPerWriteQuorum: the fewest racks (regions) a write set must span after autorecovery replaces a bookie.", _range(1), attr="min_num_racks_per_write_quorum"),
    Key("enforceMinNumRacksPerWriteQuorum", "bool", False, "Autorecovery leaves a fragment as it is (and retries) rather than replace a bookie below minNumRacksPerWriteQuorum.", attr="enforce_min_num_racks_per_write_quorum"),
    Key("rereplicationEntryBatchSize", "int", 10, "Entries a replication worker reads and adds per request.", _range(1, 65536), attr="rereplication_entry_batch_size"),
    Key("replicationRateByBytes", "int", -1, "Largest re-replication rate of one worker, bytes per second (-1: unlimited).", _range(-1), attr="replication_rate_bytes_per_s"),
    Key("autoRecoveryLedgerPasswords", "str", "", "Comma-separated fallback passwords for replication workers (matched against the metadata's password digest; the empty one is always tried). Ledgers heal without them on the cluster recovery credential (docs/autorecovery.md); a listed password serves bookies that refuse the credential and open mac ledgers, which are reported, not healed, without it. A secret: only in a configuration file, never with --set (prefer autoRecoveryLedgerPasswordsFile); the admin API's server_config hides it.", attr="autorecovery_ledger_passwords"),
    Key("autoRecoveryLedgerPasswordsFile", "str", "", "A file (mode 0600 or stricter) of fallback passwords for replication workers, one a line; added to autoRecoveryLedgerPasswords.", attr="autorecovery_ledger_passwords_file"),
)

# Keys whose values are secrets -> the key naming a file to put them in instead.  They are
# refused on a command line (``--set``: process arguments show in ``ps`` to every local user) and
# hidden in every dump of a configuration served to others (``public_value``).
SECRET_KEYS = {"autoRecoveryLedgerPasswords": "autoRecoveryLedgerPasswordsFile"}
HIDDEN = "(secret, not shown)"
MAX_PASSWORDS_FILE_BYTES = 64 * 1024

KEY_BY_NAME = {k.name: k for k in KEYS}

def _convert(key: Key, raw: Any) -> Any:
    """``raw`` (text as written, or a value given by code) typed as ``key`` says, by the one
    vocabulary of bookie.properties, then checked."""
    try:
        if key.type in ("int", "float", "bool"):
            value = parse_value(key.type, raw)
        elif key.type == "dirs" and isinstance(raw, str):
            value = [p.strip() for p in raw.split(",") if p.strip()]
        else:
            value = raw.strip() if isinstance(raw, str) else raw
    except PropertiesError as e:
        raise ConfigError(f"{key.name}: {e}") from None
    if key.check is not None:
        complaint = key.check(value)
        if complaint:
            raise ConfigError(f"{key.name}: {value!r} {complaint}")
    return value


def parse_properties(text: str, source: str = "<config>") -> dict[str, str]:
    """Parse Java-properties text into raw strings (no typing yet): bookie.properties."""
    try:
        return properties.parse_properties(text, source)
    except PropertiesError as e:
        raise ConfigError(str(e)) from None


class BookieConfig:
    """A validated bookie configuration.

    Every key of ``KEYS`` is a typed, read-only accessor named by its ``attr`` (generated from
    the table below the class), in seconds or bytes where the key has a unit.
    """

    def __init__(self, values: dict[str, Any], warnings: list[str]):
        self._values = values
        self.warnings = warnings

    def value(self, name: str) -> Any:
        """A key's value as written (its own unit), by its BookKeeper name."""
        return self._values[name]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def public_value(self, name: str) -> Any:
        """``value(name)``, but a set secret key (``SECRET_KEYS``) as ``HIDDEN``: what the
        configuration dumps served to others (the admin API) show."""
        value = self._values[name]
        return HIDDEN if name in SECRET_KEYS and value else value

    def autorecovery_passwords(self) -> list[bytes]:
        """The replication workers' fallback passwords: autoRecoveryLedgerPasswords, then the
        lines of autoRecoveryLedgerPasswordsFile (read and checked as every secret file).

        Raises:
            ConfigError: one line naming autoRecoveryLedgerPasswordsFile.
        """

        out = [p.encode() for p in self.autorecovery_ledger_passwords.split(",") if p]
        path = self.autorecovery_ledger_passwords_file
        if not path:
            return out
        try:
            raw = read_private_file("autoRecoveryLedgerPasswordsFile", path, MAX_PASSWORDS_FILE_BYTES)
        except AccessDeniedError as e:
            raise ConfigError(str(e)) from None
        if len(raw) > MAX_PASSWORDS_FILE_BYTES:
            raise ConfigError(f"autoRecoveryLedgerPasswordsFile: {path} is over "
                              f"{MAX_PASSWORDS_FILE_BYTES} bytes")
        return out + [line for line in raw.splitlines() if line]

    # -- derived values ------------------------------------------------------------------------
    @property
    def bookie_host(self) -> str:
        return self.advertised_address or self.listening_interface

    @property
    def bookie_address(self) -> str:
        """Where the bookie's add socket is reached: ``host:port`` (reads on port + 1)."""
        return f"{self.bookie_host}:{self.bookie_port}"

    @property
    def bookie_id(self) -> str:
        """The name the bookie registers under and ensembles carry: ``bookieId``, or (none
        set) its address (bookie.metadata.bookie_ids)."""
        return self.configured_bookie_id or self.bookie_address

    @property
    def max_add_message_size_bytes(self) -> int:
        """maxAddMessageSizeBytes, or (0) the larger of 16 MiB and the largest entry + 1 MiB."""
        return self.configured_max_add_message_size_bytes or max(
            16 * 1024 * 1024, self.max_entry_size_bytes + 1024 * 1024)

    @property
    def metadata_uri(self) -> str:
        """The metadata store's URI ("" for none): see ``resolve_metadata_uri``."""
        return resolve_metadata_uri(self._values)

    @property
    def zk_security(self):
        """zkEnableSecurity and zkDigestAuthFile, the file read and checked: a ``ZkSecurity``
        for ``open_metadata``, or None (no credentials, security off).  Raises ConfigError."""
        if not hasattr(self, "_zk_security"):
            from bookie.metadata.zk_acl import load_zk_security  # lazy: kazoo
            from bookie.metadata.zk_acl import with_bookie_credentials  # lazy: kazoo
            try:
                self._zk_security = with_bookie_credentials(
                    load_zk_security(self._values["zkEnableSecurity"],
                                     self._values["zkDigestAuthFile"]),
                    self._values["zkBookieDigestAuthFile"])
            except AccessDeniedError as e:
                raise ConfigError(str(e)) from None
        return self._zk_security

    @property
    def journal_dirs(self) -> list[str]:
        """The journal directories, journal 0 first: journalDirectories, or journalDirectory."""
        return self.configured_journal_dirs or [self.configured_journal_dir]

    @property
    def journal_dir(self) -> str:
        """Journal 0's directory: it holds the bookie's cookie of record, its directory lock
        record and (by default) its stats."""
        return self.journal_dirs[0]

    @property
    def index_dirs(self) -> list[str]:
        """Where the index lives: indexDirectories, or the ledger directories."""
        return self.configured_index_dirs or self.ledger_dirs

    @property
    def stats_dir(self) -> str:
        """Where workers write metric files: statsDirectory, or journalDirectory/stats."""
        return self.configured_stats_dir or os.path.join(self.journal_dir, "stats")

    @classmethod
    def load(cls, path: str | None = None, overrides: dict[str, str] | None = None,
             check_dirs: bool = True) -> "BookieConfig":
        """Read a config file (optional), apply overrides, type and validate every key.

        Raises:
            ConfigError: one line naming the first key that is wrong.
        """
        raw: dict[str, Any] = {}
        twice: list[str] = []
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError(f"--conf: cannot read {path}: "
                                  f"{getattr(e, 'strerror', None) or e}") from None
            raw.update(parse_properties(text, path))
            twice = duplicate_keys(text, path)
        raw.update(overrides or {})
        conf = cls.from_mapping(raw, check_dirs=check_dirs)
        conf.warnings[:0] = twice
        return conf

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], check_dirs: bool = True) -> "BookieConfig":
        """Type and validate ``raw`` (key -> value as written); see ``load``.  BookKeeper's keys
        with no meaning here are one warning (config_bookkeeper.py), each unknown key another."""
        ignored = [k for k in raw if k not in KEY_BY_NAME and k in IGNORED_SERVER_KEYS]
        warnings = [unknown_key_warning(k) for k in raw
                    if k not in KEY_BY_NAME and k not in IGNORED_SERVER_KEYS]
        if ignored:
            warnings.append(ignored_keys_warning(ignored))
        values = {}
        for key in KEYS:
            values[key.name] = _convert(key, raw[key.name]) if key.name in raw else (
                list(key.default.split(",")) if key.type == "dirs" and key.default else
                ([] if key.type == "dirs" else key.default))
        if not values["ledgerDirectories"]:
            raise ConfigError("ledgerDirectories: at least one directory is required")
        if 0 < values["maxAddMessageSizeBytes"] < values["nettyMaxFrameSizeBytes"] + 64 * 1024:
            raise ConfigError(f"maxAddMessageSizeBytes={values['maxAddMessageSizeBytes']} must be at "
                              f"least nettyMaxFrameSizeBytes + 65536 (an add of the largest entry)")
        if values["autoRecoveryLedgerPasswordsFile"] and check_dirs:  # a bookie's own start
            cls(values, []).autorecovery_passwords()
        warnings += _check_metadata_keys(values, raw)
        warnings += _check_http_keys(values)
        _check_disk_and_compaction_keys(values)
        _check_journal_keys(values, raw)
        _check_read_ahead_keys(values, raw)
        try:  # an interface name stands for its address; a bookie's own start checks the host
            values["listeningInterface"] = resolve_listening_interface(
                values["listeningInterface"], on_this_host=check_dirs)
        except InterfaceError as e:
            raise ConfigError(f"listeningInterface: {e}") from None
        conf = cls(values, warnings)
        if conf.zk_security is not None and not conf.metadata_uri.startswith("zk"):
            warnings.append("zkEnableSecurity and zkDigestAuthFile ignored: the metadata store "
                            "is not ZooKeeper")
        if check_dirs:
            conf.check_directories()
        return conf

    def check_directories(self) -> None:
        """Every configured directory must exist, be a directory and be writable (we never
        guess a disk); a path that must become a directory must not already be a file.

        Raises:
            ConfigError: one line naming the key and the path.
        """
        journal_key = "journalDirectories" if self.configured_journal_dirs else "journalDirectory"
        named = [(journal_key, d) for d in self.journal_dirs]
        named += [("ledgerDirectories", d) for d in self.ledger_dirs]
        named += [("indexDirectories", d) for d in self.configured_index_dirs]
        for name, d in named:
            # The directory itself is the bookie's: whether we may not write it or not even
            # enter it (mode 0700 under umask 077), the fix is to give it back, not to switch user.
            if os.path.isdir(d) and not os.access(d, os.W_OK | os.X_OK):
                raise ConfigError(f"{name}: {own_dir_problem(d)}")
            problem = access_problem(d, os.W_OK | os.X_OK)
            if problem:  # else a directory behind one we may not enter "does not exist"
                raise ConfigError(f"{name}: {problem}")
            if os.path.exists(d) and not os.path.isdir(d):
                raise ConfigError(f"{name}: {d!r} is a file, not a directory")
            if not os.path.isdir(d):
                raise ConfigError(f"{name}: directory {d!r} does not exist")
            if not os.access(d, os.W_OK | os.X_OK):
                raise ConfigError(f"{name}: directory {d!r} is not writable")
        # Created on demand, so they need not exist yet; but a file there can never work.
        created = [("statsDirectory", self.configured_stats_dir)]
        if self.metadata_uri.startswith("lmdb://"):
            created.append(("metadataServiceUri", parse_uri(self.metadata_uri).path))
        for name, d in created:
            if d and os.path.exists(d) and not os.path.isdir(d):
                raise ConfigError(f"{name}: {d!r} is a file, not a directory")

    def to_properties(self) -> str:
        lines = []
        for key in KEYS:
            v = self._values[key.name]
            if key.name == "journalDirectory" and self.configured_journal_dirs:
                continue  # journalDirectories says it (it wins over journalDirectory when both are set)
            if key.type == "dirs":
                v = ",".join(v)
            elif key.type == "bool":
                v = format_bool(v)
            lines.append(f"{key.name}={v}")
        return "\n".join(lines) + "\n"


def own_dir_problem(d: str) -> str:
    """A bookie directory this user may enter but not write: the directory is meant to be the
    bookie's, so the fix is to give it back (chown), not to run the bookie as its owner."""
    st = os.stat(d)
    me, owner = owner_name(os.geteuid()), owner_name(st.st_uid)
    also = "" if st.st_uid == 0 else f", or run the bookie as {owner} if that is its user"
    return (f"permission denied: {d} is {owner}'s (mode {st.st_mode & 0o777:04o}) and the bookie "
            f"runs as {me}: give the directory to the bookie's user (chown -R {me}: {d}){also}")


def nearest_key(name: str) -> str | None:
    """The known key ``name`` most likely misspells (same letters in another case, or a close
    spelling), or None when no key is close enough to be worth suggesting."""
    by_lower = {k.lower(): k for k in KEY_BY_NAME}
    return by_lower.get(name.lower()) or next(
        iter(difflib.get_close_matches(name, KEY_BY_NAME, n=1, cutoff=0.75)), None)


def unknown_key_warning(name: str) -> str:
    """The warning for a key not in ``KEYS``, naming the nearest known key if one is close."""
    near = nearest_key(name)
    hint = f" (did you mean {near!r}?)" if near else ""
    return f"unknown configuration key {name!r} ignored{hint}"


def _check_metadata_keys(values: dict[str, Any], raw: dict[str, Any]) -> list[str]:
    """Check the metadata store the configuration resolves to; return warnings for keys that
    are set but play no part.

    Raises:
        ConfigError: the resolved URI is not usable, naming the key it came from.
    """
    warnings = []
    source = "metadataServiceUri" if values["metadataServiceUri"] else "zkServers"
    if values["metadataServiceUri"] and (values["zkServers"] or "zkLedgersRootPath" in raw):
        warnings.append("zkServers and zkLedgersRootPath ignored: metadataServiceUri is set")
    elif not values["zkServers"] and "zkLedgersRootPath" in raw:
        warnings.append("zkLedgersRootPath ignored: neither zkServers nor metadataServiceUri is set")
    uri = resolve_metadata_uri(values)
    if uri:
        try:
            parse_uri(uri)
        except InvalidUriError as e:
            raise ConfigError(f"{source}: {e}") from None
    return warnings


def _check_http_keys(values: dict[str, Any]) -> list[str]:
    """Warnings for admin API keys that are set but play no part (the token file itself is
    read and checked at start-up: appliance/startchecks.py)."""
    if values["httpServerAuthTokenFile"] and not values["httpServerEnabled"]:
        return ["httpServerAuthTokenFile ignored: httpServerEnabled is false (the "
                "prometheusStatsHttpPort endpoint is never authenticated)"]
    if values["httpServerAllowUnauthenticated"] and values["httpServerAuthTokenFile"]:
        return ["httpServerAllowUnauthenticated ignored: httpServerAuthTokenFile is set, every "
                "admin API request but GET /heartbeat needs the token"]
    return []


def _check_disk_and_compaction_keys(values: dict[str, Any]) -> None:
    """Keys whose values must agree with each other (BookKeeper refuses the same)."""
    full = values["diskUsageThreshold"]
    for name in ("diskUsageWarnThreshold", "diskUsageLwmThreshold"):
        if values[name] > full:
            raise ConfigError(f"{name}: {values[name]} is above diskUsageThreshold ({full})")
    minor, major = values["minorCompactionThreshold"], values["majorCompactionThreshold"]
    if minor > 0 and major > 0 and minor > major:
        raise ConfigError(f"minorCompactionThreshold: {minor} is above majorCompactionThreshold ({major})")
    if (values["minorCompactionInterval"] > 0 and values["majorCompactionInterval"] > 0
            and values["minorCompactionInterval"] > values["majorCompactionInterval"]):
        raise ConfigError("minorCompactionInterval: longer than majorCompactionInterval")


def _check_read_ahead_keys(values: dict[str, Any], raw: dict[str, Any]) -> None:
    """The read-ahead cache must fit in the read worker's memory limit, with room left; left
    unset, it is at most a quarter of the limit (a configuration with a small limit that
    started before the cache existed still starts)."""
    cache, limit = values["dbStorage_readAheadCacheMaxSizeMb"], values["workerMemoryLimitMB"]
    if "dbStorage_readAheadCacheMaxSizeMb" not in raw:
        if limit:
            values["dbStorage_readAheadCacheMaxSizeMb"] = min(cache, limit // 4)
        return
    if limit and cache > limit // 2:
        raise ConfigError(f"dbStorage_readAheadCacheMaxSizeMb: {cache} is above half of "
                          f"workerMemoryLimitMB ({limit}): the read worker would be killed for it")


def _check_journal_keys(values: dict[str, Any], raw: dict[str, Any]) -> None:
    """No journal directory twice (two journals on one directory would write each other's
    files).  journalDirectories set wins over journalDirectory, as in BookKeeper (its
    ``getJournalDirNames``): both set is no error, whatever journalDirectory says."""
    dirs = values["journalDirectories"]
    seen = set()
    for d in dirs:
        real = os.path.realpath(d)
        if real in seen:
            raise ConfigError(f"journalDirectories: {d!r} is named twice")
        seen.add(real)


def _accessor(key: Key) -> property:
    def get(self: BookieConfig) -> Any:
        return key.accessor_value(self._values[key.name])
    unit = f", in {ACCESSOR_SUFFIX[key.unit][1:]} ({key.name} is in {key.unit})" if key.unit else ""
    return property(get, doc=f"{key.name}{unit}: {key.meaning}")


for _key in KEYS:
    setattr(BookieConfig, _key.attr, _accessor(_key))
del _key


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """Turn ``--set key=value`` items into a dict; a malformed item, or a secret key (its value
    would show in ``ps``), is a ConfigError (the latter naming the file-based key to use)."""
    try:
        out = properties.parse_assignments(items, "--set", form="key=value")
    except PropertiesError as e:
        raise ConfigError(str(e)) from None
    for k in out:
        if k in SECRET_KEYS:
            raise ConfigError(f"--set {k}: a secret is not taken on the command line (every local "
                              f"user sees it in ps); put it in {SECRET_KEYS[k]} (a 0600 file) "
                              f"or in the --conf file")
    return out


def keys_help() -> str:
    """The key table as plain text, for ``bookie run --help``."""
    rows = []
    for key in KEYS:
        default = key.default if key.default != "" else "(empty)"
        unit = f", {key.unit}" if key.unit else ""
        rows.append(f"  {key.name} ({key.type}{unit}, default {default})\n      {key.meaning}")
    return "\n".join(rows)


def keys_markdown() -> str:
    """The key table as Markdown, for docs/configuration.md."""
    rows = ["| key | type | unit | default | meaning |", "| --- | --- | --- | --- | --- |"]
    for key in KEYS:
        default = f"`{key.default}`" if key.default != "" else "(empty)"
        rows.append(f"| `{key.name}` | {key.type} | {key.unit} | {default} | {key.meaning} |")
    return "\n".join(rows)
