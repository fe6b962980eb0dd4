"""Directory layout, layout version and cookies.

Every configured directory (journal, ledger, index) holds a ``current/`` subdirectory with:

- ``VERSION``: the layout version (``LAYOUT_VERSION``); a bookie refuses a layout it does not know.
- ``cookie``: JSON naming the bookie and its whole disk set (bookie id, journal directory,
  ledger directories, index directories, an instance id chosen at first start); with several
  journals (``journalDirectories``) also ``journal_dirs``, all of them in order.  The bookie id
  is ``bookieId`` when one is configured, and then the cookie names no address: the bookie may
  move to another host or port with its directories (``bookie.metadata.bookie_ids``); without
  it the id is the address ``host:port``, and a changed address is a changed cookie.
- ``curve_public_key`` in the cookie: the bookie's public CURVE key (``server_key.py``), the
  one clients pin.  A cookie from before keys has none; the next start records it there (in
  every directory and in the store) rather than refusing.  A cookie whose key differs from the
  bookie's key file is refused, naming ``bookie shell rotatekey``.
- ``JOURNAL`` (journal directories only): which journal of the bookie this directory holds,
  ``{"instance_id": ..., "journal": i}``.  The cookie is the same in every directory, so it
  cannot tell two journal disks mounted the other way round; this can, and such a start is
  refused (each journal's LastLogMark belongs to its own offsets: replaying a journal from the
  other's mark could skip acknowledged records).

On first start (no cookie anywhere, directories empty of data) the cookie is stamped into every
directory and, when a metadata store is configured, into the store.  On every later start each
directory's cookie must equal the expected one: a directory that lost its cookie, a cookie from
another disk set, or a changed configuration is refused with a message saying which directory
and what differs (BookKeeper's "missing disks or directories" rule).  To start over after a real
disk change: ``bookie shell bookieformat --force`` wipes the bookie's directories.

Beside ``current/`` each directory holds ``bookie.lock``, locked while a bookie runs on it
(``dirlock.py``); ``bookieformat`` refuses the directories of a running bookie.
"""

from __future__ import annotations

import os
import shutil
import uuid

import orjson

from bookie.metadata.bookie_ids import split_address
from bookie.storage.dirlock import DirectoryLock
from bookie.storage.errors import LayoutError  # noqa: F401 - its users import it from here
from bookie.metadata import CookieNotFoundError, open_metadata
from bookie.storage.replace_file import replace_file

LAYOUT_VERSION = 1
KEY_FILE = "bookie.key_secret"  # the bookie's own CURVE keypair, in its journal's current/ (server_key.py)
PUBLIC_KEY_FIELD = "curve_public_key"  # the cookie's record of the bookie's public key
ROTATE_VERB = "bookie shell rotatekey"  # the one way to change a bookie's key


def current_dir(directory: str) -> str:
    return os.path.join(directory, "current")


def all_dirs(conf) -> list[str]:
    dirs = [*conf.journal_dirs, *conf.ledger_dirs, *conf.configured_index_dirs]
    seen, out = set(), []
    for d in dirs:
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            out.append(d)
    return out


def expected_cookie(conf, instance_id: str, public_key: str | None = None) -> dict:
    cookie = {
        "layout_version": LAYOUT_VERSION,
        "bookie_id": conf.bookie_id,
        "journal_dir": os.path.realpath(conf.journal_dir),
        "ledger_dirs": [os.path.realpath(d) for d in conf.ledger_dirs],
        "index_dirs": [os.path.realpath(d) for d in conf.index_dirs],
        "instance_id": instance_id,
    }
    if len(conf.journal_dirs) > 1:  # one journal: the cookie of a one-journal bookie, as before
        cookie["journal_dirs"] = [os.path.realpath(d) for d in conf.journal_dirs]
    if public_key:
        cookie[PUBLIC_KEY_FIELD] = public_key
    return cookie


def without_key(cookie: dict) -> dict:
    """The cookie as compared for "same disk set, same configuration": its key apart (a key is
    checked on its own, so that a cookie from before keys is upgraded, not refused)."""
    return {k: v for k, v in cookie.items() if k != PUBLIC_KEY_FIELD}


JOURNAL_STAMP = "JOURNAL"


def _check_or_stamp_journals(conf, instance_id: str) -> None:
    """Each journal directory must hold the journal the configuration puts there (module doc:
    ``JOURNAL``); a directory without the stamp (a bookie from before it) gets it.

    Raises:
        LayoutError: a journal directory holding another journal of this bookie, or another
            bookie's, naming both.
    """
    for i, d in enumerate(conf.journal_dirs):
        path = os.path.join(current_dir(d), JOURNAL_STAMP)
        stamp = _read_json(path)
        want = {"instance_id": instance_id, "journal": i}
        if stamp is None:
            _write_atomic(path, orjson.dumps(want))
        elif stamp != want:
            held = stamp.get("journal") if isinstance(stamp, dict) else None
            if isinstance(stamp, dict) and stamp.get("instance_id") == instance_id:
                raise LayoutError(f"{d}: holds journal {held} of this bookie, but "
                                  f"journalDirectories puts journal {i} there (directories or "
                                  f"disks swapped?); refusing to start. Restore the order")
            raise LayoutError(f"{d}: holds a journal of another bookie (instance "
                              f"{stamp.get('instance_id') if isinstance(stamp, dict) else '?'}); "
                              f"refusing to start")


