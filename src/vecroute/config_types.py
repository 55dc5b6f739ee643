"""The configuration's types, and the checks every section's parser shares.

The lowest layer of the slow path: the FIB, firewall, SRv6 tables, graph and I/O take a
``Config`` (or read a file the configuration names) without importing the control plane,
which parses a TOML file into these (``vecroute.control.config``). Every error is one line
that names the file, the key and what is wrong.
"""
from __future__ import annotations

import ipaddress
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


MAX_CONFIG_BYTES = 256 << 20  # a config file (a full table in [[routes]] is ~55 MB) or a rules_file
MAX_SOCKET_PATH = 107  # bytes in an AF_UNIX path (sun_path holds 108 with its NUL)


class ConfigError(ValueError):
    """A user error in a configuration file (one line: file, key, problem)."""


class FileReadError(ValueError):
    """A file named by the configuration cannot be read: why, in one line (never what
    the file holds)."""


def read_regular_file(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or FileReadError.

    Only regular files: a FIFO would block the reader forever, a device could hand out
    endless data or act on being opened. The path is looked at before it is opened, and
    opened non-blocking (a FIFO that appears in between does not block either)."""
    p = str(path)
    if "\0" in p:
        raise FileReadError("not a file name (a NUL byte)")
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            raise FileReadError("not a regular file")
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise FileReadError(e.strerror or type(e).__name__) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileReadError("not a regular file")
        if st.st_size > limit:
            raise FileReadError(f"larger than {limit} bytes")
        parts, n = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            n += len(chunk)
            if n > limit:  # it grew while being read
                raise FileReadError(f"larger than {limit} bytes")
            parts.append(chunk)
        return b"".join(parts)
    except OSError as e:
        raise FileReadError(e.strerror or type(e).__name__) from None
    finally:
        os.close(fd)


@dataclass
class InterfaceConfig:
    name: str
    mac: bytes | None
    addresses: list[IPInterface]
    mtu: int = 1500
    table: int = 0
    redirects: bool = True
    host_if: str | None = None  # linux-cp: the name of its Linux mirror (a TAP)


@dataclass
class RouteConfig:
    prefix: IPNetwork
    via: list[IPAddress]
    dev: str | None = None
    table: int = 0
    weights: list[int] | None = None
    blackhole: bool = False


@dataclass
class NeighborConfig:
    ip: IPAddress
    mac: bytes
    interface: str


MS = 1_000_000  # nanoseconds


@dataclass
class NeighborSettings:
    """``[neighbor_table]``: ARP/ND timers (Linux's defaults) and the limits that bound
    what hosts on a port can make the router remember (Linux gc_thresh1/2/3, unres_qlen).
    Times are nanoseconds here, milliseconds in the file."""

    reachable_ns: int = 30_000 * MS  # base_reachable_time
    delay_first_probe_ns: int = 5_000 * MS
    retrans_ns: int = 1_000 * MS
    max_probes: int = 3  # ucast_solicit / mcast_solicit
    failed_hold_ns: int = 20_000 * MS  # how long a failed entry is remembered
    queue_len: int = 100  # packets held per unresolved neighbour (unres_qlen)
    queue_total: int = 4096  # packets held for all unresolved neighbours together
    gc_thresh1: int = 128  # per family: below this, nothing is collected
    gc_thresh2: int = 512  # per family: above this, a forced collection every 5 s at most
    gc_thresh3: int = 1024  # per family: the hard limit
    per_interface: int = 512  # per family and interface: one port cannot fill the table
    gc_stale_ns: int = 60_000 * MS  # unused this long (and above gc_thresh1): collected
    probe_rate: int = 1000  # ARP requests / NS sent per second, all neighbours together
    probe_burst: int = 200


@dataclass
class IcmpConfig:
    rate: int = 1000  # errors per second (Linux net.ipv4.icmp_msgs_per_sec)
    burst: int = 50  # bucket size (Linux net.ipv4.icmp_msgs_burst)
    tcp_reset_rate: int = 1000  # RSTs per second (`reset` rules, closed ports; a bucket apart)
    tcp_reset_burst: int = 50


@dataclass
class RouterConfig:
    workers: int = 1
    vector_size: int = 256
    tx: str = "auto"  # auto | ring | sendmmsg
    poll: str = "adaptive"  # adaptive | interrupt | busy (how an idle worker waits)
    spin_us: int = 200  # adaptive: how long a worker stays awake after the last packet
    control_ring: bool = True  # frames for the router get their own RX ring per port


@dataclass
class ControlConfig:
    socket: str = "/run/vecroute/vecroute.sock"


DEFAULT_METRICS_LISTEN = "127.0.0.1:9475"


@dataclass
class MetricsConfig:
    """``[metrics]``: serve ``/metrics`` (Prometheus text format) on ``host:port``."""

    host: str = "127.0.0.1"  # an IP address literal (no name lookups: a start never waits)
    port: int = 9475

    @property
    def listen(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: Any) -> tuple[str, int]:
    """``ADDRESS:PORT`` (IPv6 in brackets) -> (address, port); ValueError says why.

    Only address literals: a host name would make the start wait on a resolver and could
    bind somewhere else next time. No scope ids (``fe80::1%eth0``), port 1..65535."""
    usage = "expected ADDRESS:PORT like 127.0.0.1:9475 or [::1]:9475"
    if not isinstance(text, str) or len(text) > 64:  # an error line quotes it
        raise ValueError(f"{usage}, got {type(text).__name__} of {len(str(text))} characters")
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r}: {usage}")
    if host.startswith("[") and host.endswith("]"):
        host, want = host[1:-1], 6
    else:
        want = 4
    if "%" in host or (want == 4 and ":" in host):
        raise ValueError(f"{text!r}: {usage} (IPv6 in brackets, no %scope)")
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{text!r}: {host!r} is not an IP address ({usage})") from None
    if addr.version != want:
        raise ValueError(f"{text!r}: {usage}")
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise ValueError(f"{text!r}: port {port!r} is not a number 1..65535")
    return str(addr), int(port)


MIRROR_MTU_MAX = 2018  # the most a punt / inject record carries (2032) minus Ethernet


@dataclass
class LinuxCpConfig:
    """``[linux_cp]``: Linux is the control plane; each port with ``host_if`` gets a TAP
    mirror there (docs/linux-cp.md)."""

    netns: str | None = None  # the mirrors' network namespace (None: vecroute's own)
    punt_rate: int = 20000  # frames per second and port (per worker) to the mirror, and
    punt_burst: int = 256  # from it; a burst fits a quarter of the worker's punt ring
    sync: bool = True  # mirror the kernel's routes, addresses, neighbours over netlink


DEFAULT_CAPTURE_DIR = "/var/lib/vecroute/capture"


@dataclass
class CaptureConfig:
    """``[capture]``: where ``ctl pcap start`` may create files, and how big they grow."""

    directory: str = DEFAULT_CAPTURE_DIR
    max_bytes: int = 100 * 2**20


@dataclass
class Config:
    path: str
    interfaces: list[InterfaceConfig]
    routes: list[RouteConfig] = field(default_factory=list)
    neighbors: list[NeighborConfig] = field(default_factory=list)
    neighbor_table: NeighborSettings = field(default_factory=NeighborSettings)
    icmp: IcmpConfig = field(default_factory=IcmpConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    raw: dict[str, Any] = field(default_factory=dict)
    firewall: Any = None  # a vecroute.firewall.config.FirewallConfig; None: no firewall
    metrics: MetricsConfig | None = None  # None: no [metrics] section, no exporter
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    linux_cp: LinuxCpConfig | None = None  # None: no [linux_cp] section

    def interface_index(self, name: str) -> int:
        for i, itf in enumerate(self.interfaces):
            if itf.name == name:
                return i
        raise KeyError(name)


def parse_mac(text: Any, where: str) -> bytes:
    if not isinstance(text, str) or not _MAC_RE.fullmatch(text):
        raise ConfigError(f"{where}: {text!r} is not a MAC address like 02:00:00:00:00:01")
    return bytes(int(b, 16) for b in text.split(":"))


def valid_ifname(name: Any) -> bool:
    """A Linux interface name (dev_valid_name): 1-15 bytes, not "." or "..", no "/",
    ":", whitespace or NUL; here also printable ASCII only (it names /sys and /proc
    paths and is echoed in logs)."""
    return (
        isinstance(name, str)
        and 1 <= len(name) <= 15
        and name not in (".", "..")
        and name.isascii()
        and name.isprintable()
        and not any(c in name for c in "/: ")
    )


def format_mac(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


class TableReader:
    """Typed access to one TOML table with errors that say where."""

    def __init__(self, path: str, where: str, table: Any, allowed: set[str]) -> None:
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {where}: expected a table, got {type(table).__name__}")
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise ConfigError(
                f"{path}: {where}.{unknown[0]}: unknown key (allowed: {', '.join(sorted(allowed))})"
            )
        self.path, self.where, self.table = path, where, table

    def err(self, key: str, msg: str) -> ConfigError:
        return ConfigError(f"{self.path}: {self.where}.{key}: {msg}")

    def get(
        self, key: str, kind: type | tuple[type, ...], default: Any = ..., *, required: bool = False
    ) -> Any:
        if key not in self.table:
            if required or default is ...:
                raise self.err(key, "missing (required)")
            return default
        v = self.table[key]
        if isinstance(v, bool) and kind is int:
            raise self.err(key, f"expected an integer, got {v!r}")
        if not isinstance(v, kind):
            name = (
                kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            )
            raise self.err(key, f"expected {name}, got {type(v).__name__} {v!r}")
        return v

    def int_range(self, key: str, default: int, lo: int, hi: int) -> int:
        v = self.get(key, int, default)
        if not lo <= v <= hi:
            raise self.err(key, f"{v} out of range {lo}..{hi}")
        return v
