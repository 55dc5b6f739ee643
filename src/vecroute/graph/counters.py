"""The one registry of counters: drop reasons and data-path events.

Like VPP's ``ip4_error.h``: every reason is declared once here with the node that signals
it and a one-line description. The kernels use the integer ids (module constants, frozen at
compile time), while ``ctl show errors``, the replay report and docs/counters.md read names
and descriptions from this table. Nobody invents a reason string inline.
"""

from __future__ import annotations

from typing import NamedTuple


class Counter(NamedTuple):
    name: str
    node: str
    kind: str  # "drop": the packet died here; "event": something worth counting happened
    description: str


COUNTERS: tuple[Counter, ...] = (
    # ethernet-input
    Counter("eth-too-short", "ethernet-input", "drop", "frame shorter than an Ethernet header"),
    Counter("frame-too-long", "ethernet-input", "drop", "frame longer than a batch buffer slot"),
    Counter(
        "not-for-us",
        "ethernet-input",
        "drop",
        "destination MAC neither the interface's nor broadcast/multicast",
    ),
    Counter("unknown-ethertype", "ethernet-input", "drop", "ethertype not IPv4, IPv6 or ARP"),
    # arp-input
    Counter("arp-malformed", "arp-input", "drop", "ARP packet too short or not Ethernet/IPv4"),
    Counter(
        "arp-not-for-us",
        "arp-input",
        "drop",
        "ARP request for an address that is not ours (live mode: punted as arp-punt instead,"
        " for the RFC 826 merge)",
    ),
    Counter("arp-reply-sent", "arp-input", "event", "ARP request for our address answered"),
    Counter("arp-punt", "arp-input", "event", "ARP packet handed to the control plane"),
    # ip4-input
    Counter("ip4-too-short", "ip4-input", "drop", "ip4 packet shorter than 20 bytes"),
    Counter("ip4-bad-version", "ip4-input", "drop", "ip4 version field is not 4"),
    Counter(
        "ip4-bad-ihl", "ip4-input", "drop", "ip4 header length < 20 bytes or beyond the packet"
    ),
    Counter(
        "ip4-bad-length",
        "ip4-input",
        "drop",
        "ip4 total length smaller than the header or larger than the frame",
    ),
    Counter("ip4-bad-checksum", "ip4-input", "drop", "bad ip4 header checksum"),
    Counter(
        "martian-source",
        "ip4-input",
        "drop",
        "ip4 source in 0/8, 127/8, multicast, 240/4 or limited broadcast",
    ),
    Counter("ip4-dst-multicast", "ip4-input", "drop", "ip4 multicast destination (not routed)"),
    Counter("martian-destination", "ip4-input", "drop",
            "ip4 destination in 0/8, 127/8 or 240/4 (RFC 1812 5.3.7)"),
    # ip6-input
    Counter("ip6-too-short", "ip6-input", "drop", "ip6 packet shorter than 40 bytes"),
    Counter("ip6-bad-version", "ip6-input", "drop", "ip6 version field is not 6"),
    Counter("ip6-bad-length", "ip6-input", "drop", "ip6 payload length larger than the frame"),
    Counter(
        "ip6-bad-ext-header",
        "ip6-input",
        "drop",
        "ip6 extension header chain truncated or malformed",
    ),
    Counter("ip6-bad-source", "ip6-input", "drop", "ip6 source multicast, unspecified or loopback"),
    Counter(
        "ip6-link-local", "ip6-input", "drop",
        "ip6 link-local source or destination not forwarded (a link-local source: answered"
        " with destination unreachable code 2, beyond scope, on its link)"
    ),
    Counter(
        "ip6-dst-multicast", "ip6-input", "drop", "ip6 multicast destination we do not listen to"
    ),
    Counter("ip6-bad-destination", "ip6-input", "drop",
            "ip6 destination unspecified (::) or loopback (::1) (RFC 4291 2.5.2, 2.5.3)"),
    Counter("ip6-unknown-option", "ip6-input", "drop",
            "unknown hop-by-hop / destination option whose action bits say discard"
            " (RFC 8200 4.2; codes 10/11 also answer with parameter problem code 2)"),
    # lookup
    Counter(
        "fib-lookups", "ip4-lookup", "event", "FIB lookups (ip4 and ip6), one per routed packet"
    ),
    Counter("no-route", "ip4-lookup", "drop", "no route to the destination"),
    Counter(
        "fib-table-missing", "ip4-lookup", "drop", "packet bound to a FIB table that has no routes"
    ),
    Counter("blackhole", "ip4-lookup", "drop", "route points to a drop adjacency"),
    Counter("route-unreachable", "ip4-lookup", "drop",
            "route of type unreachable: answered with ICMP host unreachable (ICMPv6 no route)"),
    Counter("route-prohibit", "ip4-lookup", "drop",
            "route of type prohibit: answered with ICMP administratively prohibited"),
    Counter("l2-multicast-unicast", "ip4-lookup", "drop",
            "unicast IP received in a link-layer broadcast/multicast frame: not forwarded"
            " (RFC 1812 5.3.4)"),
    Counter("ip4-link-local", "ip4-lookup", "drop",
            "ip4 link-local (169.254/16) source or destination not forwarded (RFC 3927 2.7)"),
    # local delivery
    Counter("echo-reply-sent", "ip4-local", "event", "ICMP/ICMPv6 echo request to us answered"),
    Counter("local-unhandled", "ip4-local", "drop",
            "packet to us that no local service handles (ICMP other than echo, broadcast)"),
    Counter("udp-port-unreachable", "ip4-local", "drop",
            "UDP to a router address: answered with port unreachable (RFC 1122 3.2.2.1)"),
    Counter("tcp-port-closed", "ip4-local", "drop",
            "TCP to a router address: answered with a RST (RFC 9293 3.10.7.1)"),
    Counter("protocol-unreachable", "ip4-local", "drop",
            "unknown protocol to a router address: protocol unreachable / parameter problem"
            " code 1"),
    Counter("ip6-routing-header", "ip6-local", "drop",
            "routing header with segments left > 0 at an address that is not a SID: parameter"
            " problem code 0 (RFC 8200 4.4, RFC 5095)"),
    Counter("local-bad-checksum", "ip4-local", "drop", "ICMP to us with a bad checksum"),
    Counter("nd-punt", "ip6-local", "event", "neighbour discovery handed to the control plane"),
    # gso-segment
    Counter(
        "gso-segmented",
        "gso-segment",
        "event",
        "GSO super-packet cut into ordinary packets in software (it needed fragmenting,"
        " SRv6 or a punt to a Linux mirror)",
    ),
    Counter(
        "gso-bad", "gso-segment", "drop", "GSO super-packet with headers that cannot be cut"
    ),
    Counter(
        "gso-no-buffer", "gso-segment", "drop", "no spare slots for the segments of a GSO packet"
    ),
    # rewrite / output
    Counter("ttl-expired", "ip4-rewrite", "drop", "ip4 ttl or ip6 hop limit <= 1 when forwarding"),
    Counter(
        "mtu-exceeded",
        "ip4-rewrite",
        "drop",
        "packet larger than the egress MTU and DF set (ip6: always)",
    ),
    Counter(
        "neighbor-incomplete", "ip4-rewrite", "drop", "next hop has no resolved neighbour (MAC) yet"
    ),
    Counter("ip4-forwarded", "ip4-rewrite", "event", "ip4 packets forwarded"),
    Counter("ip6-forwarded", "ip6-rewrite", "event", "ip6 packets forwarded"),
    # fragmentation
    Counter("fragments-created", "ip4-frag", "event", "ip4 fragments created"),
    Counter("frag-no-buffer", "ip4-frag", "drop", "no free batch slot to hold a fragment"),
    Counter(
        "frag-options-too-long", "ip4-frag", "drop", "ip4 header too long to fragment into the MTU"
    ),
    Counter("frag-offset-overflow", "ip4-frag", "drop",
            "fragment offset + length beyond 65535: cannot be refragmented (RFC 791)"),
    # neighbour requests
    Counter(
        "arp-request-sent",
        "neighbor-request",
        "event",
        "ARP request sent for an unresolved next hop",
    ),
    Counter(
        "ns-sent",
        "neighbor-request",
        "event",
        "neighbour solicitation sent for an unresolved next hop",
    ),
    Counter(
        "neighbor-request-limited",
        "neighbor-request",
        "event",
        "ARP/NS not sent: one per neighbour per second",
    ),
    Counter("request-no-buffer", "neighbor-request", "event", "no free batch slot for an ARP/NS"),
    Counter(
        "neighbor-queued",
        "neighbor-request",
        "event",
        "packet handed to the control plane to wait for its next hop's MAC (live mode)",
    ),
    Counter(
        "neighbor-failed",
        "neighbor-request",
        "drop",
        "address resolution failed: queued packet answered with destination unreachable"
        " (RFC 4861 7.2.2)",
    ),
    # srv6
    Counter("srv6-encapsulated", "srv6-encap", "event", "packets encapsulated by an SR policy"),
    Counter("srv6-no-route", "srv6-encap", "drop", "no route to the first segment of the policy"),
    Counter("srv6-policy-empty", "srv6-encap", "drop", "SR policy without a segment list"),
    Counter("srv6-no-headroom", "srv6-encap", "drop",
            "no room in the buffer slot for the outer headers"),
    Counter("srv6-encap-too-big", "srv6-encap", "drop",
            "encapsulated ip4 packet (DF clear) larger than the egress MTU"),
    Counter("srv6-end", "srv6-localsid", "event", "SRH processed by an End/End.X/End.T SID"),
    Counter("srv6-decapsulated", "srv6-localsid", "event", "packets decapsulated by a SID"),
    Counter("srv6-bad-srh", "srv6-localsid", "drop",
            "SRH Segments Left / Last Entry inconsistent with Hdr Ext Len (param problem)"),
    Counter("srv6-sl-not-zero", "srv6-localsid", "drop",
            "decapsulating SID with Segments Left > 0 (param problem)"),
    Counter("srv6-upper-layer", "srv6-localsid", "drop",
            "upper-layer header not allowed at this SID (param problem code 4)"),
    # reassembly (fragments addressed to the router)
    Counter("reass-queued", "ip4-reass", "drop",
            "fragment held for reassembly (its bytes copied to the reassembly buffer)"),
    Counter("reass-ok", "ip4-reass", "event",
            "datagram reassembled (ip4 and ip6): it goes on to local delivery in the slot"
            " of the fragment that completed it"),
    Counter("reass-atomic", "ip6-reass", "event",
            "ip6 atomic fragment (offset 0, M=0, RFC 6946): fragment header removed,"
            " processed alone"),
    Counter("reass-duplicate", "ip4-reass", "drop",
            "fragment with the offset and length of one already held: ignored"),
    Counter("reass-overlap", "ip4-reass", "drop",
            "fragment overlapping one already held: the whole datagram is discarded"
            " (RFC 5722)"),
    Counter("reass-inconsistent", "ip4-reass", "drop",
            "last fragment ending before data held, a second last fragment with another"
            " length, or data beyond the last: the whole datagram is discarded"),
    Counter("reass-bad-length", "ip4-reass", "drop",
            "empty fragment, offset + length beyond 65535, or a non-last fragment not a"
            " multiple of 8 bytes (ip6: parameter problem)"),
    Counter("reass-tiny-fragment", "ip4-reass", "drop",
            "ip4 TCP fragment at offset 0 shorter than a TCP header, or at offset 8"
            " (RFC 1858, RFC 3128)"),
    Counter("reass-header-incomplete", "ip6-reass", "drop",
            "ip6 first fragment without the upper-layer header (RFC 7112: parameter"
            " problem code 3)"),
    Counter("reass-too-big", "ip4-reass", "drop",
            "datagram larger than a batch slot holds (2000 bytes), or ip6 headers before"
            " the fragment header beyond 248 bytes: the whole datagram is discarded"),
    Counter("reass-too-many-fragments", "ip4-reass", "drop",
            "more than 64 fragments for one datagram: the whole datagram is discarded"),
    Counter("reass-discarded", "ip4-reass", "drop",
            "fragment of a datagram already discarded, until the datagram's timeout"),
    Counter("reass-no-context", "ip4-reass", "drop",
            "no free reassembly context (all in use, or the hash probes full):"
            " a new datagram is refused"),
    Counter("reass-timeout", "ip4-reass", "event",
            "datagram not complete within 30 s (ip4) / 60 s (ip6): freed; a Time Exceeded"
            " is tried when its first fragment arrived"),
    Counter("reass-nd-fragmented", "ip6-reass", "drop",
            "reassembled neighbour discovery message: ignored (RFC 6980)"),
    # icmp errors
    Counter("icmp-error-sent", "icmp4-error", "event",
            "ICMP/ICMPv6 error sent (counted when it leaves by interface-output)"),
    Counter(
        "icmp-error-suppressed",
        "icmp4-error",
        "event",
        "no ICMP error: original was an ICMP error, a non-first fragment, multicast"
        " or from an invalid source",
    ),
    Counter("icmp-rate-limited", "icmp4-error", "event", "no ICMP error: token bucket empty"),
    Counter(
        "icmp-error-no-route", "icmp4-error", "event", "no ICMP error: no route back to the source"
    ),
    Counter("answer-dropped", "error-drop", "event",
            "an ICMP error, TCP RST or redirect the router built died before it left (its"
            " drop reason is counted too)"),
    Counter("redirect-sent", "ip4-rewrite", "event",
            "ICMP redirect / ND redirect sent: the packet left by the interface it came in on,"
            " to a next hop on the sender's link (RFC 1812 5.2.7.2, RFC 4861 8.2)"),
    # firewall
    Counter("fw-deny", "fw-in", "drop",
            "denied by a firewall rule (deny, or the default rule 65535 set to deny)"),
    Counter("fw-reject", "fw-in", "drop",
            "rejected by a firewall rule: answered with an ICMP/ICMPv6 unreachable"),
    Counter("fw-reset", "fw-in", "drop",
            "rejected by a firewall `reset` rule: answered with a TCP RST"),
    Counter("fw-state-full", "fw-in", "drop",
            "keep-state found the state table full (max_states) and no expired or"
            " unanswered state to evict: new flow dropped"),
    Counter("fw-inject-malformed", "fw-out", "drop",
            "a frame the control plane injected (linux-cp: Linux sent it on a mirror) whose"
            " IPv4/IPv6 header does not hold together (version, lengths, extension headers),"
            " or that carries a VLAN tag: dropped, the output firewall cannot judge it"),
    Counter("tcp-reset-sent", "tcp-reset", "event",
            "TCP RST sent for a `reset` rule or a closed port (counted when it leaves)"),
    Counter("fw-reset-suppressed", "tcp-reset", "event",
            "no TCP RST: the segment was a RST or came from a multicast/invalid source"),
    Counter("tcp-reset-rate-limited", "tcp-reset", "event",
            "no TCP RST: the RST rate limit was reached ([icmp] tcp_reset_rate /"
            " tcp_reset_burst); the segment is only dropped"),
    # generic
    Counter("punt", "punt", "event", "packet handed to the control plane"),
    Counter(
        "host-punt",
        "punt",
        "event",
        "packet for the port's Linux mirror (linux-cp): to the router and not answered by it,"
        " link-scope multicast, fragments to the router",
    ),
    Counter(
        "punt-policed",
        "punt",
        "drop",
        "punt over its rate (per reason: arp, nd, pending; and per source or next hop)",
    ),
    Counter(
        "punt-queue-full", "punt", "drop", "the worker's punt ring to the control plane was full"
    ),
    Counter(
        "punt-malformed",
        "punt",
        "drop",
        "punt the control plane could not use: longer than an inject record (2032 bytes),"
        " no valid next hop, or an unknown reason",
    ),
    Counter(
        "inject-queue-full",
        "control-plane",
        "drop",
        "a worker's inject ring was full (or the record longer than 2032 bytes): a released"
        " packet or an ARP/ND answer not sent",
    ),
)