def _read_json(path: str):
    try:
        with open(path, "rb") as f:
            return orjson.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as e:
        raise LayoutError(f"{path}: unreadable ({e})") from None


def _write_atomic(path: str, data: bytes) -> None:
    """Cookies, VERSION and the journal stamps: 0600, never through a link
    (storage/replace_file.py)."""
    replace_file(path, data)


def cookie_mismatch(d: str, found: dict, want: dict) -> str:
    """Why directory ``d``'s cookie refuses this configuration, and the next command: a new bookie
    id (a changed port or address) is renamed with ``updatecookie`` (the data kept); other
    differences are missing or moved directories."""
    diff = sorted(k for k in set(found) | set(want) if found.get(k) != want.get(k))
    if "bookie_id" in diff:
        rest = [k for k in diff if k != "bookie_id"]
        return (f"{d}: its cookie is of bookie id {found.get('bookie_id')} but this configuration "
                f"makes the id {want.get('bookie_id')} (bookiePort, advertisedAddress, "
                f"listeningInterface or bookieId changed"
                + (f"; also differs in: {', '.join(rest)}" if rest else "")
                + "). To keep the data under the new id: 'bookie shell updatecookie --conf FILE', "
                f"then 'bookie shell updateledgers --from {found.get('bookie_id')} --to "
                f"{want.get('bookie_id')} --conf FILE'; or restore the old configuration")
    return (f"{d}: cookie does not match this bookie's configuration (differs in: "
            f"{', '.join(diff)}); missing disks or directories? Restore the configuration, or "
            f"wipe with 'bookie shell bookieformat'")


def _has_data(cur: str) -> bool:
    try:
        names = os.listdir(cur)
    except FileNotFoundError:
        return False
    return any(n not in ("VERSION", "cookie", "cookie.tmp", JOURNAL_STAMP, JOURNAL_STAMP + ".tmp",
                         KEY_FILE, KEY_FILE + ".tmp")
               for n in names)


def check_or_stamp(conf, public_key: str | None = None) -> dict:
    """Verify the cookies of every directory, or stamp them on a first start.

    ``public_key``: the bookie's public key (``server_key.ensure``), recorded in the cookie;
    a cookie without one gets it (module doc), one with another is refused.

    Returns:
        the cookie (a dict).
    Raises:
        LayoutError: a directory with a missing, foreign or changed cookie, or data without one.
    """
    dirs = all_dirs(conf)
    found = {}
    for d in dirs:
        cur = current_dir(d)
        version = None
        try:
            with open(os.path.join(cur, "VERSION")) as f:
                version = int(f.read().strip())
        except FileNotFoundError:
            pass
        except ValueError:
            raise LayoutError(f"{cur}/VERSION: not a layout version number") from None
        if version is not None and version != LAYOUT_VERSION:
            raise LayoutError(f"{d}: layout version {version}, this bookie knows {LAYOUT_VERSION}")
        found[d] = _read_json(os.path.join(cur, "cookie"))
    cookies = [c for c in found.values() if c is not None]
    if not cookies:
        for d in dirs:
            if _has_data(current_dir(d)):
                raise LayoutError(f"{d}: holds bookie data but no cookie; refusing to start "
                                  f"(run 'bookie shell bookieformat' to wipe it)")
        cookie = expected_cookie(conf, uuid.uuid4().hex, public_key)
        for d in dirs:
            cur = current_dir(d)
            os.makedirs(cur, mode=0o700, exist_ok=True)
            _write_atomic(os.path.join(cur, "VERSION"), f"{LAYOUT_VERSION}\n".encode())
            _write_atomic(os.path.join(cur, "cookie"), orjson.dumps(cookie))
        _check_or_stamp_journals(conf, cookie["instance_id"])
        return cookie
    instance = cookies[0].get("instance_id", "")
    want = expected_cookie(conf, instance, public_key)
    for d, c in found.items():
        if c is None:
            raise LayoutError(f"{d}: has no cookie while the bookie's other directories do "
                              f"(a new or replaced disk?); refusing to start. Restore the "
                              f"directory, or wipe the bookie with 'bookie shell bookieformat'")
    for d, c in found.items():
        if without_key(c) != without_key(want):
            raise LayoutError(cookie_mismatch(d, without_key(c), without_key(want)))
    for d, c in found.items():
        recorded = c.get(PUBLIC_KEY_FIELD)
        if public_key and recorded and recorded != public_key:
            raise LayoutError(f"{d}: its cookie records key {str(recorded)[:8]}... but the bookie's "
                              f"key is {public_key[:8]}... (clients pin the recorded one); restore "
                              f"the key file, or run '{ROTATE_VERB}' to change it on purpose")
    if public_key:
        for d, c in found.items():
            if c.get(PUBLIC_KEY_FIELD) != public_key:  # a cookie from before keys: record it
                _write_atomic(os.path.join(current_dir(d), "cookie"), orjson.dumps(want))
    _check_or_stamp_journals(conf, instance)
    return want if public_key else {**want, **{k: v for k, v in cookies[0].items()
                                               if k == PUBLIC_KEY_FIELD}}


