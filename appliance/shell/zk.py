"""``bookie shell zkprotect``: put the ZooKeeper ACL on an existing, unprotected metadata tree.

A store formatted before ``zkEnableSecurity`` was turned on has open nodes; bookies and clients
with security on refuse it (one line pointing here).  This verb gives the root and every node
under it ALL for the digest principal of the credentials, and nothing for anyone else
(metadata/zk_acl.py, docs/security.md).  Stop the bookies and clients that run with security
off first: nodes they create meanwhile stay open (running the verb again covers them).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from bookie.appliance.errors import CliError
from bookie.appliance.shell.registry import metadata_uri, print_json, zk_security
from bookie.metadata import MetadataError


def register(commands: Any, metadata_command: Callable) -> None:
    metadata_command("zkprotect", "Give every node of the ZooKeeper metadata store the ACL of "
                     "the credentials (--zk-digest-auth-file, or the --conf file's "
                     "zkDigestAuthFile): ALL for that digest user, nothing for anyone else.",
                     _zkprotect)


def _zkprotect(args: argparse.Namespace) -> int:
    from bookie.metadata.zk_acl import protect_metadata  # lazy: kazoo
    security = zk_security(args)
    try:
        count = protect_metadata(metadata_uri(args), security, timeout_s=args.timeout_s)
    except MetadataError as e:
        raise CliError(str(e)) from None
    if args.json:
        print_json({"protected_nodes": count, "user": security.user})
    else:
        print(f"{count} nodes protected: ALL for digest user {security.user!r} only")
    return 0
