"""Client configuration from a command line: ``--client-conf FILE`` and ``--set KEY=VALUE``.

Every operator tool that builds a client (``bookie shell simpletest``, ``recover``, ``readledger``,
``bookie bench writes`` ...) takes its client keys here, so a CURVE bookie's enrolled key (or any
other client key: ``speculativeReadTimeout``, ``readTimeout``) reaches the tool the same way::

    bookie shell simpletest --metadata URI --client-conf client.conf
    bookie bench writes --metadata URI --set curveSecretKeyFile=alice.key_secret \\
        --set curveServerKeys=bookie.key

The file is Java-properties text, as a bookie's configuration file: ``key=value`` (or
``key: value``) lines, ``#`` and ``!`` comments.  Its keys are the client's (``ClientConfig``);
each ``--set`` overrides the file.  Values are typed by the key (integer, number, true/false,
text) and checked as ``ClientConfig.build`` checks every client configuration, before the tool
starts: an unknown key or a bad value is an ``InvalidArgumentError`` of one line naming it.
"""

from __future__ import annotations

import argparse

from bookie import properties
from bookie.client.config import ClientConfig
from bookie.client.errors import (BadVersionError, DigestMismatchError, InvalidArgumentError,
                                  LedgerClosedError, LedgerFencedError, NoSuchEntryError,
                                  NoSuchLedgerError, UnauthorizedError)
from bookie.properties import PropertiesError


def parse_properties(text: str, source: str) -> dict[str, str]:
    """``key=value`` lines -> raw strings (bookie.properties); a malformed line is refused."""
    try:
        return properties.parse_properties(text, source)
    except PropertiesError as e:
        raise InvalidArgumentError(str(e)) from None


def typed(raw: dict[str, str], source: str) -> dict:
    """Raw strings -> values of each key's type (``ClientConfig.convert``).  Unknown keys pass
    through untouched (for ``ClientConfig.build`` to name, with the list of known ones)."""
    out: dict = {}
    for key, text in raw.items():
        try:
            out[key] = text if key == "passwd" else ClientConfig.convert(key, text)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{source}: {e}") from None
    return out


def client_keys(conf_file: str | None = None, overrides: list[str] | None = None) -> dict:
    """The client keys of ``conf_file`` (may be None) with ``overrides`` ("KEY=VALUE") over them.

    Returns:
        only the keys given, typed (``passwd`` stays text), ready for ``BookKeeper(uri, keys)``.
    Raises:
        InvalidArgumentError: an unreadable file, a malformed line or item, an unknown key, a
            bad value; one line naming it.
    """
    keys: dict = {}
    try:
        if conf_file:
            keys.update(typed(properties.read_properties(conf_file, "--client-conf"),
                              f"--client-conf {conf_file}"))
        keys.update(typed(properties.parse_assignments(overrides, "--set"), "--set"))
    except PropertiesError as e:
        raise InvalidArgumentError(str(e)) from None
    ClientConfig.build(keys)  # unknown keys, ranges, a CURVE pair that goes together
    from bookie.client.auth import client_curve  # lazy: zmq.auth
    client_curve(ClientConfig.build(keys))  # key files readable now, not after the tool started
    return keys


def metadata_uri(keys: dict) -> str:
    """The metadata store ``keys`` (as ``client_keys`` returns them) name: metadataServiceUri,
    else zkServers under zkLedgersRootPath, else ""."""
    return ClientConfig.build(keys).metadata_uri


def curve_hint(keys: dict, error: BaseException | None = None) -> str:
    """What to add to a tool's failure when it ran without CURVE keys: a CURVE bookie never
    answers such a client, which looks like a dead bookie from here.  Nothing when ``error``
    is an answer (a wrong password, no such ledger or entry, a fence, a digest: CURVE cannot
    be their cause) or names CURVE already."""
    if keys.get("curveSecretKeyFile"):
        return ""
    if isinstance(error, (UnauthorizedError, NoSuchLedgerError, NoSuchEntryError,
                          LedgerFencedError, LedgerClosedError, DigestMismatchError,
                          InvalidArgumentError, BadVersionError)) or "CURVE" in str(error or ""):
        return ""
    return ("; if the bookies speak CURVE, pass an enrolled key: --client-conf FILE or --set "
            "curveSecretKeyFile=NAME.key_secret (the bookies' keys come from their registrations)")


def add_arguments(parser: argparse.ArgumentParser, set_flags: tuple[str, ...] = ("--set",)
                  ) -> None:
    """``--client-conf FILE`` and the repeatable ``--client-set KEY=VALUE`` (also spelled as
    each of ``set_flags``, where the tool has no other ``--set``)."""
    group = parser.add_argument_group("client configuration (a CURVE bookie needs the keys)")
    group.add_argument("--client-conf", metavar="FILE", default=None,
                       help="client properties file (key=value lines, BookKeeper's "
                            "client.conf): e.g. metadataServiceUri (used when --metadata is "
                            "not given), curveSecretKeyFile, curveServerKeys, "
                            "readEntryTimeoutSec, speculativeReadTimeout")
    group.add_argument(*set_flags, "--client-set", dest="client_set", metavar="KEY=VALUE",
                       action="append", default=[],
                       help="one client key, over --client-conf (repeatable)")


def from_args(args: argparse.Namespace) -> dict:
    """``client_keys`` of the options ``add_arguments`` added."""
    return client_keys(args.client_conf, args.client_set)
