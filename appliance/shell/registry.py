"""What every ``bookie shell`` verb family shares, public for all of them (issue 35): the
metadata store a command names (``metadata_uri``, ``zk_security``, ``client_keys``), opening it
(``with_store``, ``store_exists``), BookKeeper's spellings of arguments (``metadata_uri_arg``,
``add_ledger_id_argument``, ``ledger_id_of``, ``add_zk_auth_option``), the prompt (``ask``) and
the JSON output (``print_json``).  The verbs are registered by ``main.register``; each family's
module (``disk``, ``recovery``, ``gc``, ``security``, ``zk``, ``cluster``, ``placement``,
``parity``, ``whatif``) adds its own with a ``register`` function and imports from here only.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Callable

import orjson

from bookie.appliance.errors import CliError
from bookie.appliance.privileges import run_as_store_owner
from bookie.client import options
from bookie.client.errors import InvalidArgumentError
from bookie.metadata import MetadataError, NoSuchStoreError, open_metadata
from bookie.workers.config import BookieConfig, ConfigError, normalise_uri

ENV_URI = "BOOKIE_METADATA_URI"


def quiet_kazoo(handler: Callable) -> Callable:
    """kazoo logs every reconnect attempt; a shell user gets our one-line error instead."""
    def run(args):
        if not args.verbose:
            logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        return handler(args)
    return run


def metadata_uri_arg(text: str) -> str:
    """``--metadata``: BookKeeper's ``;`` between ZooKeeper hosts becomes ``,``, as in the
    configuration file's metadataServiceUri."""
    return normalise_uri(text)


def add_bookie_conf_arguments(parser: argparse.ArgumentParser) -> None:
    """``--conf FILE`` and ``--set KEY=VALUE``: a verb that works on a bookie's own directories."""
    parser.add_argument("--conf", metavar="FILE", default=None, help="bookie configuration file")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="override one configuration key (repeatable)")


def add_ledger_id_argument(parser: argparse.ArgumentParser) -> None:
    """LEDGER_ID, positional or as BookKeeper's ``-ledgerid N`` (``--ledger-id N``)."""
    parser.add_argument("ledger_id", metavar="LEDGER_ID", type=int, nargs="?")
    parser.add_argument("--ledger-id", "-ledgerid", dest="ledger_id_opt", metavar="N", type=int,
                        default=None, help="the ledger, as BookKeeper spells it")


def ledger_id_of(args: argparse.Namespace, verb: str) -> int:
    """The ledger a command names (positional or -ledgerid); CliError when none or two."""
    ids = {x for x in (args.ledger_id, args.ledger_id_opt) if x is not None}
    if len(ids) != 1:
        raise CliError(f"name one ledger: {verb} LEDGER_ID (or -ledgerid N)")
    return ids.pop()


def ask(question: str) -> bool:
    """Ask a yes/no question on stdin; end of input (Ctrl-D, a closed pipe) answers no."""
    try:
        answer = input(question)
    except EOFError:
        print(file=sys.stderr)  # the prompt's line ends; the caller says what happened
        return False
    return answer.strip().lower() in ("y", "yes")


def metadata_uri(args: argparse.Namespace) -> str:
    uri = args.metadata
    if not uri and getattr(args, "conf", None):
        try:
            uri = BookieConfig.load(args.conf, check_dirs=False).metadata_uri
        except ConfigError as e:
            raise CliError(str(e)) from None
        if not uri:
            raise CliError(f"{args.conf} names no metadata store (metadataServiceUri, zkServers)")
    if not uri and getattr(args, "client_conf", None):  # BookKeeper's client.conf may name it
        uri = client_conf_uri(args)
    uri = uri or (metadata_uri_arg(os.environ[ENV_URI]) if os.environ.get(ENV_URI) else None)
    if not uri:
        raise CliError(f"no metadata store: pass --metadata URI or --conf FILE, or set {ENV_URI}")
    return uri


