"""SR policies and local SIDs: the control plane that fills the SRv6 data-path arrays.

A policy has a binding SID, weighted segment lists (a flow sticks to one list) and an
encapsulation source; each list's outer IPv6 header + SRH is precomputed here, so the
data path only copies it. A local SID is installed in the FIB as a /128 (or a locator
prefix) whose adjacency names it; steering installs a route whose adjacency names a
policy. Everything goes through the one FIB lookup the packet already has.
"""

from __future__ import annotations

import ipaddress
import struct
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from vecroute.fib.adjacency import AdjKey
from vecroute.fib.layout import (
    A_NH4,
    A_SR_FLOW,
    A_SR_LIST,
    ADJ_SRV6_ENCAP,
    ADJ_SRV6_LOCALSID,
)
from vecroute.srv6.layout import (
    CACHE_COLS,
    FLOW_LABELS,
    LIST_COLS,
    LIST_FIB,
    LIST_FLOW,
    LIST_HDRLEN,
    LIST_SRH,
    POL_BN,
    POL_BSTART,
    POL_COLS,
    SID_ADJ,
    SID_BEHAVIOR,
    SID_COLS,
    SID_FIB4,
    SID_FIB6,
    SID_FLAVOR,
    SR_HDR_MAX,
)

if TYPE_CHECKING:
    from vecroute.fib.fib import Fib

BEHAVIORS = ("End", "End.X", "End.T", "End.DX4", "End.DX6", "End.DT4", "End.DT6", "End.DT46")
MODES = ("encap", "encap.red")
MAX_SEGMENTS = 16
MAX_BUCKETS = 64


class Srv6Error(ValueError):
    """An SRv6 object that cannot be installed (one line)."""


@dataclass
class LocalSid:
    sid: ipaddress.IPv6Network
    behavior: str
    nh: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    table: int = 0  # End.T / End.DT*: the table to look the packet up in
    flavor: str | None = None  # "PSP"
    fib_table: int = 0  # the FIB table the SID itself is installed in
    index: int = -1


@dataclass
class Policy:
    bsid: ipaddress.IPv6Address
    segment_lists: list[tuple[list[ipaddress.IPv6Address], int]]
    mode: str = "encap"
    source: ipaddress.IPv6Address | None = None
    table: int = 0  # where the first segments are looked up
    index: int = -1
    lists: list[int] = field(default_factory=list)
    flow_label: str | None = None  # FLOW_LABELS; None: the tables' (``[srv6] flow_label``)


def policy_key(index: int) -> AdjKey:
    """The adjacency key of the policy with this index (one adjacency a policy)."""
    return AdjKey(ADJ_SRV6_ENCAP, -1, 0, index)


def outer_header(segments: list[ipaddress.IPv6Address], source: ipaddress.IPv6Address,
                 mode: str) -> tuple[bytes, bool]:
    """The outer IPv6 header (+ SRH) as Linux seg6 builds it; patched per packet."""
    srh_segs = segments if mode == "encap" else segments[1:]
    has_srh = bool(srh_segs)
    ip6 = struct.pack("!IHBB", 0x60000000, 0, 43 if has_srh else 41, 64)
    ip6 += source.packed + segments[0].packed
    if not has_srh:
        return ip6, False
    n = len(srh_segs)
    sl = len(segments) - 1  # .Red: SL counts the first segment that is not in the SRH
    srh = struct.pack("!BBBBBBH", 41, 2 * n, 4, sl, n - 1, 0, 0)
    srh += b"".join(s.packed for s in reversed(srh_segs))
    return ip6 + srh, True