_IDS = {c.name: i for i, c in enumerate(COUNTERS)}
N_COUNTERS = len(COUNTERS)


def counter_id(name: str) -> int:
    """The integer id of a counter; raises KeyError for an undeclared name."""
    return _IDS[name]


def counter_names() -> list[str]:
    return [c.name for c in COUNTERS]


def _c(name: str) -> int:
    return _IDS[name]


# Ids used by the kernels (module constants are compile-time constants for numba).
C_ETH_TOO_SHORT = _c("eth-too-short")
C_FRAME_TOO_LONG = _c("frame-too-long")
C_NOT_FOR_US = _c("not-for-us")
C_UNKNOWN_ETHERTYPE = _c("unknown-ethertype")
C_ARP_MALFORMED = _c("arp-malformed")
C_ARP_NOT_FOR_US = _c("arp-not-for-us")
C_ARP_REPLY_SENT = _c("arp-reply-sent")
C_ARP_PUNT = _c("arp-punt")
C_IP4_TOO_SHORT = _c("ip4-too-short")
C_IP4_BAD_VERSION = _c("ip4-bad-version")
C_IP4_BAD_IHL = _c("ip4-bad-ihl")
C_IP4_BAD_LENGTH = _c("ip4-bad-length")
C_IP4_BAD_CHECKSUM = _c("ip4-bad-checksum")
C_MARTIAN_SOURCE = _c("martian-source")
C_IP4_DST_MULTICAST = _c("ip4-dst-multicast")
C_IP6_TOO_SHORT = _c("ip6-too-short")
C_IP6_BAD_VERSION = _c("ip6-bad-version")
C_IP6_BAD_LENGTH = _c("ip6-bad-length")
C_IP6_BAD_EXT = _c("ip6-bad-ext-header")
C_IP6_BAD_SOURCE = _c("ip6-bad-source")
C_IP6_LINK_LOCAL = _c("ip6-link-local")
C_IP6_DST_MULTICAST = _c("ip6-dst-multicast")
C_MARTIAN_DESTINATION = _c("martian-destination")
C_IP6_BAD_DESTINATION = _c("ip6-bad-destination")
C_IP6_UNKNOWN_OPTION = _c("ip6-unknown-option")
C_L2_MULTICAST_UNICAST = _c("l2-multicast-unicast")
C_IP4_LINK_LOCAL = _c("ip4-link-local")
C_UDP_PORT_UNREACHABLE = _c("udp-port-unreachable")
C_TCP_PORT_CLOSED = _c("tcp-port-closed")
C_PROTOCOL_UNREACHABLE = _c("protocol-unreachable")
C_IP6_ROUTING_HEADER = _c("ip6-routing-header")
C_FRAG_OFFSET_OVERFLOW = _c("frag-offset-overflow")
C_ANSWER_DROPPED = _c("answer-dropped")
C_REDIRECT_SENT = _c("redirect-sent")
C_FIB_LOOKUPS = _c("fib-lookups")
C_NO_ROUTE = _c("no-route")
C_FIB_TABLE_MISSING = _c("fib-table-missing")
C_BLACKHOLE = _c("blackhole")
C_ROUTE_UNREACHABLE = _c("route-unreachable")
C_ROUTE_PROHIBIT = _c("route-prohibit")
C_ECHO_REPLY_SENT = _c("echo-reply-sent")
C_LOCAL_UNHANDLED = _c("local-unhandled")
C_LOCAL_BAD_CHECKSUM = _c("local-bad-checksum")
C_ND_PUNT = _c("nd-punt")
C_GSO_SEGMENTED = _c("gso-segmented")
C_GSO_BAD = _c("gso-bad")
C_GSO_NO_BUFFER = _c("gso-no-buffer")
C_TTL_EXPIRED = _c("ttl-expired")
C_MTU_EXCEEDED = _c("mtu-exceeded")
C_NEIGHBOR_INCOMPLETE = _c("neighbor-incomplete")
C_IP4_FORWARDED = _c("ip4-forwarded")
C_IP6_FORWARDED = _c("ip6-forwarded")
C_FRAGMENTS_CREATED = _c("fragments-created")
C_FRAG_NO_BUFFER = _c("frag-no-buffer")
C_FRAG_OPTIONS_TOO_LONG = _c("frag-options-too-long")
C_ARP_REQUEST_SENT = _c("arp-request-sent")
C_NS_SENT = _c("ns-sent")
C_NEIGHBOR_REQUEST_LIMITED = _c("neighbor-request-limited")
C_REQUEST_NO_BUFFER = _c("request-no-buffer")
C_NEIGHBOR_QUEUED = _c("neighbor-queued")
C_NEIGHBOR_FAILED = _c("neighbor-failed")
C_ICMP_ERROR_SENT = _c("icmp-error-sent")
C_ICMP_ERROR_SUPPRESSED = _c("icmp-error-suppressed")
C_ICMP_RATE_LIMITED = _c("icmp-rate-limited")
C_ICMP_ERROR_NO_ROUTE = _c("icmp-error-no-route")
C_PUNT = _c("punt")
C_HOST_PUNT = _c("host-punt")
C_PUNT_POLICED = _c("punt-policed")
C_PUNT_QUEUE_FULL = _c("punt-queue-full")
C_PUNT_MALFORMED = _c("punt-malformed")
C_INJECT_QUEUE_FULL = _c("inject-queue-full")
C_FW_DENY = _c("fw-deny")
C_FW_REJECT = _c("fw-reject")
C_FW_RESET = _c("fw-reset")
C_FW_STATE_FULL = _c("fw-state-full")
C_FW_INJECT_MALFORMED = _c("fw-inject-malformed")
C_FW_RESET_SUPPRESSED = _c("fw-reset-suppressed")
C_TCP_RESET_SENT = _c("tcp-reset-sent")
C_TCP_RESET_RATE_LIMITED = _c("tcp-reset-rate-limited")
C_SRV6_ENCAPSULATED = _c("srv6-encapsulated")
C_SRV6_NO_ROUTE = _c("srv6-no-route")
C_SRV6_POLICY_EMPTY = _c("srv6-policy-empty")
C_SRV6_NO_HEADROOM = _c("srv6-no-headroom")
C_SRV6_ENCAP_TOO_BIG = _c("srv6-encap-too-big")
C_SRV6_END = _c("srv6-end")
C_SRV6_DECAPSULATED = _c("srv6-decapsulated")
C_SRV6_BAD_SRH = _c("srv6-bad-srh")
C_SRV6_SL_NOT_ZERO = _c("srv6-sl-not-zero")
C_SRV6_UPPER_LAYER = _c("srv6-upper-layer")
C_REASS_QUEUED = _c("reass-queued")
C_REASS_OK = _c("reass-ok")
C_REASS_ATOMIC = _c("reass-atomic")
C_REASS_DUPLICATE = _c("reass-duplicate")
C_REASS_OVERLAP = _c("reass-overlap")
C_REASS_INCONSISTENT = _c("reass-inconsistent")
C_REASS_BAD_LENGTH = _c("reass-bad-length")
C_REASS_TINY_FRAGMENT = _c("reass-tiny-fragment")
C_REASS_HEADER_INCOMPLETE = _c("reass-header-incomplete")
C_REASS_TOO_BIG = _c("reass-too-big")
C_REASS_TOO_MANY_FRAGMENTS = _c("reass-too-many-fragments")
C_REASS_DISCARDED = _c("reass-discarded")
C_REASS_NO_CONTEXT = _c("reass-no-context")
C_REASS_TIMEOUT = _c("reass-timeout")
C_REASS_ND_FRAGMENTED = _c("reass-nd-fragmented")


def markdown() -> str:
    """docs/counters.md, generated from this registry (a test keeps the file in step)."""
    lines = [
        "# Counters",
        "",
        "Every drop reason and data-path event, generated from `src/vecroute/graph/counters.py`",
        "(`python -m vecroute.graph.counters > docs/counters.md`). A packet that dies is counted",
        "exactly once, under one *drop* counter; *event* counters count things that happened.",
        "`vecroute replay` prints the non-zero ones; `--stats-json` has them under `errors`.",
        "",
        "| counter | node | kind | description |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{c.name}` | {c.node} | {c.kind} | {c.description} |" for c in COUNTERS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
