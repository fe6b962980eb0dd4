"""Java-properties text and the one vocabulary of its values, for every configuration surface.

Every place a person writes a configuration value reads it through this module: the bookie's
configuration file and ``--set`` (``workers/config.py``), the client's configuration given as
keyword arguments, a dict, a ``client.conf`` file or ``--set`` (``client/config.py``,
``client/options.py``), the Spark format's ``bookkeeper.<key>`` options (``spark/options.py``),
the admin API's query parameters, and the test fixtures' options.  So a value means the same
wherever it is written:

- **Booleans**: ``true``, ``yes``, ``on``, ``1`` are true; ``false``, ``no``, ``off``, ``0`` are
  false; case and surrounding blanks do not matter.  Anything else is refused, naming it (a
  misspelt ``flase`` must not turn into "true" because it is a non-empty string).  Python's
  ``True`` / ``False`` are themselves.
- **Integers**: decimal, ``_`` between digits allowed (``65_536``); a boolean is not one.
- **Numbers**: what ``float`` reads.
- **Text**: as written, blanks around it removed.

The file format, as BookKeeper's ``bk_server.conf`` and ``client.conf``: one ``key=value`` (or
``key: value``) per line, the first ``=`` or ``:`` separating them; blank lines and lines
starting with ``#`` or ``!`` are ignored.  A line that is none of these is refused with its
source and line number.

Errors are ``PropertiesError`` (a ``ValueError``), one line naming the value; each surface wraps
it in its own error type with the key and where it came from.

This module is ground layer: it imports nothing of the package, so the bookie, the client and
the tools can all use it.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "0"})


class PropertiesError(ValueError):
    """A value or line that cannot be read; the message is one line naming it."""


def parse_bool(value: Any) -> bool:
    """``value`` (a bool or a word of the vocabulary above) as a bool.

    Raises:
        PropertiesError: anything else ("... is not true or false").
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise PropertiesError(f"{value!r} is not true or false (true/yes/on/1, false/no/off/0)")


def format_bool(value: bool) -> str:
    """The canonical spelling of a boolean in a properties file."""
    return "true" if value else "false"


def parse_int(value: Any) -> int:
    """``value`` (an int or its decimal text, ``_`` allowed) as an int; a bool is refused."""
    if isinstance(value, bool):
        raise PropertiesError(f"{value!r} is not an integer")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip().replace("_", ""))
    except ValueError:
        raise PropertiesError(f"{value!r} is not an integer") from None


def parse_float(value: Any) -> float:
    """``value`` (a number or its text) as a float; a bool is refused."""
    if isinstance(value, bool):
        raise PropertiesError(f"{value!r} is not a number")
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise PropertiesError(f"{value!r} is not a number") from None


def parse_value(kind: str, value: Any) -> Any:
    """``value`` as ``kind``: ``"bool"``, ``"int"``, ``"float"`` or ``"str"`` (text: stripped;
    a non-text value is kept as it is).  Raises PropertiesError."""
    if kind == "bool":
        return parse_bool(value)
    if kind == "int":
        return parse_int(value)
    if kind == "float":
        return parse_float(value)
    return value.strip() if isinstance(value, str) else value


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Java-properties text -> ``{key: raw value}`` (strings, not typed yet; a later line wins).

    Raises:
        PropertiesError: ``source:line: expected key=value, got '...'``.
    """
    return {key: value for _, key, value in property_lines(text, source)}


def property_lines(text: str, source: str = "<properties>") -> Iterator[tuple[int, str, str]]:
    """``(line number, key, raw value)`` of each assignment of Java-properties text, in order
    (a key may come twice: ``parse_properties`` keeps the later).

    Raises:
        PropertiesError: ``source:line: expected key=value, got '...'``.
    """
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        sep = min((i for i in (s.find("="), s.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise PropertiesError(f"{source}:{lineno}: expected key=value, got {s!r}")
        yield lineno, s[:sep].strip(), s[sep + 1:].strip()


def read_properties(path: str, what: str = "--conf") -> dict[str, str]:
    """``parse_properties`` of the file at ``path``.

    Raises:
        PropertiesError: the file cannot be read (``what path: reason``) or a line is malformed.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise PropertiesError(f"{what} {path}: cannot read: "
                              f"{getattr(e, 'strerror', None) or e}") from None
    return parse_properties(text, path)


def parse_assignments(items: Iterable[str] | None, flag: str = "--set",
                      form: str = "KEY=VALUE") -> dict[str, str]:
    """Command-line ``KEY=VALUE`` items (``--set``) -> ``{key: raw value}``; a later item wins.

    Raises:
        PropertiesError: an item without ``=`` or with an empty key, named with ``flag``
            (``--set 'x': expected KEY=VALUE``, the tool's own spelling ``form``).
    """
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PropertiesError(f"{flag} {item!r}: expected {form}")
        out[key.strip()] = value
    return out


# -- the metadata store a configuration names (BookKeeper's keys, bookie and client alike) ---

def zk_hosts(text: str) -> str:
    """ZooKeeper hosts as the metadata URI wants them: ``host:port`` joined by ``,``.

    BookKeeper writes ``,`` in ``zkServers`` and ``;`` inside a metadata service URI (where ``,``
    is awkward); either separator, and spaces around hosts, are accepted here.
    """
    return ",".join(h.strip() for h in text.replace(";", ",").split(",") if h.strip())


def normalise_uri(uri: str) -> str:
    """A metadata URI with BookKeeper's ``;`` between ZooKeeper hosts rewritten to ``,``."""
    scheme, sep, rest = uri.partition("://")
    if not sep or not scheme.lower().startswith("zk"):
        return uri
    hosts, slash, root = rest.partition("/")
    return f"{scheme}://{zk_hosts(hosts)}{slash}{root}"


def resolve_metadata_uri(values: dict[str, Any]) -> str:
    """The metadata store a configuration (a bookie's or a client's: the keys are BookKeeper's,
    the same for both) names: ``metadataServiceUri``, else ``zkServers`` under
    ``zkLedgersRootPath`` (``zk://`` keeps the layout the root was formatted with), else "" (none).
    """
    if values["metadataServiceUri"]:
        return normalise_uri(values["metadataServiceUri"])
    if values["zkServers"]:
        return f"zk://{zk_hosts(values['zkServers'])}{values['zkLedgersRootPath']}"
    return ""


def check_location(location: str) -> str | None:
    """None when ``location`` is a bookie location ``/REGION/RACK`` (BookKeeper's network
    location: two non-empty parts), else a complaint (``bookieLocation``, placement)."""
    parts = location.split("/")
    if len(parts) != 3 or parts[0] or not parts[1] or not parts[2]:
        return "must be /REGION/RACK, e.g. /eu-west/rack1"
    return None
