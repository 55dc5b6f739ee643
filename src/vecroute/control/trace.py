"""Packet trace, the slow side: arm a trace, read its records, say what happened.

The compiled side (graph/trace.py) leaves, per traced packet, its state when selected and
after every node it visited: metadata and the first bytes of the frame. Here those become
one entry per packet: the headers it arrived with, then per node what the node decided
(the lookup's prefix, load-balance and bucket from the FIB itself, the rewrite applied,
the firewall rule and verdict, the SRv6 behaviour, the drop reason or the TX interface).
Decoding is plain Python over at most a few thousand records.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import Any

import numpy as np

from vecroute.fib.fib import Fib
from vecroute.fib.layout import (
    A_IF,
    A_NH4,
    A_TYPE,
    ADJ_NAMES,
    ADJ_SRV6_ENCAP,
    ADJ_SRV6_LOCALSID,
    LB_N,
    LB_START,
)
from vecroute.graph import trace as T
from vecroute.graph.counters import COUNTERS
from vecroute.graph.state import DataPlaneState
from vecroute.graph.trace import MAX_TRACE_PACKETS
from vecroute.packet.batch import (
    F_FORCED_ADJ,
    M_ADJ,
    M_AUX,
    M_AUX2,
    M_ERR,
    M_FIB,
    M_FLAGS,
    M_HASH,
    M_L3,
    M_LEN,
    M_NEXT,
    M_OFF,
    M_ORIG,
    M_RX,
    M_TX,
)
from vecroute.packet.node_ids import (
    DONE_DROP,
    DONE_PUNT,
    DONE_TX,
    FREE,
    NODE_NAMES,
)
from vecroute.srv6.layout import SID_BEHAVIOR

FATES = {DONE_TX: "tx", DONE_DROP: "drop", DONE_PUNT: "punt", FREE: "free"}
PROTOS = {1: "icmp", 6: "tcp", 17: "udp", 43: "ipv6-route", 44: "ipv6-frag", 58: "icmp6",
          4: "ipip", 41: "ipv6", 59: "no-next-header", 0: "hop-by-hop", 60: "dest-opts"}
VERDICTS = ("pass", "drop", "reject", "reset")


__all__ = ["MAX_TRACE_PACKETS", "TraceError", "TraceExplainer", "arm", "disarm", "parse_match",
           "render_text", "snapshot"]


class TraceError(ValueError):
    """A malformed trace request (one line)."""


# -- arming (run between two batches: in the worker thread, or by replay) -------------------

def parse_match(words: list[str]) -> dict[str, Any]:
    """A small tcpdump-like filter: ``ip|ip6``, ``tcp|udp|icmp|icmp6|proto N``,
    ``[src|dst] host ADDR``, ``[src|dst] net PREFIX``, ``[src|dst] port N``, joined by
    optional ``and``. Returns the fields it sets (see :func:`arm`)."""
    out: dict[str, Any] = {}
    ws = [w for w in words if w != "and"]
    if not ws:
        raise TraceError("match: expected a filter (ip, ip6, tcp, udp, icmp, icmp6, proto N, "
                         "[src|dst] host|net|port)")
    i = 0
    protos = {"tcp": 6, "udp": 17, "icmp": 1, "icmp6": 58}

    def need(what: str) -> str:
        nonlocal i
        i += 1
        if i >= len(ws):
            raise TraceError(f"match: missing {what}")
        return ws[i]

    while i < len(ws):
        w = ws[i]
        side = ""
        if w in ("src", "dst"):
            side = w
            w = need("host, net or port after " + side)
            if w not in ("host", "net", "port"):
                raise TraceError(f"match: {side} {w[:40]!r}: expected host, net or port")
        if w in ("ip", "ip4"):
            out["family"] = 4
        elif w == "ip6":
            out["family"] = 6
        elif w in protos and not side:
            out["proto"] = protos[w]
        elif w == "proto" and not side:
            out["proto"] = _number(need("a protocol number"), "proto", 255)
        elif w in ("host", "net"):
            text = need("an address" if w == "host" else "a prefix")
            try:
                if "%" in text:  # a scope would be dropped silently: no such filter
                    raise ValueError
                net = ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise TraceError(f"match: {text[:40]!r} is not an address or prefix") from None
            if w == "host" and net.prefixlen != net.max_prefixlen:
                raise TraceError(f"match: host {text[:40]!r}: give an address (or use net)")
            out[side or "host"] = net
        elif w == "port":
            out[(side + "port") if side else "port"] = _number(need("a port"), "port", 65535)
        else:
            raise TraceError(f"match: unexpected word {w[:40]!r} (expected ip, ip6, tcp, udp, "
                             "icmp, icmp6, proto N, [src|dst] host|net|port)")
        i += 1
    fams = {net.version for k, net in out.items() if k in ("src", "dst", "host")}
    if len(fams) > 1 or ("family" in out and fams and fams != {out["family"]}):
        raise TraceError("match: the addresses and the family disagree")
    return out


def _number(text: str, what: str, hi: int) -> int:
    """ASCII digits in 0..hi (leading zeros allowed, never a huge int)."""
    digits = text.lstrip("0") or "0"
    if not (text.isascii() and text.isdigit()) or len(digits) > len(str(hi)) \
            or int(digits) > hi:
        raise TraceError(f"match: {what} {text[:40]!r}: expected a number 0..{hi}")
    return int(digits)


def arm(st: DataPlaneState, count: int, node: str = "ethernet-input",
        match: dict[str, Any] | None = None) -> None:
    """Trace the next ``count`` packets entering ``node`` (matching ``match``, from
    :func:`parse_match`). Forgets the previous trace. Call between two batches."""
    if node not in NODE_NAMES:
        raise TraceError(f"no node {node[:40]!r}; nodes: {', '.join(NODE_NAMES)}")
    if not 1 <= count <= T.MAX_TRACE_PACKETS:
        raise TraceError(f"trace count {count}: expected 1..{T.MAX_TRACE_PACKETS}")
    tc = st.trace_ctl
    tc[:] = 0
    tc[T.TR_NODE] = NODE_NAMES.index(node)
    tc[T.TR_NEXT_ID] = 1
    for col in (T.TR_M_PROTO, T.TR_M_SPORT, T.TR_M_DPORT, T.TR_M_PORT):
        tc[col] = -1
    for col in (T.TR_M_SRC, T.TR_M_DST, T.TR_M_HOST):
        tc[col + 2] = T.M_ANY
    m = match or {}
    if m:
        tc[T.TR_MATCH] = 1
        nets = [v for k, v in m.items() if k in ("src", "dst", "host")]
        tc[T.TR_M_FAMILY] = m.get("family") or (nets[0].version if nets else 0)
        tc[T.TR_M_PROTO] = m.get("proto", -1)
        tc[T.TR_M_SPORT] = m.get("srcport", -1)
        tc[T.TR_M_DPORT] = m.get("dstport", -1)
        tc[T.TR_M_PORT] = m.get("port", -1)
        for key, col in (("src", T.TR_M_SRC), ("dst", T.TR_M_DST), ("host", T.TR_M_HOST)):
            net = m.get(key)
            if net is not None:
                a = int(net.network_address)
                tc[col] = np.int64(np.uint64(a >> 64).view(np.int64)) if net.version == 6 else 0
                tc[col + 1] = np.uint64(a & (2**64 - 1)).view(np.int64)
                tc[col + 2] = net.prefixlen
    st.trace_rec[:] = 0  # the dispatcher zeroes the ids of a batch that traced: TR_DIRTY
    tc[T.TR_DIRTY] = 1
    tc[T.TR_LEFT] = count


def disarm(st: DataPlaneState) -> None:
    """Stop selecting and forget the records (``trace clear``)."""
    tc = st.trace_ctl
    tc[T.TR_LEFT] = 0
    tc[T.TR_NREC] = 0
    tc[T.TR_LOST] = 0
    tc[T.TR_DIRTY] = 1


def snapshot(st: DataPlaneState) -> dict[str, Any]:
    """Copies of the records written so far (call between batches or accept a partial
    last record: the count is read first and records are written before it moves)."""
    tc = st.trace_ctl
    n = int(tc[T.TR_NREC])
    return {"rec": st.trace_rec[:n].copy(), "snap": st.trace_snap[:n].copy(),
            "time": st.trace_time[:n].copy(), "left": int(tc[T.TR_LEFT]),
            "lost": int(tc[T.TR_LOST]), "node": NODE_NAMES[int(tc[T.TR_NODE])]}


# -- decoding ---------------------------------------------------------------------------------

def _mac(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def decode_l3(b: bytes) -> list[dict[str, Any]]:
    """IPv4/IPv6 and what follows them, as far as the bytes go."""
    out: list[dict[str, Any]] = []
    if not b:
        return out
    ver = b[0] >> 4
    proto = -1
    rest = b""
    if ver == 4 and len(b) >= 20:
        ihl = (b[0] & 15) * 4
        tot, ident, frag = struct.unpack("!HHH", b[2:8])
        proto = b[9]
        out.append({"layer": "ip4", "src": str(ipaddress.IPv4Address(b[12:16])),
                    "dst": str(ipaddress.IPv4Address(b[16:20])), "proto": proto, "ttl": b[8],
                    "length": tot, "id": ident, "df": bool(frag & 0x4000),
                    "mf": bool(frag & 0x2000), "frag_offset": (frag & 0x1FFF) * 8,
                    "checksum": f"0x{struct.unpack('!H', b[10:12])[0]:04x}",
                    "header_length": ihl})
        rest = b[ihl:] if (frag & 0x1FFF) == 0 else b""
    elif ver == 6 and len(b) >= 40:
        proto = b[6]
        out.append({"layer": "ip6", "src": str(ipaddress.IPv6Address(b[8:24])),
                    "dst": str(ipaddress.IPv6Address(b[24:40])), "next_header": proto,
                    "hop_limit": b[7], "payload_length": struct.unpack("!H", b[4:6])[0]})
        rest = b[40:]
        while proto == 43 and len(rest) >= 8:  # an SRH (routing type 4) or other routing
            nh, hlen, rtype, left = rest[0], rest[1], rest[2], rest[3]
            seg = {"layer": "routing", "type": rtype, "segments_left": left}
            if rtype == 4:
                n = hlen // 2
                seg["layer"] = "srh"
                seg["segments"] = [str(ipaddress.IPv6Address(rest[8 + 16 * k:24 + 16 * k]))
                                   for k in range(n) if len(rest) >= 24 + 16 * k]
            out.append(seg)
            proto = nh
            rest = rest[8 + hlen * 8:]
    else:
        out.append({"layer": "unknown", "bytes": b[:16].hex()})
        return out
    if proto in (4, 41) and rest:
        out += decode_l3(rest)
    elif proto in (6, 17) and len(rest) >= 4:
        sport, dport = struct.unpack("!HH", rest[:4])
        layer = {"layer": PROTOS[proto], "sport": sport, "dport": dport}
        if proto == 6 and len(rest) >= 14:
            flags = rest[13]
            layer["flags"] = "".join(c for c, bit in zip("FSRPAU", range(6), strict=True)
                                     if flags >> bit & 1)
        out.append(layer)
    elif proto in (1, 58) and len(rest) >= 2:
        out.append({"layer": PROTOS[proto], "type": rest[0], "code": rest[1]})
    return out


def decode_frame(b: bytes, l3_offset: int) -> list[dict[str, Any]]:
    """The headers of a frame (l3_offset: where its IP header starts, -1 to find it)."""
    out: list[dict[str, Any]] = []
    if l3_offset != 0:
        if len(b) < 14:
            return [{"layer": "truncated", "bytes": b.hex()}]
        et = struct.unpack("!H", b[12:14])[0]
        eth = {"layer": "ethernet", "dst": _mac(b[0:6]), "src": _mac(b[6:12]),
               "type": f"0x{et:04x}"}
        out.append(eth)
        start = 14
        if et == 0x8100 and len(b) >= 18:
            eth["vlan"] = struct.unpack("!H", b[14:16])[0] & 0xFFF
            et = struct.unpack("!H", b[16:18])[0]
            start = 18
        if l3_offset < 0:
            l3_offset = start
        if et == 0x0806 and len(b) >= start + 28:
            a = b[start:]
            out.append({"layer": "arp", "op": struct.unpack("!H", a[6:8])[0],
                        "sender_mac": _mac(a[8:14]),
                        "sender_ip": str(ipaddress.IPv4Address(a[14:18])),
                        "target_mac": _mac(a[18:24]),
                        "target_ip": str(ipaddress.IPv4Address(a[24:28]))})
            return out
        if et not in (0x0800, 0x86DD):
            return out
    return out + decode_l3(b[l3_offset:])


def headers_text(layers: list[dict[str, Any]]) -> str:
    parts = []
    for la in layers:
        kind = la["layer"]
        if kind == "ethernet":
            parts.append(f"ethernet {la['src']} -> {la['dst']} type {la['type']}")
        elif kind == "ip4":
            parts.append(f"ip4 {la['src']} -> {la['dst']} {PROTOS.get(la['proto'], la['proto'])}"
                         f" ttl {la['ttl']} len {la['length']} id {la['id']}"
                         + (" DF" if la["df"] else "") + (" MF" if la["mf"] else "")
                         + (f" offset {la['frag_offset']}" if la["frag_offset"] else ""))
        elif kind == "ip6":
            parts.append(f"ip6 {la['src']} -> {la['dst']} "
                         f"{PROTOS.get(la['next_header'], la['next_header'])} "
                         f"hlim {la['hop_limit']} plen {la['payload_length']}")
        elif kind == "srh":
            parts.append(f"srh left {la['segments_left']} [{', '.join(la['segments'])}]")
        elif kind in ("tcp", "udp"):
            parts.append(f"{kind} {la['sport']} -> {la['dport']}"
                         + (f" {la['flags']}" if la.get("flags") else ""))
        elif kind in ("icmp", "icmp6"):
            parts.append(f"{kind} type {la['type']} code {la['code']}")
        elif kind == "arp":
            parts.append(f"arp op {la['op']} {la['sender_ip']} ({la['sender_mac']}) -> "
                         f"{la['target_ip']}")
        else:
            parts.append(" ".join(f"{k} {v}" for k, v in la.items()))
    return " / ".join(parts)


class TraceExplainer:
    """Reads a FIB to explain what the nodes decided (the firewall's verdicts and rule
    numbers are in the records themselves): the tables the
    worker used, or their successor when they changed since (said so then)."""

    def __init__(self, fib: Fib) -> None:
        self.fib = fib
        self.names = [itf.name for itf in fib.interfaces]
        self.table_ids = {4: fib.lpm[4].table_ids, 6: fib.lpm[6].table_ids}
        # a packet's bytes are the same at most nodes, and a flow's packets ask the FIB the
        # same question: decode and explain each once (a full trace: ~5x fewer)
        self._decoded: dict[tuple[bytes, int], list[dict[str, Any]]] = {}
        self._looked_up: dict[tuple, dict[str, Any]] = {}

    def decode(self, raw: bytes, l3: int) -> list[dict[str, Any]]:
        key = (raw, l3)
        got = self._decoded.get(key)
        if got is None:
            got = self._decoded[key] = decode_frame(raw, l3)
        return got

    def _if(self, ifx: int) -> str:
        return self.names[ifx] if 0 <= ifx < len(self.names) else f"#{ifx}"

    def _adj(self, a: int) -> dict[str, Any]:
        adjs = self.fib.adjs
        if not 0 <= a < adjs.adj.shape[0] or a >= len(adjs.keys) or adjs.keys[a] is None:
            return {"index": a, "kind": "?"}
        kind = int(adjs.adj[a, A_TYPE])
        row = {"index": a, "kind": ADJ_NAMES[kind], "describe": adjs.describe(a)}
        if kind not in (ADJ_SRV6_ENCAP, ADJ_SRV6_LOCALSID):
            row["interface"] = self._if(int(adjs.adj[a, A_IF]))
        return row

    def lookup(self, family: int, table_index: int, dst: str, chosen: int, h: int) -> dict:
        """What the FIB answers for dst: the prefix, load-balance, buckets, and which bucket
        the flow hash picks (the data path's rule: hash % buckets)."""
        key = (family, table_index, dst, chosen, h)
        got = self._looked_up.get(key)
        if got is None:
            got = self._looked_up[key] = self._lookup(family, table_index, dst, chosen, h)
        return got

    def _lookup(self, family: int, table_index: int, dst: str, chosen: int, h: int) -> dict:
        ids = self.table_ids[family]
        table = ids[table_index] if 0 <= table_index < len(ids) else None
        out: dict[str, Any] = {"table": table, "destination": dst}
        if table is None:
            return out
        addr = ipaddress.ip_address(dst)
        bits = addr.max_prefixlen
        a = int(addr)
        cls = ipaddress.IPv4Network if family == 4 else ipaddress.IPv6Network
        for plen in range(bits, -1, -1):
            net = cls((a >> (bits - plen) << (bits - plen), plen))
            route = self.fib.routes.get((table, net))
            if route is not None:
                out["prefix"] = str(net)
                out["route"] = self.fib.describe_paths(route)
                break
        lbi = self.fib.lpm[family].lookup(table, addr)
        if lbi < 0:
            out["prefix"] = None
            out["route"] = "no route"
            return out
        lbs = self.fib.lbs
        start, n = int(lbs.lb[lbi, LB_START]), int(lbs.lb[lbi, LB_N])
        buckets = [int(x) for x in lbs.lb_buckets[start:start + n]]
        out["load_balance"] = lbi
        out["buckets"] = n
        h &= 0xFFFFFFFF
        bucket = 0 if n == 1 else h % n
        out["flow_hash"] = f"0x{h:08x}"
        out["bucket"] = bucket
        out["why"] = ("one bucket" if n == 1 else
                      f"flow hash 0x{h:08x} % {n} buckets = {bucket}")
        out["adjacency"] = self._adj(chosen)
        if buckets and buckets[bucket] != chosen:
            out["note"] = (f"the FIB changed since: bucket {bucket} now holds adjacency "
                           f"{buckets[bucket]}, the packet used {chosen}")
        return out

    def explain(self, snap: dict[str, Any], worker: int = 0) -> list[dict[str, Any]]:
        """One entry per traced packet, in order of selection."""
        rec, data, times = snap["rec"], snap["snap"], snap["time"]
        packets: dict[int, dict[str, Any]] = {}
        last: dict[tuple[int, int], tuple[np.ndarray, bytes]] = {}  # (id, slot) -> state
        cause: dict[tuple[int, int], int] = {}  # (id, slot) -> the last reason it carried
        for r in range(rec.shape[0]):
            row = rec[r]
            pid, kind, node, slot = (int(x) for x in row[:4])
            meta = row[T.R_META:]
            raw = data[r, : int(row[T.R_CAPLEN])].tobytes()
            l3 = int(meta[M_L3]) - int(meta[M_OFF]) if meta[M_L3] else -1
            p = packets.get(pid)
            if p is None:
                p = packets[pid] = {"packet": pid, "worker": worker, "time_ns": int(times[r]),
                                    "rx": self._if(int(meta[M_RX])),
                                    "length": int(meta[M_LEN]), "nodes": []}
            if kind == T.K_SEEN:
                p["selected_at"] = NODE_NAMES[node]
                p["headers"] = self.decode(raw, l3)
                last[(pid, slot)] = (meta.copy(), raw)
                continue
            prev = last.get((pid, slot))
            if int(meta[M_ERR]) >= 0:
                cause[(pid, slot)] = int(meta[M_ERR])
            step = self._step(node, slot, meta, raw, prev, row, cause.get((pid, slot), -1))
            if slot != int(row[T.R_META + M_ORIG]) or (prev is None and p["nodes"]):
                step["generated"] = True
            p["nodes"].append(step)
            last[(pid, slot)] = (meta.copy(), raw)
        for p in packets.values():
            fates = [s for s in p["nodes"] if s["next"] in FATES.values()]
            p["fate"] = [s["fate"] for s in fates if "fate" in s]
            if snap["lost"] and not p["fate"]:
                p["incomplete"] = True  # its later records did not fit
        return list(packets.values())

    def _step(self, node: int, slot: int, meta, raw: bytes, prev, row,
              cause: int) -> dict[str, Any]:
        name = NODE_NAMES[node]
        nxt = int(meta[M_NEXT])
        step: dict[str, Any] = {"node": name, "slot": slot,
                                "next": FATES.get(nxt) or (NODE_NAMES[nxt] if 0 <= nxt <
                                                           len(NODE_NAMES) else str(nxt))}
        err = int(meta[M_ERR])
        if err < 0 and name in ("icmp4-error", "icmp6-error") and step["next"] == "error-drop":
            err = int(meta[M_AUX2])  # no error sent: why (give_up), the cause counted before
            if 0 <= cause < len(COUNTERS) and 0 <= err < len(COUNTERS):
                step["cause"] = COUNTERS[cause].name
        elif err < 0 and step["next"] == "drop" and prev is not None:
            err = int(prev[0][M_AUX2]) if int(prev[0][M_ERR]) < 0 else int(prev[0][M_ERR])
            if not 0 <= err < len(COUNTERS) or cause < 0:
                err = cause
        if 0 <= err < len(COUNTERS) and step["next"] in (
                "drop", "punt", "icmp4-error", "icmp6-error", "tcp-reset", "error-drop"):
            c = COUNTERS[err]
            step["reason"] = c.name
            step["reason_text"] = c.description
        l3 = int(meta[M_L3]) - int(meta[M_OFF])
        layers = self.decode(raw, l3 if meta[M_L3] else -1) if raw else []
        ip = next((la for la in layers if la["layer"] in ("ip4", "ip6")), None)
        prev_raw = prev[1] if prev is not None else None
        if raw != prev_raw:
            step["headers"] = layers
        if name in ("ip4-lookup", "ip6-lookup") and prev is not None and \
                int(prev[0][M_FLAGS]) & F_FORCED_ADJ:
            # End.X / End.DX4 / End.DX6 chose the adjacency: the lookup was skipped
            step["lookup"] = {"skipped": "adjacency chosen by the local SID",
                              "adjacency": self._adj(int(meta[M_ADJ]))}
        elif name in ("ip4-lookup", "ip6-lookup") and ip is not None:
            # the address looked up: what the node saw (before an encapsulation changed it)
            seen = prev
            src_layers = layers
            if seen is not None:
                pm = seen[0]
                pl3 = int(pm[M_L3]) - int(pm[M_OFF])
                src_layers = self.decode(seen[1], pl3 if pm[M_L3] else -1)
            sip = next((la for la in src_layers if la["layer"] in ("ip4", "ip6")), ip)
            fam = 6 if sip["layer"] == "ip6" else 4
            step["lookup"] = self.lookup(fam, int(meta[M_FIB]), sip["dst"], int(meta[M_ADJ]),
                                         int(meta[M_HASH]))
        elif name in ("ip4-rewrite", "ip6-rewrite") and step["next"] != "drop":
            adj = self._adj(int(meta[M_ADJ]))
            step["rewrite"] = {"adjacency": adj,
                               "tx": self._if(int(meta[M_TX])) if meta[M_TX] >= 0
                               else adj.get("interface")}
            if layers and layers[0]["layer"] == "ethernet" and raw != prev_raw:
                step["rewrite"]["l2"] = f"{layers[0]['src']} -> {layers[0]['dst']}"
            elif step["next"] != "interface-output":
                step["rewrite"]["l2"] = f"deferred to {step['next']}"
            if ip is not None:
                step["rewrite"]["ttl" if ip["layer"] == "ip4" else "hop_limit"] = (
                    ip.get("ttl", ip.get("hop_limit")))
        elif name in ("fw-in", "fw-out"):
            v = int(row[T.R_FW_VERDICT])
            step["firewall"] = {"verdict": VERDICTS[v] if 0 <= v < len(VERDICTS) else v,
                                "rule": int(row[T.R_FW_RULE]) if row[T.R_FW_RULE] >= 0
                                else None}
        elif name == "srv6-localsid" and prev is not None:
            a = int(prev[0][M_ADJ])
            adjs = self.fib.adjs
            if 0 <= a < adjs.adj.shape[0] and adjs.adj[a, A_TYPE] == ADJ_SRV6_LOCALSID:
                sid = int(adjs.adj[a, A_NH4])
                step["srv6"] = self._localsid(sid)
        elif name == "srv6-encap" and prev is not None:
            a = int(prev[0][M_ADJ])
            adjs = self.fib.adjs
            if 0 <= a < adjs.adj.shape[0] and adjs.adj[a, A_TYPE] == ADJ_SRV6_ENCAP:
                step["srv6"] = {"policy": int(adjs.adj[a, A_NH4])}
                step["srv6"].update(self.fib.srv6.policy_row(step["srv6"]["policy"]) or {})
        elif name in ("icmp4-error", "icmp6-error"):
            aux = int(meta[M_AUX])
            step["icmp"] = {"type": aux >> 8, "code": aux & 0xFF}
        if step["next"] == "tx":
            step["fate"] = f"tx {self._if(int(meta[M_TX]))}"
        elif step["next"] in ("drop", "punt"):
            step["fate"] = f"{step['next']} {step.get('reason', '')}".strip()
            if "cause" in step:
                step["fate"] += f" (after {step['cause']})"
        step["flags"] = int(meta[M_FLAGS])
        return step

    def _localsid(self, index: int) -> dict[str, Any]:
        from vecroute.srv6.tables import BEHAVIORS

        sr = self.fib.srv6
        out: dict[str, Any] = {"localsid": index}
        if 0 <= index < sr.sr_sid.shape[0]:
            b = int(sr.sr_sid[index, SID_BEHAVIOR])
            out["behavior"] = BEHAVIORS[b] if 0 <= b < len(BEHAVIORS) else b
        return out


def render_text(packets: list[dict[str, Any]]) -> str:
    """``show trace`` as text: per packet, the headers it came with, then one line per
    node (what it decided), then its headers again where a node changed them."""
    if not packets:
        return "no packets traced\n"
    lines = []
    for p in packets:
        lines.append(f"Packet {p['packet']} (worker {p['worker']}, rx {p['rx']}, "
                     f"{p['length']} bytes, selected at {p.get('selected_at', '?')})")
        lines.append(f"  {headers_text(p.get('headers', []))}")
        if p.get("incomplete"):
            lines.append("  (incomplete: the trace's record buffer filled up)")
        for s in p["nodes"]:
            gen = f" [generated, slot {s['slot']}]" if s.get("generated") else ""
            d = [f"-> {s['next']}"]
            if "reason" in s:
                d.append(f"{s['reason']}: {s['reason_text']}"
                         + (f" (after {s['cause']})" if "cause" in s else ""))
            if "lookup" in s and "skipped" in s["lookup"]:
                d.append(f"no lookup: {s['lookup']['skipped']} (adjacency "
                         f"{s['lookup']['adjacency'].get('describe', '')})")
            elif "lookup" in s:
                lk = s["lookup"]
                d.append(f"table {lk.get('table')} {lk.get('destination')} matched "
                         f"{lk.get('prefix')} ({lk.get('route', '')})")
                if "load_balance" in lk:
                    adj = lk["adjacency"]
                    d.append(f"load-balance {lk['load_balance']}: {lk['why']} -> adjacency "
                             f"{adj.get('index')} {adj.get('describe', '')}")
                if "note" in lk:
                    d.append(lk["note"])
            if "rewrite" in s:
                rw = s["rewrite"]
                d.append(f"rewrite {rw.get('l2', '')} tx {rw.get('tx')}"
                         + (f" ttl {rw['ttl']}" if "ttl" in rw else "")
                         + (f" hlim {rw['hop_limit']}" if "hop_limit" in rw else ""))
            if "firewall" in s:
                d.append(f"rule {s['firewall']['rule']} {s['firewall']['verdict']}")
            if "srv6" in s:
                d.append(" ".join(f"{k} {v}" for k, v in s["srv6"].items()))
            if "icmp" in s:
                d.append(f"icmp type {s['icmp']['type']} code {s['icmp']['code']}")
            if "fate" in s:
                d.append(s["fate"])
            lines.append(f"  {s['node']:<17}{gen} " + "; ".join(d))
            if "headers" in s and s["node"] not in ("error-drop", "punt"):
                lines.append(f"  {'':<17}   now: {headers_text(s['headers'])}")
        lines.append("")
    return "\n".join(lines)
