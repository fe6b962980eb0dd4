"""What ``listeningInterface`` may name, resolved on this host: an IP address of this host (or
the wildcard ``0.0.0.0`` / ``::``), ``localhost``, or a network interface's name (``eth0``,
``lo``: BookKeeper's spelling), which stands for the interface's address (its IPv4 address,
else its first IPv6 one).  Anything else is refused before a socket is made, naming the key:
left to the bind, a word became a DNS lookup and a foreign address "no free port"."""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import socket
import struct

SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


class InterfaceError(ValueError):
    """``listeningInterface`` names nothing this host can listen on; the message says why."""


def interface_names() -> list[str]:
    return [name for _, name in socket.if_nameindex()]


def interface_address(name: str) -> str | None:
    """The address the interface ``name`` listens on (IPv4 first), or None if it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR,
                                 struct.pack("256s", name.encode()[:15]))
            return socket.inet_ntoa(packed[20:24])
        except OSError:
            pass
    try:
        with open("/proc/net/if_inet6") as f:  # hex address, index, prefix, scope, flags, name
            for line in f:
                fields = line.split()
                if len(fields) == 6 and fields[5] == name and fields[3] == "00":  # global scope
                    return str(ipaddress.IPv6Address(bytes.fromhex(fields[0])))
    except OSError:
        pass
    return None


def is_address_of_this_host(address: str) -> bool:
    """Whether a socket can bind ``address`` here (the wildcard and loopback always can)."""
    ip = ipaddress.ip_address(address)
    if ip.is_unspecified or ip.is_loopback:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.bind((address, 0))
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:
                return False
            raise
    return True


def resolve_listening_interface(value: str, on_this_host: bool = True) -> str:
    """The address to bind for ``listeningInterface=value``.

    Args:
        value: an IP address, ``localhost`` or an interface name, as configured.
        on_this_host: the bookie runs here: a name must be an interface of this host and an
            address one of its addresses.  False (a configuration read for another host):
            only the form is checked, and a name of no local interface is kept as written.
    Raises:
        InterfaceError: one line saying what is wrong with ``value``.
    """
    if value == "localhost":
        return value
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        ip = None
    if ip is not None:
        if on_this_host and not is_address_of_this_host(value):
            raise InterfaceError(f"{value} is not an address of this host (its interfaces: "
                                 f"{', '.join(interface_names())})")
        return value
    if not value or any(c.isspace() or c in "/:%" for c in value) or len(value) > 15 \
            or value.replace(".", "").isdigit():
        raise InterfaceError(f"{value!r} is neither an IP address nor a network interface name")
    if value in interface_names():
        address = interface_address(value)
        if address is None:
            raise InterfaceError(f"interface {value} has no address to listen on")
        return address
    if on_this_host:
        raise InterfaceError(f"{value!r} is neither an IP address nor a network interface of "
                             f"this host (its interfaces: {', '.join(interface_names())})")
    return value