class Srv6Tables:
    def __init__(self, fib: Fib) -> None:
        # a proxy, not a reference: the FIB owns these tables, and a cycle between the two
        # would keep every replaced FIB alive (the live router freezes its heap against
        # garbage-collector passes: frozen cycles are never collected)
        self.fib = weakref.proxy(fib)
        self.encap_source: ipaddress.IPv6Address | None = None
        self.flow_label = "hash"  # policies without their own (FLOW_LABELS)
        self.localsids: dict[tuple[int, ipaddress.IPv6Network], LocalSid] = {}
        self.policies: dict[ipaddress.IPv6Address, Policy] = {}
        self.steering: dict[tuple[int, object], ipaddress.IPv6Address] = {}
        self.sr_sid = np.zeros((1, SID_COLS), dtype=np.int32)
        self.sr_pol = np.zeros((1, POL_COLS), dtype=np.int32)
        self.sr_bucket = np.zeros(1, dtype=np.int32)
        self.sr_list = np.zeros((1, LIST_COLS), dtype=np.int32)
        self.sr_hdr = np.zeros((1, SR_HDR_MAX), dtype=np.uint8)
        self.sr_cache = np.full((1, CACHE_COLS), -1, dtype=np.int64)
        self._n_sid = self._n_pol = self._n_list = 0
        self.generation = 0

    # -- array growth ------------------------------------------------------------------------

    @staticmethod
    def _grow(a: np.ndarray, need: int, fill: int = 0) -> np.ndarray:
        if need <= a.shape[0]:
            return a
        b = np.full((max(need, 2 * a.shape[0]),) + a.shape[1:], fill, dtype=a.dtype)
        b[: a.shape[0]] = a
        return b

    def _check_free(self, prefix, table: int, kind: str) -> None:
        """A SID, a binding SID or a steered prefix never silently replaces an interface
        route or another SRv6 object (Linux answers "File exists" too)."""
        r = self.fib.routes.get((table, prefix))
        if r is not None and r.kind != kind and r.kind in (
            "local", "anycast", "connected", "srv6-localsid", "srv6-bsid", "srv6-steer"
        ):
            what = {"srv6-localsid": "a local SID", "srv6-bsid": "a binding SID",
                    "srv6-steer": "steered"}.get(r.kind, f"a {r.kind} route")
            raise Srv6Error(f"{prefix} in table {table} is already {what}")

    # -- local SIDs --------------------------------------------------------------------------

    def add_localsid(self, ls: LocalSid) -> LocalSid:
        if ls.behavior not in BEHAVIORS:
            raise Srv6Error(f"behavior {ls.behavior!r}: expected one of {', '.join(BEHAVIORS)}")
        if ls.flavor not in (None, "PSP"):
            raise Srv6Error(f"flavor {ls.flavor!r}: only PSP is supported")
        if ls.flavor and ls.behavior not in ("End", "End.X"):
            raise Srv6Error(f"flavor PSP applies to End and End.X, not {ls.behavior}")
        self._check_free(ls.sid, ls.fib_table, "srv6-localsid")
        beh = BEHAVIORS.index(ls.behavior)
        adj = 0
        needs_nh = ls.behavior in ("End.X", "End.DX4", "End.DX6")
        if needs_nh:
            want = 4 if ls.behavior == "End.DX4" else 6
            if ls.nh is None or ls.nh.version != want:
                raise Srv6Error(f"{ls.behavior} needs nh = an IPv{want} next hop")
            ifx = self.fib.connected_interface(ls.nh, ls.fib_table)
        fib4 = self.fib.lpm[4].table_index(ls.table, create=True)
        fib6 = self.fib.lpm[6].table_index(ls.table, create=True)
        # the table the SID is installed in, now: one table too many fails here, before
        # the SID is written anywhere
        self.fib.lpm[6].table_index(ls.fib_table, create=True)
        if needs_nh:  # only now, when nothing can fail any more: a refused SID holds nothing
            adj = self.fib.nh_adjacency(ifx, ls.nh)
            self.fib.adjs.pin(adj)  # held by the SID table, not by a load-balance
        key = (ls.fib_table, ls.sid)
        old = self.localsids.get(key)
        if old is not None:
            self._unpin(old)
        ls.index = old.index if old else self._n_sid
        if not old:
            self._n_sid += 1
            self.sr_sid = self._grow(self.sr_sid, self._n_sid)
        self.sr_sid[ls.index] = 0
        self.sr_sid[ls.index, SID_BEHAVIOR] = beh
        self.sr_sid[ls.index, SID_FLAVOR] = 1 if ls.flavor == "PSP" else 0
        self.sr_sid[ls.index, SID_FIB4] = fib4
        self.sr_sid[ls.index, SID_FIB6] = fib6
        self.sr_sid[ls.index, SID_ADJ] = adj
        self.localsids[key] = ls
        a = self.fib.adjs.get(AdjKey(ADJ_SRV6_LOCALSID, -1, 0, ls.index))
        self.fib.adjs.adj[a, A_NH4] = ls.index
        self.fib.install_special(ls.sid, ls.fib_table, "srv6-localsid", a)
        self.generation += 1
        return ls

    def del_localsid(self, sid: ipaddress.IPv6Network, fib_table: int = 0) -> None:
        ls = self.localsids.pop((fib_table, sid), None)
        if ls is None:
            raise Srv6Error(f"no local SID {sid} in table {fib_table}")
        self._unpin(ls)
        self.fib.remove_special(sid, fib_table)
        self.generation += 1

    def _unpin(self, ls: LocalSid) -> None:
        if ls.behavior in ("End.X", "End.DX4", "End.DX6"):
            self.fib.adjs.unref(int(self.sr_sid[ls.index, SID_ADJ]))

    # -- policies ----------------------------------------------------------------------------

    def add_policy(self, p: Policy) -> Policy:
        if p.mode not in MODES:
            raise Srv6Error(f"mode {p.mode!r}: expected encap or encap.red")
        flow = p.flow_label or self.flow_label
        if flow not in FLOW_LABELS:
            raise Srv6Error(f"flow label {flow!r}: expected {', '.join(FLOW_LABELS)}")
        src = p.source or self.encap_source
        if src is None:
            raise Srv6Error("no encapsulation source: set [srv6] encap_source or the "
                            "policy's source")
        if not p.segment_lists:
            raise Srv6Error("a policy needs at least one segment list")
        for what, a in (("binding SID", p.bsid), ("source", src)):
            if not isinstance(a, ipaddress.IPv6Address):
                raise Srv6Error(f"{what} {a}: not an IPv6 address")
        self._check_free(ipaddress.ip_network(f"{p.bsid}/128"), 0, "srv6-bsid")
        # everything is checked before anything is allocated: a bad policy changes nothing
        for segs, weight in p.segment_lists:
            if not segs:
                raise Srv6Error("a segment list needs at least one segment")
            if len(segs) > MAX_SEGMENTS:
                raise Srv6Error(f"{len(segs)} segments: at most {MAX_SEGMENTS}")
            for seg in segs:  # the SRH holds 128-bit segments (RFC 8754)
                if not isinstance(seg, ipaddress.IPv6Address):
                    raise Srv6Error(f"segment {seg}: not an IPv6 address")
            if not 1 <= weight <= MAX_BUCKETS:
                raise Srv6Error(f"weight {weight}: expected 1..{MAX_BUCKETS}")
        total = sum(w for _, w in p.segment_lists)
        if total > MAX_BUCKETS:
            raise Srv6Error(f"weights add up to {total} buckets, at most {MAX_BUCKETS}")
        fib6 = self.fib.lpm[6].table_index(p.table, create=True)
        buckets: list[int] = []
        lists: list[int] = []
        old = self.policies.get(p.bsid)
        for segs, weight in p.segment_lists:
            hdr, has_srh = outer_header(segs, src, p.mode)
            li = self._n_list
            self._n_list += 1
            self.sr_list = self._grow(self.sr_list, self._n_list)
            self.sr_hdr = self._grow(self.sr_hdr, self._n_list)
            self.sr_cache = self._grow(self.sr_cache, self._n_list, -1)
            self.sr_hdr[li, : len(hdr)] = np.frombuffer(hdr, dtype=np.uint8)
            self.sr_list[li, LIST_HDRLEN] = len(hdr)
            self.sr_list[li, LIST_SRH] = 1 if has_srh else 0
            self.sr_list[li, LIST_FIB] = fib6
            self.sr_list[li, LIST_FLOW] = FLOW_LABELS.index(flow)
            self.sr_cache[li] = -1
            lists.append(li)
            buckets += [li] * weight
        p.index = old.index if old else self._n_pol
        if not old:
            self._n_pol += 1
            self.sr_pol = self._grow(self.sr_pol, self._n_pol)
        start = self.sr_bucket.shape[0]
        self.sr_bucket = np.concatenate([self.sr_bucket, np.array(buckets, dtype=np.int32)])
        self.sr_pol[p.index, POL_BSTART] = start
        self.sr_pol[p.index, POL_BN] = len(buckets)
        p.lists = lists
        self.policies[p.bsid] = p
        a = self.policy_adjacency(p)
        self.fib.install_special(ipaddress.ip_network(f"{p.bsid}/128"), 0, "srv6-bsid", a)
        self.generation += 1
        return p

    def policy_adjacency(self, p: Policy) -> int:
        """The policy's adjacency (the steering routes' and its binding SID's), with its
        one segment list when it has one (A_SR_LIST) and its flow label (A_SR_FLOW)."""
        a = self.fib.adjs.get(policy_key(p.index))
        row = self.fib.adjs.adj[a]
        row[A_NH4] = p.index
        row[A_SR_LIST] = p.lists[0] if len(p.lists) == 1 else -1  # weights: buckets only
        row[A_SR_FLOW] = self.sr_list[p.lists[0], LIST_FLOW]  # every list's is the policy's
        return a

    def del_policy(self, bsid: ipaddress.IPv6Address) -> None:
        p = self.policies.pop(bsid, None)
        if p is None:
            raise Srv6Error(f"no policy with binding SID {bsid}")
        self.sr_pol[p.index, POL_BN] = 0  # steered traffic now drops (srv6-policy-empty)
        a = self.fib.adjs.index.get(policy_key(p.index))
        if a is not None:
            self.fib.adjs.adj[a, A_SR_LIST] = -1  # through sr_pol, whose buckets are gone
        self.fib.remove_special(ipaddress.ip_network(f"{bsid}/128"), 0)
        for (table, prefix), b in list(self.steering.items()):
            if b == bsid:
                self.unsteer(prefix, table)
        self.generation += 1

    # -- steering ----------------------------------------------------------------------------

    def steer(self, prefix, bsid: ipaddress.IPv6Address, table: int = 0) -> None:
        p = self.policies.get(bsid)
        if p is None:
            raise Srv6Error(f"no policy with binding SID {bsid}")
        net = ipaddress.ip_network(prefix, strict=False)
        self._check_free(net, table, "srv6-steer")
        self.fib.install_special(net, table, "srv6-steer", self.policy_adjacency(p))
        self.steering[(table, net)] = bsid
        self.generation += 1

    def unsteer(self, prefix, table: int = 0) -> None:
        net = ipaddress.ip_network(prefix, strict=False)
        if self.steering.pop((table, net), None) is None:
            raise Srv6Error(f"{net} in table {table} is not steered")
        self.fib.remove_special(net, table)
        self.generation += 1

    # -- views ---------------------------------------------------------------------------------

    def localsid_rows(self) -> list[dict]:
        return [{"sid": str(ls.sid), "behavior": ls.behavior + (f" ({ls.flavor})" if ls.flavor
                                                               else ""),
                 "nh": str(ls.nh) if ls.nh else "", "table": ls.table, "fib_table": t}
                for (t, _), ls in sorted(self.localsids.items(), key=lambda kv: str(kv[0]))]

    def policy_rows(self) -> list[dict]:
        return [self._policy_row(p) for p in self.policies.values()]

    def policy_row(self, index: int) -> dict | None:
        """The row of the policy with this index (its adjacency's A_NH4), None if none has
        it (deleted). Indexes are not positions in policy_rows: a deleted policy leaves a
        gap, a replaced one keeps its index."""
        for p in self.policies.values():
            if p.index == index:
                return self._policy_row(p)
        return None

    def _policy_row(self, p: Policy) -> dict:
        return {"bsid": str(p.bsid), "mode": p.mode,
                "source": str(p.source or self.encap_source),
                "flow_label": p.flow_label or self.flow_label,
                "segment_lists": [{"segments": [str(s) for s in segs], "weight": w}
                                  for segs, w in p.segment_lists]}

    def steering_rows(self) -> list[dict]:
        return [{"prefix": str(n), "table": t, "bsid": str(b)}
                for (t, n), b in sorted(self.steering.items(), key=lambda kv: str(kv[0]))]