def rewrite_cookies(conf, cookie: dict) -> None:
    """Write ``cookie`` into every directory of the bookie (``rotatekey``, with the bookie
    stopped: the caller holds the directory lock)."""
    for d in all_dirs(conf):
        if os.path.exists(os.path.join(current_dir(d), "cookie")):
            _write_atomic(os.path.join(current_dir(d), "cookie"), orjson.dumps(cookie))


def local_cookie(conf) -> dict | None:
    """The cookie in the bookie's journal directory, or None when there is none (yet)."""
    return cookie_in(conf.journal_dir)


def cookie_in(directory: str) -> dict | None:
    """The cookie a bookie directory holds, or None."""
    cookie = _read_json(os.path.join(current_dir(directory), "cookie"))
    return cookie if isinstance(cookie, dict) else None


def key_salt(conf) -> bytes:
    """The salt of the master keys' stored form (``bookie.core.ledgers.stored_key``): the
    cookie's instance id, chosen at the first start and kept until the bookie is formatted."""
    cookie = _read_json(os.path.join(current_dir(conf.journal_dir), "cookie"))
    instance = cookie.get("instance_id") if isinstance(cookie, dict) else None
    if not instance:
        raise LayoutError(f"{conf.journal_dir}: no cookie with an instance id; the supervisor "
                          f"stamps it before starting workers")
    return str(instance).encode()


def dirs_holding_data(conf) -> list[str]:
    """The bookie's directories (journal, ledger, index) that hold bookie data now."""
    return [d for d in all_dirs(conf) if os.path.exists(current_dir(d))]


def remembered_port(dirs: list[str]) -> int | None:
    """The port a bookie's directories were stamped with (the port of the cookie's bookie id),
    or None before the first start.  A bookie configured with ``bookiePort=0`` (or a local
    ensemble started again on its directories) comes back on it, so a restart is the same
    bookie, with the same cookie, not a new one.  A bookie with a named id (``bookieId``) has
    no port in its cookie (None): its address may change, its id does not."""
    for d in dirs:
        cookie = _read_json(os.path.join(current_dir(d), "cookie"))
        if isinstance(cookie, dict):
            address = split_address(str(cookie.get("bookie_id", "")))
            if address is not None:
                return address[1]
    return None


def format_bookie(conf, force: bool = False) -> list[str]:
    """Wipe the bookie's data (``bookie shell bookieformat``) and its cookie in the store.

    Holds the directory lock (``dirlock``) while it works: the directories of a running bookie
    are refused, and no bookie can start on them half-wiped.  The metadata store is opened
    before anything is wiped, so a store that cannot be used changes nothing.

    Returns:
        the directories wiped.
    Raises:
        LayoutError: a directory holds data and ``force`` is not set, or a bookie runs on the
            directories (``DirectoryInUseError``, naming its pid); nothing changed.
        MetadataError: the configured metadata store cannot be opened; nothing changed.
    """

    lock = DirectoryLock.acquire(all_dirs(conf), purpose="format it")
    store = None
    try:
        holding = dirs_holding_data(conf)
        if holding and not force:
            raise LayoutError(f"{', '.join(holding)} hold bookie data; pass --force to wipe")
        bookie_id = conf.bookie_id
        if conf.bookie_port == 0 and not conf.configured_bookie_id:  # the id is in its cookie
            port = remembered_port(all_dirs(conf))
            bookie_id = f"{conf.bookie_host}:{port}" if port else None
        if conf.metadata_uri:
            store = open_metadata(conf.metadata_uri, timeout_s=conf.metadata_timeout_s,
                                  zk_security=conf.zk_security)
        for d in holding:
            shutil.rmtree(current_dir(d))
        if store is not None and bookie_id is not None:
            try:
                store.remove_cookie(bookie_id)
            except CookieNotFoundError:
                pass
        return holding
    finally:
        if store is not None:
            store.close()
        lock.release()


def check_not_in_use(conf, purpose: str) -> None:
    """Raise ``DirectoryInUseError`` (naming the pid) if a bookie holds the directories now."""

    DirectoryLock.acquire(all_dirs(conf), purpose=purpose).release()
