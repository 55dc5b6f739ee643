"""The TOML configuration: parsed and validated into plain dataclasses.

Every error names the file, the key (with its index, e.g. ``routes[2].via``) and what is
wrong, as one line; the CLI prints it and exits 2. Unknown keys are errors too, so a typo
never silently changes the router's behaviour.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
import tomllib
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


# (key in the file, attribute, low, high, scale): every limit checked, in one place
_NEIGHBOR_KEYS = (
    ("reachable_time_ms", "reachable_ns", 1_000, 3_600_000, MS),
    ("delay_first_probe_ms", "delay_first_probe_ns", 100, 60_000, MS),
    ("retrans_time_ms", "retrans_ns", 100, 60_000, MS),
    ("max_probes", "max_probes", 1, 20, 1),
    ("failed_hold_ms", "failed_hold_ns", 0, 3_600_000, MS),
    ("queue_len", "queue_len", 0, 10_000, 1),
    ("queue_total", "queue_total", 0, 1_000_000, 1),
    ("gc_thresh1", "gc_thresh1", 0, 1_000_000, 1),
    ("gc_thresh2", "gc_thresh2", 1, 1_000_000, 1),
    ("gc_thresh3", "gc_thresh3", 1, 1_000_000, 1),
    ("per_interface", "per_interface", 1, 1_000_000, 1),
    ("gc_stale_time_ms", "gc_stale_ns", 1_000, 86_400_000, MS),
    ("probe_rate", "probe_rate", 1, 1_000_000, 1),
    ("probe_burst", "probe_burst", 1, 1_000_000, 1),
)


def _neighbor_settings(path: str, table: Any) -> NeighborSettings:
    r = _Reader(path, "neighbor_table", table, {k[0] for k in _NEIGHBOR_KEYS})
    st = NeighborSettings()
    for key, attr, lo, hi, scale in _NEIGHBOR_KEYS:
        default = getattr(st, attr) // scale
        setattr(st, attr, r.int_range(key, default, lo, hi) * scale)
    if not st.gc_thresh1 <= st.gc_thresh2 <= st.gc_thresh3:
        raise r.err("gc_thresh2", "needs gc_thresh1 <= gc_thresh2 <= gc_thresh3")
    return st


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


class _Reader:
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


def _addr(r: _Reader, key: str, text: Any) -> IPAddress:
    # ip_address(5) would quietly be 0.0.0.5; "fe80::1%eth0" would carry a scope id that
    # makes it unequal to the same address elsewhere
    if not isinstance(text, str) or "%" in text:
        raise r.err(key, f"{text!r} is not an IPv4 or IPv6 address")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise r.err(key, f"{text!r} is not an IPv4 or IPv6 address") from None


def _section_list(path: str, data: dict, key: str) -> list[dict]:
    v = data.get(key, [])
    if not isinstance(v, list):
        raise ConfigError(f"{path}: {key}: expected an array of tables ([[{key}]])")
    return v


def parse_config(data: dict[str, Any], path: str = "<config>") -> Config:
    """Validate a parsed TOML document into a Config (raises ConfigError)."""
    top = _Reader(
        path,
        "<top>",
        data,
        {"interfaces", "routes", "neighbors", "neighbor_table", "icmp", "router", "control",
         "firewall", "srv6", "metrics", "capture", "linux_cp"},
    )
    _ = top
    interfaces: list[InterfaceConfig] = []
    names: set[str] = set()
    for n, t in enumerate(_section_list(path, data, "interfaces")):
        r = _Reader(path, f"interfaces[{n}]", t,
                    {"name", "mac", "addresses", "mtu", "table", "redirects", "host_if"})
        name = r.get("name", str, required=True)
        if not valid_ifname(name):
            raise r.err("name", f"{name!r} is not a valid interface name (1-15 printable "
                        "ASCII characters, not . or .., no /, : or white space)")
        if name in names:
            raise r.err("name", f"interface {name!r} defined twice")
        names.add(name)
        mac = parse_mac(t["mac"], f"{path}: interfaces[{n}].mac") if "mac" in t else None
        if mac is not None and (mac[0] & 1 or mac == bytes(6)):  # a source MAC: unicast
            raise r.err("mac", f"{t['mac']} is not a unicast MAC address")
        addrs: list[IPInterface] = []
        for a in r.get("addresses", list, []):
            try:
                # ip_interface(5) would be 0.0.0.5/32; "fe80::1%eth0/64" carries a scope
                if not isinstance(a, str) or "%" in a:
                    raise TypeError
                addrs.append(ipaddress.ip_interface(a))
            except (ValueError, TypeError):
                raise r.err("addresses", f"{a!r} is not an address/prefix-length") from None
        mtu = r.int_range("mtu", 1500, 68, 9000)
        if any(a.version == 6 for a in addrs) and mtu < 1280:
            raise r.err("mtu", f"{mtu} is below the IPv6 minimum of 1280 on an IPv6 interface")
        host_if = r.get("host_if", str, None)
        if host_if is not None and not valid_ifname(host_if):
            raise r.err("host_if", f"{host_if!r} is not a valid interface name (1-15 printable"
                        " ASCII characters, not . or .., no /, : or white space)")
        interfaces.append(
            InterfaceConfig(name, mac, addrs, mtu, r.int_range("table", 0, 0, 2**32 - 1),
                            r.get("redirects", bool, True), host_if)
        )
    if not interfaces:
        raise ConfigError(f"{path}: interfaces: at least one [[interfaces]] is required")
    mirrors = [i.host_if for i in interfaces if i.host_if]
    for n, itf in enumerate(interfaces):
        if itf.host_if and itf.mtu > MIRROR_MTU_MAX:
            raise ConfigError(f"{path}: interfaces[{n}].mtu: {itf.mtu} with host_if: a mirror "
                              f"carries frames of at most {MIRROR_MTU_MAX} bytes of IP (a "
                              "punt or inject record holds 2032)")
        if itf.host_if and (mirrors.count(itf.host_if) > 1 or itf.host_if in names):
            raise ConfigError(f"{path}: interfaces[{n}].host_if: {itf.host_if!r} names another"
                              " interface or mirror (each mirror is a new interface of its own)")

    routes: list[RouteConfig] = []
    hops: dict[str, IPAddress] = {}
    for n, t in enumerate(_section_list(path, data, "routes")):
        r = _Reader(
            path, f"routes[{n}]", t, {"prefix", "via", "dev", "table", "weights", "blackhole"}
        )
        p = r.get("prefix", str, required=True)
        try:
            if "%" in p:  # a scope id
                raise ValueError
            prefix = ipaddress.ip_network(p, strict=False)
        except ValueError:
            raise r.err("prefix", f"{p!r} is not a prefix like 203.0.113.0/24") from None
        via_raw = r.get("via", (str, list), [])
        via_list = [via_raw] if isinstance(via_raw, str) else via_raw
        via = []
        for v in via_list:  # a full table names a few next hops 900,000 times: each
            a = hops.get(v) if isinstance(v, str) else None  # text is parsed once
            if a is None:
                a = _addr(r, "via", v)  # (the error for anything not an address text)
                hops[v] = a
            via.append(a)
        for v in via:
            if v.version != prefix.version:
                raise r.err("via", f"next hop {v} is not IPv{prefix.version} like the prefix")
        dev = r.get("dev", str, None)
        if dev is not None and dev not in names:
            raise r.err("dev", f"no interface named {dev!r}")
        blackhole = r.get("blackhole", bool, False)
        if not via and dev is None and not blackhole:
            raise r.err("via", "a route needs via, dev or blackhole = true")
        weights = r.get("weights", list, None)
        if weights is not None and (
            len(weights) != len(via)
            or not all(isinstance(w, int) and 1 <= w <= 64 for w in weights)
        ):
            raise r.err("weights", "one integer weight 1..64 per next hop in via")
        buckets = sum(weights) if weights is not None else len(via)
        if buckets > 64:  # the load-balance holds at most 64 ECMP buckets
            raise r.err(
                "weights" if weights is not None else "via",
                f"ECMP paths add up to {buckets} buckets, at most 64",
            )
        routes.append(
            RouteConfig(prefix, via, dev, r.int_range("table", 0, 0, 2**32 - 1), weights, blackhole)
        )

    neighbors: list[NeighborConfig] = []
    for n, t in enumerate(_section_list(path, data, "neighbors")):
        r = _Reader(path, f"neighbors[{n}]", t, {"ip", "mac", "interface"})
        ip = _addr(r, "ip", r.get("ip", str, required=True))
        mac = parse_mac(r.get("mac", str, required=True), f"{path}: neighbors[{n}].mac")
        itf = r.get("interface", str, required=True)
        if itf not in names:
            raise r.err("interface", f"no interface named {itf!r}")
        neighbors.append(NeighborConfig(ip, mac, itf))

    icmp = IcmpConfig()
    if "icmp" in data:
        r = _Reader(
            path, "icmp", data["icmp"], {"rate", "burst", "tcp_reset_rate", "tcp_reset_burst"}
        )
        icmp = IcmpConfig(
            r.int_range("rate", 1000, 0, 10**7),
            r.int_range("burst", 50, 0, 10**6),
            r.int_range("tcp_reset_rate", 1000, 0, 10**7),
            r.int_range("tcp_reset_burst", 50, 0, 10**6),
        )
    router = RouterConfig()
    if "router" in data:
        r = _Reader(
            path, "router", data["router"],
            {"workers", "vector_size", "tx", "poll", "spin_us", "control_ring"},
        )
        tx = r.get("tx", str, "auto")
        if tx not in ("auto", "ring", "sendmmsg"):
            raise r.err("tx", f"{tx!r}: expected auto, ring or sendmmsg")
        poll = r.get("poll", str, "adaptive")
        if poll not in ("adaptive", "interrupt", "busy"):
            raise r.err("poll", f"{poll!r}: expected adaptive, interrupt or busy")
        router = RouterConfig(
            r.int_range("workers", 1, 1, 64), r.int_range("vector_size", 256, 1, 4096), tx,
            poll, r.int_range("spin_us", 200, 0, 1_000_000), r.get("control_ring", bool, True),
        )
    control = ControlConfig()
    if "control" in data:
        r = _Reader(path, "control", data["control"], {"socket"})
        sock = r.get("socket", str, ControlConfig.socket)
        if not sock or "\0" in sock or len(os.fsencode(sock)) > MAX_SOCKET_PATH:
            raise r.err("socket", f"expected a path of 1..{MAX_SOCKET_PATH} bytes, no NUL")
        control = ControlConfig(sock)
    metrics = None
    if "metrics" in data:
        r = _Reader(path, "metrics", data["metrics"], {"listen"})
        listen = r.get("listen", str, DEFAULT_METRICS_LISTEN)
        try:
            metrics = MetricsConfig(*parse_listen(listen))
        except ValueError as e:
            raise r.err("listen", str(e)) from None
    capture = CaptureConfig()
    if "capture" in data:
        r = _Reader(path, "capture", data["capture"], {"directory", "max_bytes"})
        d = r.get("directory", str, DEFAULT_CAPTURE_DIR)
        if not d.startswith("/") or "\0" in d or len(os.fsencode(d)) > 4096:
            raise r.err("directory", "expected an absolute path, no NUL")
        capture = CaptureConfig(d, r.int_range("max_bytes", CaptureConfig.max_bytes, 4096,
                                               2**40))
    linux_cp = None
    if "linux_cp" in data:
        r = _Reader(path, "linux_cp", data["linux_cp"], {"netns", "punt_rate", "punt_burst",
                                                         "sync"})
        ns = r.get("netns", str, None)
        if ns is not None and not (0 < len(ns) <= 64 and ns.isascii() and ns.isprintable()
                                   and "/" not in ns and ns not in (".", "..")):
            raise r.err("netns", f"{ns[:40]!r}: expected a network namespace name (1-64 "
                        "printable ASCII characters, no /)")
        linux_cp = LinuxCpConfig(ns, r.int_range("punt_rate", 20000, 1, 10**7),
                                 r.int_range("punt_burst", 256, 1, 10**6),
                                 r.get("sync", bool, True))
        if not any(i.host_if for i in interfaces):
            raise ConfigError(f"{path}: linux_cp: needs at least one [[interfaces]] with "
                              "host_if")
    elif any(i.host_if for i in interfaces):
        n = next(k for k, i in enumerate(interfaces) if i.host_if)
        raise ConfigError(f"{path}: interfaces[{n}].host_if: needs a [linux_cp] section")
    firewall = None
    if "firewall" in data:
        from vecroute.firewall.config import parse_firewall_config  # (it imports this module)

        base = Path(path).parent if path != "<config>" else Path(".")
        firewall = parse_firewall_config(data["firewall"], path, base)
        firewall.check_interfaces([i.name for i in interfaces])
    settings = _neighbor_settings(path, data.get("neighbor_table", {}))
    return Config(path, interfaces, routes, neighbors, settings, icmp, router, control, data,
                  firewall, metrics, capture, linux_cp)


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML config file (raises ConfigError with a one-line message).

    Every way a file can be wrong is a ConfigError: not a regular file or too large, not
    UTF-8 (the byte offset is named, the content never), not TOML, nested too deep, an
    integer of thousands of digits, a value of the wrong type anywhere."""
    p = Path(path)
    try:
        raw = read_regular_file(p, MAX_CONFIG_BYTES)
    except FileReadError as e:
        raise ConfigError(f"{p}: cannot read: {e}") from None
    try:
        text = raw.decode()
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{p}: line {line}: not UTF-8 text (byte {e.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: invalid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{p}: invalid TOML: arrays or tables nested too deep") from None
    except ValueError as e:  # int() of more than 4300 digits
        raise ConfigError(f"{p}: invalid TOML: {e}") from None
    return parse_config(data, str(p))
