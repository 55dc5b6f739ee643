"""`vecroute ctl` commands: parse the words, apply them to a router, render the answer.

The grammar follows vppctl / iproute2 (`show routes 203.0.113.0/24`, `route add PREFIX via
NH [via NH …] [dev IF] [table N]`, `neighbor add IP lladdr MAC dev IF`). A malformed command
raises CommandError with one line naming the word that is wrong; nothing is changed then.
Every command returns data (the ``--json`` form) and text built from it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from vecroute.config_types import ConfigError, parse_mac
from vecroute.control.show import (
    RICH_MAX_ROWS,
    ROUTE_COLUMNS,
    RUNTIME_COLUMNS,
    errors_view,
    interfaces_view,
    render_table,
    routes_stream,
    routes_view,
    runtime_view,
)
from vecroute.fib.adjacency import MAX_BUCKETS
from vecroute.fib.fib import Fib, RouteError


class CommandError(ValueError):
    """A malformed or impossible ctl command (one line)."""


class RouterControl(Protocol):
    """What the commands need from a running router."""

    fib: Fib

    def stats(self):  # -> DataPlaneState with counters summed over workers
        ...

    def neighbor_rows(self) -> list[dict]: ...

    def worker_rows(self) -> list[dict]: ...  # the data-plane workers' loop counters

    def socket_rows(self) -> list[dict]: ...  # every worker's data and control rings

    def neighbor_stats(self) -> list[dict]: ...  # [{"stat": name, "count": n}]

    def add_neighbor(self, ip, mac: bytes, ifname: str) -> None: ...

    def del_neighbor(self, ip, ifname: str) -> bool: ...

    def commit(self) -> None:  # push FIB changes to the data path (atomic swap)
        ...

    def clear_counters(self) -> None: ...

    def fw_command(self, argv: list[str]) -> str:  # `fw ...`: ValueError on bad input
        ...

    def trace_add(self, count: int, node: str, match: dict) -> None: ...

    def trace_clear(self) -> None: ...

    def trace_snapshots(self) -> list[tuple[int, dict]]: ...  # (worker, records)

    def trace_explainer(self): ...  # a vecroute.control.trace.TraceExplainer

    def pcap_start(self, iface: str, direction: str, name: str, count: int,
                   snaplen: int) -> dict: ...

    def pcap_stop(self) -> dict: ...

    def pcap_status(self) -> dict | None: ...

    def linux_cp_view(self) -> dict: ...  # ValueError when linux-cp is off


@dataclass
class Reply:
    """A command's answer: ``data`` (what ``--json`` prints) and ``text``.

    A long answer streams its text instead: ``chunks`` is an iterator of pieces of the
    text (``text`` is then unused; an empty piece is a step of preparation work) and
    ``data`` and ``data_error`` are final only once ``chunks`` is exhausted. ``data_error``
    (one line) says why a streamed answer carries no data.
    """

    data: Any
    text: str = ""
    chunks: Iterator[str] | None = None
    data_error: str | None = None

    def complete(self) -> Reply:
        """Exhaust ``chunks`` into ``text`` (for in-process callers and tests)."""
        if self.chunks is not None:
            chunks, self.chunks = self.chunks, None
            self.text = "".join(chunks)
        return self


def _render(title: str, rows: list[dict], columns: list[str] | None = None) -> str:
    return render_table(title, rows, columns)


def _words(argv: list[str], n: int, what: str) -> str:
    if len(argv) <= n:
        raise CommandError(f"missing {what}")
    return argv[n]


MAX_TABLE_ID = 2**32 - 1  # FIB table ids (Linux's are 32-bit too)
MAX_ERROR = 400  # characters in an error line


def _shown(text: str) -> str:
    """A word as an error quotes it: at most 40 characters (a word may have 4096)."""
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _prefix(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        if "%" in text:  # a scope id (fe80::%eth0/64) is no route prefix
            raise ValueError
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise CommandError(f"{_shown(text)} is not a prefix like 203.0.113.0/24") from None


def _address(text: str):
    try:
        if "%" in text:  # a scope id would make fe80::1%x unequal to fe80::1
            raise ValueError
        return ipaddress.ip_address(text)
    except ValueError:
        raise CommandError(f"{_shown(text)} is not an IPv4 or IPv6 address") from None


def _v6(text: str, what: str) -> ipaddress.IPv6Address:
    """An SRv6 address (a SID, a segment, a source): IPv6 only."""
    a = _address(text)
    if a.version != 6:
        raise CommandError(f"{what} {a} is not an IPv6 address (SRv6 addresses are IPv6)")
    return a


def _int(text: str, what: str, hi: int = MAX_TABLE_ID, lo: int = 0) -> int:
    """A number in lo..hi written in ASCII digits (int() would also take " 7", "1_0",
    "+7" and other scripts' digits; thousands of digits cost it time)."""
    if not (text.isascii() and text.isdigit()):
        raise CommandError(f"{what} {_shown(text)}: expected a number {lo}..{hi}")
    v = int(text) if len(text) <= len(str(hi)) else hi + 1
    if not lo <= v <= hi:
        raise CommandError(f"{what} {_shown(text)}: expected a number {lo}..{hi}")
    return v


def _show(r: RouterControl, argv: list[str]) -> Reply:
    what = _words(
        argv, 1, "what to show: interfaces | routes | neighbors | runtime | errors | workers"
    )
    if what in ("interfaces", "int", "interface"):
        rows = interfaces_view(r.fib, r.stats())
        return Reply(
            rows,
            _render(
                "Interfaces",
                rows,
                ["name", "mac", "mtu", "addresses", "rx_packets", "tx_packets", "drops", "punts"],
            ),
        )
    if what in ("routes", "route", "ip"):
        rest = argv[2:]
        table = None
        prefix = None
        while rest:
            if rest[0] == "table" and len(rest) > 1:
                table, rest = _int(rest[1], "table"), rest[2:]
            elif prefix is None:
                prefix, rest = rest[0], rest[1:]
                _address(prefix) if "/" not in prefix else _prefix(prefix)
            else:
                raise CommandError(f"unexpected word {_shown(rest[0])}")
        if len(r.fib.routes) > RICH_MAX_ROWS:  # maybe a full table: stream it
            reply = Reply(None)
            reply.chunks = routes_stream(r.fib, prefix, table, reply)
            return reply
        rows = routes_view(r.fib, prefix)
        if table is not None:
            rows = [x for x in rows if x["table"] == table]
        return Reply(rows, _render("Routes", rows, ROUTE_COLUMNS))
    if what in ("neighbors", "neighbours", "neighbor", "neigh", "arp"):
        if len(argv) > 2:
            if argv[2] != "stats":
                raise CommandError(f"show neighbors {_shown(argv[2])}: expected stats or nothing")
            rows = r.neighbor_stats()
            return Reply(rows, _render("Neighbor resolution", rows))
        rows = r.neighbor_rows()
        return Reply(rows, _render("Neighbors", rows))
    if what == "trace":
        return _trace(r, ["trace", "show", *argv[2:]])
    if what == "pcap":
        return _pcap(r, ["pcap", "show", *argv[2:]])
    if what in ("linux-cp", "lcp"):
        try:
            view = r.linux_cp_view()
        except ValueError as e:
            raise CommandError(str(e)) from None
        text = _render("linux-cp mirrors", view["pairs"])
        sync = view["sync"]
        if sync is not None:
            text += _render("netlink sync", [{"what": k, "value": str(v)}
                                             for k, v in sync.items()])
        return Reply(view, text)
    if what == "workers":
        rows = r.worker_rows()
        return Reply(rows, _render("Workers", rows))
    if what in ("sockets", "rings"):
        rows = r.socket_rows()
        return Reply(rows, _render("Packet sockets", rows))
    if what == "runtime":
        rows = runtime_view(r.stats())
        return Reply(rows, _render("Runtime", rows, RUNTIME_COLUMNS))
    if what in ("errors", "counters"):
        rows = errors_view(r.stats(), all_counters=len(argv) > 2 and argv[2] == "all")
        return Reply(
            rows, _render("Counters", rows, ["counter", "node", "kind", "count", "description"])
        )
    raise CommandError(
        f"show {_shown(what)}: expected interfaces | routes | neighbors | runtime | errors"
        " | workers | sockets | trace | pcap | linux-cp"
    )


def _route(r: RouterControl, argv: list[str]) -> Reply:
    op = _words(argv, 1, "add | del")
    prefix = _prefix(_words(argv, 2, "prefix"))
    via, dev, table, weights, blackhole = [], None, 0, [], False
    rest = argv[3:]
    while rest:
        w = rest[0]
        if w == "blackhole":
            blackhole, rest = True, rest[1:]
            continue
        if len(rest) < 2:
            raise CommandError(
                f"{w!r} needs a value"
                if w in ("via", "dev", "table", "weight")
                else f"unexpected word {_shown(w)}"
            )
        if w == "via":
            via.append(_address(rest[1]))
        elif w == "dev":
            dev = rest[1]
        elif w == "table":
            table = _int(rest[1], "table")
        elif w == "weight":
            weights.append(_int(rest[1], "weight", MAX_BUCKETS, 1))
        else:
            raise CommandError(f"unexpected word {_shown(w)} (expected via, dev, table, weight)")
        rest = rest[2:]
    try:
        if op == "add":
            if weights and len(weights) != len(via):
                raise CommandError("give one weight per via")
            route = r.fib.add_route(
                prefix, via, dev=dev, table=table, weights=weights or None, blackhole=blackhole
            )
            r.commit()
            return Reply(
                {"prefix": str(prefix), "table": table},
                f"added {prefix} table {table}: {r.fib.describe_paths(route)}\n",
            )
        if op in ("del", "delete"):
            r.fib.del_route(prefix, table)
            r.commit()
            return Reply(
                {"prefix": str(prefix), "table": table}, f"deleted {prefix} table {table}\n"
            )
    except RouteError as e:
        raise CommandError(str(e)) from None
    raise CommandError(f"route {_shown(op)}: expected add or del")


def _neighbor(r: RouterControl, argv: list[str]) -> Reply:
    op = _words(argv, 1, "add | del")
    ip = _address(_words(argv, 2, "address"))
    rest = argv[3:]
    mac, dev = None, None
    while rest:
        if len(rest) < 2:
            raise CommandError(f"unexpected word {_shown(rest[0])}")
        if rest[0] == "lladdr":
            try:
                mac = parse_mac(rest[1], "lladdr")
            except ConfigError as e:
                raise CommandError(str(e)) from None
        elif rest[0] == "dev":
            dev = rest[1]
        else:
            raise CommandError(f"unexpected word {_shown(rest[0])} (expected lladdr, dev)")
        rest = rest[2:]
    if dev is None:
        raise CommandError("missing dev IFNAME")
    if ip.is_multicast or ip.is_unspecified or ip == ipaddress.IPv4Address("255.255.255.255"):
        raise CommandError(f"{ip} is not a unicast address: no neighbour entry for it")
    try:
        if op == "add":
            if mac is None:
                raise CommandError("missing lladdr MAC")
            r.add_neighbor(ip, mac, dev)
            return Reply({"ip": str(ip), "dev": dev}, f"neighbor {ip} dev {dev} set\n")
        if op in ("del", "delete"):
            if not r.del_neighbor(ip, dev):
                raise CommandError(f"no neighbor {ip} on {dev}")
            return Reply({"ip": str(ip), "dev": dev}, f"neighbor {ip} dev {dev} deleted\n")
    except RouteError as e:
        raise CommandError(str(e)) from None
    raise CommandError(f"neighbor {_shown(op)}: expected add or del")


def _clear(r: RouterControl, argv: list[str]) -> Reply:
    if argv[1:] != ["counters"]:
        raise CommandError("expected: clear counters")
    r.clear_counters()
    return Reply({"cleared": True}, "counters cleared\n")


def _trace(r: RouterControl, argv: list[str]) -> Reply:
    """trace add N [from NODE] [match FILTER…] | trace clear | trace show (VPP's trace)."""
    from vecroute.control.trace import MAX_TRACE_PACKETS, TraceError, parse_match

    op = _words(argv, 1, "add | clear | show")
    try:
        if op == "add":
            count = _int(_words(argv, 2, "how many packets"), "trace add", MAX_TRACE_PACKETS, 1)
            rest = argv[3:]
            node = "ethernet-input"
            if rest[:1] == ["from"]:
                node = _words(rest, 1, "a node name after from")
                rest = rest[2:]
            match = {}
            if rest[:1] == ["match"]:
                match = parse_match(rest[1:])
            elif rest:
                raise CommandError(f"unexpected word {_shown(rest[0])} (expected from NODE "
                                   "or match FILTER)")
            r.trace_add(count, node, match)
            return Reply({"tracing": count, "from": node},
                         f"tracing the next {count} packets entering {node}\n")
        if op == "clear":
            if len(argv) > 2:
                raise CommandError(f"unexpected word {_shown(argv[2])}")
            r.trace_clear()
            return Reply({"cleared": True}, "trace cleared\n")
        if op == "show":
            if len(argv) > 2:
                raise CommandError(f"unexpected word {_shown(argv[2])}")
            reply = Reply(None)
            reply.chunks = _trace_chunks(r.trace_explainer(), r.trace_snapshots(), reply)
            return reply
    except TraceError as e:
        raise CommandError(str(e)) from None
    raise CommandError(f"trace {_shown(op)}: expected add, clear or show")


TRACE_CHUNK = 50  # packets rendered per streamed piece


def _trace_chunks(explainer, snaps: list[tuple[int, dict]], out: Reply) -> Iterator[str]:
    """``show trace`` streamed: one worker's records explained per step (at most 8192,
    ~0.1 s), rendered in pieces; ``out.data`` is set once all are done."""
    from vecroute.control.trace import render_text

    packets: list[dict] = []
    left = lost = 0
    for worker, snap in snaps:
        mine = explainer.explain(snap, worker)
        yield ""
        for i in range(0, len(mine), TRACE_CHUNK):
            yield render_text(mine[i:i + TRACE_CHUNK])
        packets += mine
        left += snap["left"]
        lost += snap["lost"]
    if not packets:
        yield render_text([])
    if left:
        yield f"(still waiting for {left} packets)\n"
    if lost:
        yield f"({lost} records did not fit: the trace stopped there)\n"
    out.data = {"packets": packets, "waiting_for": left, "records_lost": lost}


def _pcap(r: RouterControl, argv: list[str]) -> Reply:
    """pcap start IFACE|any [rx|tx|drop] FILE [count N] [snaplen S] | pcap stop | show."""
    from vecroute.control.capture import DEFAULT_COUNT, DIRECTIONS, MAX_COUNT
    from vecroute.io.channel import REC_BYTES

    op = _words(argv, 1, "start | stop | show")
    if op == "start":
        iface = _words(argv, 2, "an interface (or any)")
        rest = argv[3:]
        direction = "rx"
        if rest[:1] and rest[0] in DIRECTIONS:
            direction, rest = rest[0], rest[1:]
        name = _words(rest, 0, "a file name")
        kw = dict(count=DEFAULT_COUNT, snaplen=REC_BYTES)
        rest = rest[1:]
        while rest:
            key = rest[0]
            if key not in kw:
                raise CommandError(f"unexpected word {_shown(key)} (expected count N or "
                                   "snaplen S)")
            hi, lo = (MAX_COUNT, 1) if key == "count" else (REC_BYTES, 14)
            kw[key] = _int(_words(rest, 1, f"a number after {key}"), key, hi, lo)
            rest = rest[2:]
        try:
            row = r.pcap_start(iface, direction, name, kw["count"], kw["snaplen"])
        except ValueError as e:
            raise CommandError(str(e)) from None
        return Reply(row, f"capturing {direction} on {iface} into {row['file']} "
                          f"(count {kw['count']}, snaplen {kw['snaplen']})\n")
    if len(argv) > 2:
        raise CommandError(f"unexpected word {_shown(argv[2])}")
    if op == "stop":
        try:
            row = r.pcap_stop()
        except ValueError as e:
            raise CommandError(str(e)) from None
        return Reply(row, f"{row['file']}: {row['written']} frames, {row['bytes']} bytes, "
                          f"{row['lost']} lost\n")
    if op == "show":
        row = r.pcap_status()
        if row is None:
            return Reply(None, "no capture since the start\n")
        return Reply(row, _render("Capture", [row]))
    raise CommandError(f"pcap {_shown(op)}: expected start, stop or show")


def _sr(r: RouterControl, argv: list[str]) -> Reply:
    """sr localsid|policy|steer add|del|show (VPP's `sr localsid address … behavior …`)."""
    from vecroute.srv6.layout import FLOW_LABELS
    from vecroute.srv6.tables import BEHAVIORS, MAX_SEGMENTS, MODES, LocalSid, Policy

    what = _words(argv, 1, "localsid | policy | steer")
    op = _words(argv, 2, "add | del | show")
    sr = r.fib.srv6
    if op == "show":
        rows = {
            "localsid": sr.localsid_rows,
            "policy": sr.policy_rows,
            "steer": sr.steering_rows,
        }.get(what)
        if rows is None:
            raise CommandError(f"sr {_shown(what)}: expected localsid, policy or steer")
        data = rows()
        flat = [
            {
                k: (
                    ", ".join(" ".join(x["segments"]) + f" weight {x['weight']}" for x in v)
                    if k == "segment_lists"
                    else v
                )
                for k, v in d.items()
            }
            for d in data
        ]
        return Reply(data, _render(f"SRv6 {what}", flat))
    if op not in ("add", "del", "delete"):
        raise CommandError(f"sr {_shown(what)} {_shown(op)}: expected add, del or show")
    kw = _keywords(argv[3:], multi={"segments", "via"})
    try:
        if what == "localsid":
            sid = _prefix(
                kw.pop("sid", None) or kw.pop("address", None) or _words([], 0, "sid ADDRESS")
            )
            if sid.version != 6:
                raise CommandError(f"{sid} is not an IPv6 SID")
            table = _int(kw.pop("fib-table", "0"), "fib-table")
            if op == "add":
                beh = kw.pop("behavior", None)
                if beh not in BEHAVIORS:
                    shown = _shown(beh) if beh is not None else "missing"
                    raise CommandError(f"behavior {shown}: expected one of {' '.join(BEHAVIORS)}")
                flavor = kw.get("flavor")
                if flavor not in (None, "PSP"):
                    raise CommandError(f"flavor {_shown(flavor)}: only PSP is supported")
                nh = _address(kw.pop("nh")) if "nh" in kw else None
                ls = LocalSid(
                    sid, beh, nh, _int(kw.pop("table", "0"), "table"), kw.pop("flavor", None), table
                )
                _no_more(kw)
                r.fib.sr("add_localsid", ls)
            else:
                _no_more(kw)
                r.fib.sr("del_localsid", sid, table)
        elif what == "policy":
            bsid = _v6(kw.pop("bsid", None) or _words([], 0, "bsid ADDRESS"), "bsid")
            if op == "add":
                segs = [_v6(x, "segment") for x in kw.pop("segments", [])]
                if not segs:
                    raise CommandError("missing segments S1,S2,… (or segments S1 segments S2)")
                if len(segs) > MAX_SEGMENTS:
                    raise CommandError(f"{len(segs)} segments: at most {MAX_SEGMENTS}")
                src = _v6(kw.pop("source"), "source") if "source" in kw else None
                mode = kw.pop("mode", "encap")
                if mode not in MODES:
                    raise CommandError(f"mode {_shown(mode)}: expected {' or '.join(MODES)}")
                flow = kw.pop("flow-label", None)
                if flow is not None and flow not in FLOW_LABELS:
                    raise CommandError(f"flow-label {_shown(flow)}: expected "
                                       f"{' or '.join(FLOW_LABELS)}")
                pol = Policy(
                    bsid,
                    [(segs, _int(kw.pop("weight", "1"), "weight", MAX_BUCKETS, 1))],
                    mode,
                    src,
                    flow_label=flow,
                )
                _no_more(kw)
                r.fib.sr("add_policy", pol)
            else:
                _no_more(kw)
                r.fib.sr("del_policy", bsid)
        elif what == "steer":
            prefix = _prefix(kw.pop("prefix", None) or _words([], 0, "prefix PREFIX"))
            table = _int(kw.pop("table", "0"), "table")
            if op == "add":
                via = kw.pop("via", [])
                explicit = kw.get("bsid") if kw.get("bsid") != kw.get("prefix") else None
                bsid = _v6(via[-1] if via else explicit or _words([], 0, "via bsid ADDRESS"),
                           "bsid")
                _no_more(kw)
                r.fib.sr("steer", prefix, bsid, table)
            else:
                _no_more(kw)
                r.fib.sr("unsteer", prefix, table)
        else:
            raise CommandError(f"sr {_shown(what)}: expected localsid, policy or steer")
    except RouteError as e:
        raise CommandError(str(e)) from None
    r.commit()
    return Reply({"sr": what, "op": op}, f"sr {what} {op}: ok\n")


def _fw(r: RouterControl, argv: list[str]) -> Reply:
    """fw show|states|counters|add|delete|zero|table|tables (ipfw's words; docs/firewall.md)."""
    try:
        text = r.fw_command(argv[1:])
    except ValueError as e:
        raise CommandError(str(e)) from None
    return Reply({"fw": argv[1:], "output": text}, text)


def _keywords(words: list[str], multi: set[str]) -> dict:
    """``key value`` pairs; a positional first word is the object (sid/bsid/prefix)."""
    out: dict = {}
    keys = {
        "sid",
        "address",
        "behavior",
        "nh",
        "table",
        "fib-table",
        "flavor",
        "bsid",
        "segments",
        "source",
        "weight",
        "mode",
        "flow-label",
        "prefix",
        "via",
    }
    if words and words[0] not in keys:
        words = ["_pos", *words]
    i = 0
    while i < len(words):
        k = words[i]
        if k not in keys and k != "_pos":
            raise CommandError(f"unexpected word {_shown(k)}")
        if i + 1 >= len(words):
            raise CommandError(f"{_shown(k)} needs a value")
        v = words[i + 1]
        if k == "via" and v == "bsid":  # `steer PREFIX via bsid B`
            if i + 2 >= len(words):
                raise CommandError("via bsid needs an address")
            v = words[i + 2]
            i += 1
        if k in multi:
            out.setdefault(k, []).extend(x for x in v.split(",") if x)
        else:
            out[k] = v
        i += 2
    if "_pos" in out:
        pos = out.pop("_pos")
        for k in ("sid", "bsid", "prefix"):
            out.setdefault(k, pos)
    return out


def _no_more(kw: dict) -> None:
    kw.pop("sid", None), kw.pop("bsid", None), kw.pop("prefix", None)
    if kw:
        raise CommandError(f"unexpected word {_shown(next(iter(kw)))} here")


COMMANDS: dict[str, Callable[[RouterControl, list[str]], Reply]] = {
    "show": _show,
    "route": _route,
    "neighbor": _neighbor,
    "neighbour": _neighbor,
    "neigh": _neighbor,
    "clear": _clear,
    "sr": _sr,
    "fw": _fw,
    "trace": _trace,
    "pcap": _pcap,
}


def execute(r: RouterControl, argv: list[str]) -> Reply:
    """Run one ctl command; CommandError for anything malformed (nothing changed then)."""
    if not argv:
        raise CommandError(f"empty command; expected one of: {', '.join(sorted(COMMANDS))}")
    fn = COMMANDS.get(argv[0])
    if fn is None:
        raise CommandError(
            f"unknown command {_shown(argv[0])}; expected one of: {', '.join(sorted(COMMANDS))}"
        )
    try:
        return fn(r, argv)
    except CommandError as e:  # a message quoting a 4096-character word: cut it short
        msg = str(e)
        if len(msg) <= MAX_ERROR:
            raise
        raise CommandError(msg[: MAX_ERROR - 3] + "...") from None