def add_zk_auth_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zk-digest-auth-file", metavar="FILE", default=None,
                        help="ZooKeeper credentials (one line user:password, mode 0600): "
                             "authenticate with them and protect what is created, as "
                             "zkDigestAuthFile with zkEnableSecurity=true (default: the --conf "
                             "file's keys)")


def zk_security(args: argparse.Namespace):
    """The ZooKeeper credentials and ACL of a shell command (None: none): from
    --zk-digest-auth-file, else the --conf file's zkEnableSecurity / zkDigestAuthFile."""
    if "_zk_security" in vars(args):  # read once: a tool may have become the bookie's user since
        return args._zk_security
    from bookie.metadata import MetadataError, load_zk_security  # lazy: kazoo
    security = None
    try:
        if getattr(args, "zk_digest_auth_file", None):
            security = load_zk_security(True, args.zk_digest_auth_file)
        elif getattr(args, "conf", None):
            security = BookieConfig.load(args.conf, check_dirs=False).zk_security
    except (ConfigError, MetadataError) as e:
        raise CliError(str(e)) from None
    args._zk_security = security
    return security


def zk_client_keys(args: argparse.Namespace) -> dict:
    """The client configuration keys that carry the shell's ZooKeeper credentials."""
    sec = zk_security(args)
    return {} if sec is None else {"zkEnableSecurity": sec.enabled, "zkDigestAuthFile": sec.source}


def client_conf_uri(args: argparse.Namespace) -> str:
    """The metadata store the ``--client-conf`` file (with ``--set``) names, or ""."""
    try:
        return options.metadata_uri(options.from_args(args))
    except InvalidArgumentError as e:
        raise CliError(str(e)) from None


def client_keys(args: argparse.Namespace) -> dict:
    """The client keys of a shell command: its ZooKeeper credentials (``zk_client_keys``), then
    ``--client-conf`` / ``--set`` (bookie.client.options), checked."""
    try:
        return {**zk_client_keys(args), **options.from_args(args)}
    except InvalidArgumentError as e:
        raise CliError(str(e)) from None


def open_store(args: argparse.Namespace, create: bool = False):
    uri, security = metadata_uri(args), zk_security(args)
    import_store_modules(uri)  # before a switch of user (the interpreter's files may be root's)
    run_as_store_owner(uri, getattr(args, "shell_command", "shell"))  # issue 33: root -> owner
    try:
        return open_metadata(uri, timeout_s=args.timeout_s, create=create,
                             zk_security=security)
    except MetadataError as e:
        raise CliError(str(e)) from None


def print_json(doc: Any) -> None:
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")


def with_store(args: argparse.Namespace, body: Callable, create: bool = False) -> int:
    store = open_store(args, create=create)
    try:
        return body(store)
    except MetadataError as e:
        raise CliError(str(e)) from None
    finally:
        store.close()


def store_exists(args: argparse.Namespace) -> bool:
    """Whether the URI names an initialised store now (opened and closed again)."""
    uri, security = metadata_uri(args), zk_security(args)
    import_store_modules(uri)
    run_as_store_owner(uri, getattr(args, "shell_command", "shell"))
    try:
        open_metadata(uri, timeout_s=args.timeout_s, zk_security=security).close()
    except NoSuchStoreError:
        return False
    except MetadataError as e:
        raise CliError(str(e)) from None
    return True


def refuse_while_registered(store, args: argparse.Namespace) -> None:
    """Wiping under running bookies takes their cookies and ledgers from under them: only
    when told so explicitly."""
    registered = store.list_bookies() + store.list_bookies(readonly=True)
    if registered and not getattr(args, "force_while_bookies_registered", False):
        raise CliError(f"bookies are registered (running) in this store: {', '.join(registered)}; "
                       f"stop them first, or add --force-while-bookies-registered to wipe anyway")


def import_store_modules(uri: str | None) -> None:
    """Import what opening ``uri`` needs while the interpreter's files are still readable (a
    tool that switches to the bookie's user does so after its imports)."""
    if uri and uri.startswith("lmdb"):
        from bookie.metadata import embedded  # lazy: lmdb; noqa: F401
    elif uri:
        from bookie.metadata import zk  # lazy: kazoo; noqa: F401
