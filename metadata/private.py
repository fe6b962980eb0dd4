"""Where the bookies keep what only bookies may read (the cluster recovery secret).

Theory of operation
-------------------
A store's ordinary nodes are readable by every principal that may use the store: clients too
(they share the cluster's ZooKeeper digest, or open the embedded store as the bookie's user).
``private_store(store)`` gives a place apart, or None where the configuration provides none:

- **ZooKeeper**, with ``zkBookieDigestAuthFile`` (metadata/zk_acl.py): nodes under
  ``<root>/PRIVATE``, whose ACL (and each child's) gives ALL to the bookies' own digest principal
  and nothing to anyone else.  ZooKeeper checks creating and deleting a child against the
  parent's ACL, so no one else can replace a child; a ``/PRIVATE`` whose ACL is anything else
  (someone made it first, open) is refused, never used.  Without the key: None.
- **Embedded store** (``lmdb://DIR``): files ``DIR/NAME.private``, mode 0600, owned by the
  user of the process (the bookie's): never reachable through the store's node API, so a
  client's ``read_record`` cannot reach them whatever the path.  A file open to group or
  other, or of another owner, is refused.

``get(name)`` returns the bytes or None; ``create(name, data)`` makes it once (NodeExistsError
when it is there: the first creator's bytes win, read them back).
"""

from __future__ import annotations

import os
import stat
import tempfile

from kazoo import exceptions as kz

from bookie.metadata.errors import AccessDeniedError, NodeExistsError
from bookie.metadata.zk_acl import BOOKIE_DIGEST_KEY, PRIVATE, _ids
from bookie.metadata.zk_errors import map_error


class ZkPrivate:
    def __init__(self, store):
        self.store = store
        self.acl = store.security.bookie_acl
        self.parent = store.root + PRIVATE
        self.where = (f"ZooKeeper {self.parent} (ACL: the bookies' principal "
                      f"{store.security.bookie_user!r} of {BOOKIE_DIGEST_KEY} only)")

    def _checked_parent(self, client) -> None:
        try:
            client.create(self.parent, b"", acl=self.acl, makepath=False)
        except kz.NodeExistsError:
            pass
        acls, _ = client.get_acls(self.parent)
        if _ids(acls) != _ids(self.acl):
            raise AccessDeniedError(
                f"{self.parent} is not the bookies' alone (ACL {', '.join(sorted(_ids(acls)))}): "
                f"delete it (with its children); the bookies make it again with "
                f"{BOOKIE_DIGEST_KEY}'s principal only")

    def _call(self, fn):
        try:
            return fn(self.store.client)
        except kz.NodeExistsError:
            raise NodeExistsError(self.parent) from None
        except kz.KazooException as e:
            raise map_error(e, self.parent) from None

    def get(self, name: str) -> bytes | None:
        def read(client):
            self._checked_parent(client)
            try:
                return client.get(f"{self.parent}/{name}")[0]
            except kz.NoNodeError:
                return None
        return self._call(read)

    def create(self, name: str, data: bytes) -> None:
        def make(client):
            self._checked_parent(client)
            client.create(f"{self.parent}/{name}", bytes(data), acl=self.acl)
        self._call(make)


class FilePrivate:
    def __init__(self, directory: str):
        self.directory = directory
        self.where = f"{directory}/*.private (mode 0600, the bookie's user)"

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, f"{name}.private")

    def get(self, name: str) -> bytes | None:
        path = self._path(name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise AccessDeniedError(f"{path}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if st.st_mode & 0o077 or st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
                raise AccessDeniedError(f"{path} is not a private file of this user (mode "
                                        f"{stat.S_IMODE(st.st_mode):04o}, owner {st.st_uid}): "
                                        f"it holds a secret; remove it, the bookie makes another")
            return os.read(fd, 4096)
        finally:
            os.close(fd)

    def create(self, name: str, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".private-")  # 0600
        try:
            os.write(fd, bytes(data))
            os.fsync(fd)
            os.close(fd)
            fd = -1
            try:
                os.link(tmp, self._path(name))  # whole or absent: racing creators, one wins
            except FileExistsError:
                raise NodeExistsError(self._path(name)) from None
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        finally:
            if fd >= 0:
                os.close(fd)
            os.unlink(tmp)


def private_store(store) -> ZkPrivate | FilePrivate | None:
    """The bookies' private place of ``store`` (module docstring), None where there is none."""
    from bookie.metadata.embedded import EmbeddedMetadataStore  # lazy: lmdb

    if isinstance(store, EmbeddedMetadataStore):
        return FilePrivate(store.path)
    security = getattr(store, "security", None)
    if security is not None and security.bookie_user:
        return ZkPrivate(store)
    return None
