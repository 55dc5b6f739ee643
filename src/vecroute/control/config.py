"""The TOML configuration: parsed and validated into plain dataclasses.

Every error names the file, the key (with its index, e.g. ``routes[2].via``) and what is
wrong, as one line; the CLI prints it and exits 2. Unknown keys are errors too, so a typo
never silently changes the router's behaviour.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from pathlib import Path
from typing import Any

from vecroute.config_types import (
    DEFAULT_CAPTURE_DIR,
    DEFAULT_METRICS_LISTEN,
    MAX_CONFIG_BYTES,
    MAX_SOCKET_PATH,
    MIRROR_MTU_MAX,
    MS,
    CaptureConfig,
    Config,
    ConfigError,
    ControlConfig,
    FileReadError,
    IcmpConfig,
    InterfaceConfig,
    IPAddress,
    IPInterface,
    LinuxCpConfig,
    MetricsConfig,
    NeighborConfig,
    NeighborSettings,
    RouteConfig,
    RouterConfig,
    TableReader,
    parse_listen,
    parse_mac,
    read_regular_file,
    valid_ifname,
)
from vecroute.firewall.config import parse_firewall_config

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
    r = TableReader(path, "neighbor_table", table, {k[0] for k in _NEIGHBOR_KEYS})
    st = NeighborSettings()
    for key, attr, lo, hi, scale in _NEIGHBOR_KEYS:
        default = getattr(st, attr) // scale
        setattr(st, attr, r.int_range(key, default, lo, hi) * scale)
    if not st.gc_thresh1 <= st.gc_thresh2 <= st.gc_thresh3:
        raise r.err("gc_thresh2", "needs gc_thresh1 <= gc_thresh2 <= gc_thresh3")
    return st


def _addr(r: TableReader, key: str, text: Any) -> IPAddress:
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
    top = TableReader(
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
        r = TableReader(path, f"interfaces[{n}]", t,
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
        r = TableReader(
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
        r = TableReader(path, f"neighbors[{n}]", t, {"ip", "mac", "interface"})
        ip = _addr(r, "ip", r.get("ip", str, required=True))
        mac = parse_mac(r.get("mac", str, required=True), f"{path}: neighbors[{n}].mac")
        itf = r.get("interface", str, required=True)
        if itf not in names:
            raise r.err("interface", f"no interface named {itf!r}")
        neighbors.append(NeighborConfig(ip, mac, itf))

    icmp = IcmpConfig()
    if "icmp" in data:
        r = TableReader(
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
        r = TableReader(
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
        r = TableReader(path, "control", data["control"], {"socket"})
        sock = r.get("socket", str, ControlConfig.socket)
        if not sock or "\0" in sock or len(os.fsencode(sock)) > MAX_SOCKET_PATH:
            raise r.err("socket", f"expected a path of 1..{MAX_SOCKET_PATH} bytes, no NUL")
        control = ControlConfig(sock)
    metrics = None
    if "metrics" in data:
        r = TableReader(path, "metrics", data["metrics"], {"listen"})
        listen = r.get("listen", str, DEFAULT_METRICS_LISTEN)
        try:
            metrics = MetricsConfig(*parse_listen(listen))
        except ValueError as e:
            raise r.err("listen", str(e)) from None
    capture = CaptureConfig()
    if "capture" in data:
        r = TableReader(path, "capture", data["capture"], {"directory", "max_bytes"})
        d = r.get("directory", str, DEFAULT_CAPTURE_DIR)
        if not d.startswith("/") or "\0" in d or len(os.fsencode(d)) > 4096:
            raise r.err("directory", "expected an absolute path, no NUL")
        capture = CaptureConfig(d, r.int_range("max_bytes", CaptureConfig.max_bytes, 4096,
                                               2**40))
    linux_cp = None
    if "linux_cp" in data:
        r = TableReader(path, "linux_cp", data["linux_cp"], {"netns", "punt_rate", "punt_burst",
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
