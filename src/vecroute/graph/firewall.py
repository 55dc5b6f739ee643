"""fw-in / fw-out: the firewall as two graph nodes around the one route lookup.

fw-in sees what ip4-input/ip6-input validated, before the lookup (ipfw's ``in``: packets
to the router and packets to forward); fw-out sees what the lookup sends to an interface,
with the transmit interface known (``out``, ``xmit``), including packets the router itself
originates (echo replies, ICMP errors). A vector is classified at once by the compiled
classifier (:func:`vecroute.firewall.classify.fw_batch`); the verdicts then send each
packet on: to the lookup / rewrite, to error-drop, to icmp-error (``reject``, ``unreach``)
or to tcp-reset (``reset``). Neighbour discovery to link-local or multicast addresses and
limited broadcasts go straight to ip4-local/ip6-local and are not filtered.

Frames Linux sends on a linux-cp mirror (``F_INJ_L2``: whole frames, their Ethernet header
built by Linux) enter fw-out when it runs (:func:`fw_out_entry` finds their IP header,
as ip4-input/ip6-input would): as the router's own packets (no receive interface), to the
port they leave by; passed, they go to interface-output as they are. The same addresses
are exempt as on input (multicast, link-local, broadcast: OSPF, ND), and ARP is not IP.
A verdict other than pass drops them (``reject`` / ``reset`` would answer the router
itself).

With no firewall the graph is compiled with ``fw = None`` and these nodes vanish; with
one, the ``opts[OPT_FW]`` bits say which directions run.
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import A_IF
from vecroute.firewall.classify import fw_batch, fw_batch_tables, fw_count_many
from vecroute.firewall.keys import (
    K_RX,
    K_TX,
    TK_DST_HI,
    TK_DST_LO,
    TK_FAMILY,
    TK_LEN,
    TK_ROWS,
    TK_SRC_HI,
    TK_SRC_LO,
    extract_keys,
)
from vecroute.firewall.layout import (
    A_ALLOW,
    DIR_IN,
    DROP_STATE_FULL,
    RI_ACT,
    V_DROP,
    V_PASS,
    V_REJECT,
)
from vecroute.firewall.states import FC_COUNT
from vecroute.graph import counters as C
from vecroute.graph.frames import drop, enqueue, icmp_error
from vecroute.graph.ip6_input import walk_ext_headers
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import FW_TABLES, FW_TRIVIAL_IN, OPT_FW
from vecroute.packet.batch import (
    F_FRAG,
    F_FRAG_NONFIRST,
    F_FW_SKIP,
    F_INJ_L2,
    F_IP6,
    F_LOCAL_ORIGIN,
    M_ADJ,
    M_ERR,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_PROTO,
    M_TX,
)
from vecroute.packet.headers import ip_length, rd16, rd32, rd64
from vecroute.packet.node_ids import (
    INTERFACE_OUTPUT,
    IP4_LOOKUP,
    IP4_REWRITE,
    IP6_LOOKUP,
    IP6_REWRITE,
    TCP_RESET,
)

NODES = (
    NodeDecl(
        "fw-in",
        next=("ip4-lookup", "ip6-lookup", "icmp4-error", "icmp6-error", "tcp-reset", "error-drop"),
        counters=("fw-deny", "fw-reject", "fw-reset", "fw-state-full"),
    ),
    NodeDecl(
        "fw-out",
        next=(
            "icmp4-error", "icmp6-error", "tcp-reset", "ip4-rewrite", "ip6-rewrite",
            "interface-output", "error-drop",
        ),
        counters=("fw-deny", "fw-reject", "fw-reset", "fw-state-full", "fw-inject-malformed"),
    ),
)


# fw_out_entry's answers
INJ_CLASSIFY = 0  # an IP packet to a unicast address: classified
INJ_EXEMPT = 1  # ARP, multicast, link-local, broadcast: out as it is (fw-in skips those too)
INJ_MALFORMED = 2  # an IP header that does not hold together, or a VLAN tag: dropped


@njit(cache=True)
def fw_out_entry(buf, meta, i) -> int:
    """What fw-out does with frame i from the control plane (F_INJ_L2): INJ_CLASSIFY with
    M_L3, M_PROTO, M_L4 and the fragment flags set as ip4-input / ip6-input set them,
    INJ_EXEMPT, or INJ_MALFORMED (VLAN-tagged frames too: vecroute has no VLANs, and a tag
    must not carry a packet past the filter). Reads nothing past the frame."""
    o = meta[M_OFF, i]
    end = o + meta[M_LEN, i]
    l3 = o + 14
    if end < l3:
        return INJ_EXEMPT
    et = rd16(buf, o + 12)
    flags = meta[M_FLAGS, i] | F_LOCAL_ORIGIN
    if et == 0x0800:
        if end - l3 < 20 or (buf[l3] >> 4) != 4:
            return INJ_MALFORMED
        ihl = np.int64(buf[l3] & 15) * 4
        tot = np.int64(rd16(buf, l3 + 2))
        if ihl < 20 or tot < ihl or l3 + tot > end:
            return INJ_MALFORMED
        d0 = buf[l3 + 16]
        if (d0 & 0xF0) == 0xE0 or rd32(buf, l3 + 16) == 0xFFFFFFFF:
            return INJ_EXEMPT  # multicast (OSPF, 224.0.0.0/4), the limited broadcast
        fo = rd16(buf, l3 + 6)
        if fo & 0x3FFF:
            flags |= F_FRAG
        if fo & 0x1FFF:
            flags |= F_FRAG_NONFIRST
        meta[M_PROTO, i] = buf[l3 + 9]
        meta[M_L4, i] = l3 + ihl
    elif et == 0x86DD:
        if end - l3 < 40 or (buf[l3] >> 4) != 6:
            return INJ_MALFORMED
        stop = l3 + 40 + np.int64(rd16(buf, l3 + 4))
        if stop > end:
            return INJ_MALFORMED
        d0 = buf[l3 + 24]
        if d0 == 0xFF or (d0 == 0xFE and (buf[l3 + 25] & 0xC0) == 0x80):
            return INJ_EXEMPT  # multicast, link-local: ND, MLD, OSPFv3
        proto, l4, fflags, ok = walk_ext_headers(buf, l3, stop)
        if not ok:
            return INJ_MALFORMED
        flags |= fflags | F_IP6
        meta[M_PROTO, i] = proto
        meta[M_L4, i] = l4
    elif et == 0x8100 or et == 0x88A8 or et == 0x9100:
        return INJ_MALFORMED
    else:
        return INJ_EXEMPT
    meta[M_L3, i] = l3
    meta[M_FLAGS, i] = flags
    return INJ_CLASSIFY


@njit(cache=True, _nrt=False)
def _default_only(work, k, buf, meta, fw, fwv, now) -> None:
    """No rule but the default one applies in this direction: what classifying would do
    (count the default rule, fill the verdict rows the actions and a packet trace read)
    without the keys and the class lookups."""
    dflt = fw.rinfo.shape[0] - 1
    allow = fw.rinfo[dflt, RI_ACT] == A_ALLOW
    nbytes = np.int64(0)
    for j in range(k):
        i = work[j]
        fwv[0, j] = V_PASS if allow else V_DROP
        fwv[1, j] = dflt
        fwv[2, j] = 0
        nbytes += meta[M_OFF, i] + meta[M_LEN, i] - meta[M_L3, i]
    fw_count_many(fw, dflt, k, nbytes, now)


@njit(cache=True, inline="always")
def table_key_view(fwk):
    """The table keys (``TK_*`` rows, one per column over the vector) in the key scratch's
    memory: the passes that read only those fill them compact, not 120 bytes apart."""
    cap = fwk.shape[0]
    return fwk.reshape(-1)[: TK_ROWS * cap].reshape(TK_ROWS, cap)


@njit(cache=True, inline="always")
def table_keys(buf, l3, six, length, tk, j) -> None:
    """Column j of the table keys ``tk``: what a table-only rule set reads (``FW_TABLES``:
    family, addresses, length) of the packet at l3, as extract_keys has them."""
    if six:
        tk[TK_FAMILY, j] = 6
        tk[TK_SRC_HI, j] = np.int64(rd64(buf, l3 + 8))
        tk[TK_SRC_LO, j] = np.int64(rd64(buf, l3 + 16))
        tk[TK_DST_HI, j] = np.int64(rd64(buf, l3 + 24))
        tk[TK_DST_LO, j] = np.int64(rd64(buf, l3 + 32))
    else:
        tk[TK_FAMILY, j] = 4
        tk[TK_SRC_HI, j] = 0
        tk[TK_SRC_LO, j] = np.int64(rd32(buf, l3 + 12))
        tk[TK_DST_HI, j] = 0
        tk[TK_DST_LO, j] = np.int64(rd32(buf, l3 + 16))
    tk[TK_LEN, j] = length


@njit(cache=True, _nrt=False)
def _tables_only(work, k, buf, meta, fw, fwk, fwv, now) -> None:
    """Classify the vector under a table-only rule set (the caller checked ``FW_TABLES``
    and that no state is left to sweep): the walk's verdicts and counts from the
    addresses alone."""
    tk = table_key_view(fwk)
    for j in range(k):
        l3 = np.int64(meta[M_L3, work[j]])
        six = (buf[l3] >> 4) == 6
        table_keys(buf, l3, six, ip_length(buf, l3, six), tk, j)
    fw_batch_tables(fw, tk, k, now, fwv[0], fwv[1], fwv[2])


@njit(cache=True, _nrt=False)
def fw_classify(work, k, buf, meta, dp, fw, fwk, fwv, now, direction) -> None:
    """The verdicts of the k packets of ``work`` in ``direction`` (DIR_IN before the
    lookup, DIR_OUT with the adjacency chosen) into fwv: verdict, deciding rule, aux.
    Counts rules and keeps states; sends no packet anywhere (fw_act does)."""
    if dp.opts[OPT_FW] & (FW_TRIVIAL_IN << direction):
        _default_only(work, k, buf, meta, fw, fwv, now)
        return
    if dp.opts[OPT_FW] & FW_TABLES and fw.ctl[FC_COUNT] == 0:
        _tables_only(work, k, buf, meta, fw, fwk, fwv, now)
        return
    extract_keys(buf, meta, work, k, fwk)
    if direction != DIR_IN:
        for j in range(k):
            i = work[j]
            a = meta[M_ADJ, i]  # none for a frame from the control plane: its port
            fwk[j, K_TX] = dp.adj[a, A_IF] if a >= 0 else meta[M_TX, i]
            if meta[M_FLAGS, i] & F_LOCAL_ORIGIN:
                fwk[j, K_RX] = -1  # the router's own packet: no receive interface
    fw_batch(fw, fwk, k, direction, now, fwv[0], fwv[1], fwv[2])


@njit(cache=True, inline="always")
def fw_act(frames, frame_n, meta, i, v, aux, ip6) -> None:
    """Send packet i where a verdict other than pass says: error-drop (deny, a full state
    table), icmp-error (reject, unreach) or tcp-reset (reset)."""
    if v == V_DROP:
        drop(frames, frame_n, meta, i, C.C_FW_STATE_FULL if aux == DROP_STATE_FULL
             else C.C_FW_DENY)
    elif v == V_REJECT:
        icmp_error(frames, frame_n, meta, i, ip6, C.C_FW_REJECT, aux >> 8, aux & 0xFF, 0)
    else:  # V_RESET
        meta[M_ERR, i] = C.C_FW_RESET
        enqueue(frames, frame_n, meta, TCP_RESET, i)


@njit(cache=True, _nrt=True)
def fw_node(work, k, buf, meta, frames, frame_n, dp, fw, fwk, fwv, now, direction) -> int:
    """Classify the vector (``direction`` DIR_IN at fw-in, DIR_OUT at fw-out) and act;
    returns how many packets were classified (work[:k] then holds them: frames from the
    control plane that are exempt or malformed leave the vector first)."""
    if fw is None:  # compiled away when the graph has no firewall
        return k
    if direction != DIR_IN:
        kept = 0
        for j in range(k):
            i = work[j]
            if meta[M_FLAGS, i] & F_INJ_L2:
                what = fw_out_entry(buf, meta, i)
                if what == INJ_EXEMPT:
                    enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, i)
                    continue
                if what == INJ_MALFORMED:
                    drop(frames, frame_n, meta, i, C.C_FW_INJECT_MALFORMED)
                    continue
            work[kept] = i
            kept += 1
        k = kept
        if k == 0:
            return 0
    fw_classify(work, k, buf, meta, dp, fw, fwk, fwv, now, direction)
    for j in range(k):
        i = work[j]
        v = fwv[0, j]
        ip6 = (buf[meta[M_L3, i]] >> 4) == 6
        if direction != DIR_IN and meta[M_FLAGS, i] & F_INJ_L2:  # from Linux: out, or dropped
            if v == V_PASS:
                enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, i)
            else:
                fw_act(frames, frame_n, meta, i, V_DROP,
                       fwv[2, j] if v == V_DROP else 0, ip6)
        elif v != V_PASS:
            fw_act(frames, frame_n, meta, i, v, fwv[2, j], ip6)
        elif direction == DIR_IN:
            enqueue(frames, frame_n, meta, IP6_LOOKUP if ip6 else IP4_LOOKUP, i)
        else:
            meta[M_FLAGS, i] |= F_FW_SKIP  # re-injected after neighbour resolution: once
            enqueue(frames, frame_n, meta, IP6_REWRITE if ip6 else IP4_REWRITE, i)
    return k
