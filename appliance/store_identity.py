"""The bookie's standing in its metadata store, checked at start (before its disks are served):
the store exists (it is never created here), it holds this bookie's cookie and that cookie is
the disks' own (a second bookie, or a wiped one, claiming the same id with another disk set is
refused), and the cluster's recovery secret.  Every problem is ``StartRefused`` or
``LayoutError``: one line, exit status 2."""

from __future__ import annotations

from typing import Callable

import orjson

from bookie.appliance.startchecks import StartRefused
from bookie.metadata import CookieNotFoundError, MetadataError, NoSuchStoreError, open_metadata
from bookie.metadata.recovery_secret import recovery_secret
from bookie.storage.layout import PUBLIC_KEY_FIELD, ROTATE_VERB, LayoutError, without_key
from bookie.workers.config import BookieConfig


def open_store(conf: BookieConfig):
    """The metadata store.  Raises ``StartRefused`` if the URI names no store, ``LayoutError``
    if it cannot be used."""
    try:
        return open_metadata(conf.metadata_uri, timeout_s=conf.metadata_timeout_s,
                             lease_ms=round(conf.registration_lease_s * 1000),
                             zk_security=conf.zk_security)
    except NoSuchStoreError as e:
        raise StartRefused(f"metadataServiceUri: {e}") from None
    except MetadataError as e:
        raise LayoutError(f"metadata store {conf.metadata_uri}: {e}") from None


def check_cookie_in_store(store, conf: BookieConfig, cookie: dict) -> None:
    """The store's cookie of ``conf.bookie_id`` is ``cookie`` (written if there is none; its
    key recorded if it is from before keys).  Raises ``LayoutError``."""
    try:
        try:
            raw, _version = store.read_cookie(conf.bookie_id)
        except CookieNotFoundError:
            store.write_cookie(conf.bookie_id, orjson.dumps(cookie))
            return
    except MetadataError as e:
        raise LayoutError(f"metadata store {conf.metadata_uri}: {e}") from None
    try:
        stored = orjson.loads(raw)
    except ValueError:
        raise LayoutError(f"cookie of {conf.bookie_id} in the metadata store is unreadable") from None
    if isinstance(stored, dict) and without_key(stored) == without_key(cookie):
        recorded = stored.get(PUBLIC_KEY_FIELD)
        if recorded and recorded != cookie.get(PUBLIC_KEY_FIELD):
            raise LayoutError(f"the metadata store's cookie of {conf.bookie_id} records "
                              f"key {str(recorded)[:8]}... but the bookie's key is "
                              f"{str(cookie.get(PUBLIC_KEY_FIELD))[:8]}...; restore the key "
                              f"file, or run '{ROTATE_VERB}' to change it on purpose")
        if not recorded:  # a cookie from before keys: the key is recorded now
            try:
                store.write_cookie(conf.bookie_id, orjson.dumps(cookie), _version)
            except MetadataError as e:
                raise LayoutError(f"metadata store {conf.metadata_uri}: {e}") from None
        return
    if stored != cookie:
        diff = sorted(k for k in set(stored) | set(cookie) if stored.get(k) != cookie.get(k))
        raise LayoutError(f"the metadata store holds another cookie for {conf.bookie_id} "
                          f"(differs in: {', '.join(diff)}): a different disk set, a wiped "
                          f"bookie, or another bookie configured with the same bookieId; restore the directories, or remove the "
                          f"cookie and re-replicate (bookieformat)")


def cluster_recovery_secret(store, conf: BookieConfig, log: Callable[..., None]) -> bytes | None:
    """The cluster recovery secret (metadata/recovery_secret.py), made if the store has none;
    None (and a warning, once per start) where the store has no place only bookies read."""
    try:
        secret = recovery_secret(store)
        if secret is None:  # once per start: what autorecovery heals with instead
            log("no recovery secret: the metadata store has no place only bookies read "
                "(set zkBookieDigestAuthFile); autorecovery heals with "
                "autoRecoveryLedgerPasswords only", level="warning")
        return secret
    except MetadataError as e:
        raise LayoutError(f"metadata store {conf.metadata_uri}: {e}") from None
