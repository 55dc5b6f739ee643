"""Graph node ids, in the order the dispatcher visits them.

A packet's next node is a small integer in its metadata; nodes enqueue packet indices into
per-node frames (VPP's vlib_frame). The order below is topological for the forwarding
paths, so one pass usually drains the graph; packets sent "backwards" (an echo reply going
to ip4-lookup) are picked up by the next pass.
"""

NODE_NAMES: tuple[str, ...] = (
    "ethernet-input",
    "arp-input",
    "ip4-input",
    "ip6-input",
    "fw-in",
    "ip4-local",
    "ip6-local",
    "ip4-reass",
    "ip6-reass",
    "ip4-lookup",
    "ip6-lookup",
    "gso-segment",
    "srv6-localsid",
    "srv6-encap",
    "icmp4-error",
    "icmp6-error",
    "tcp-reset",
    "fw-out",
    "ip4-rewrite",
    "ip6-rewrite",
    "ip4-frag",
    "neighbor-request",
    "interface-output",
    "error-drop",
    "punt",
)
N_NODES = len(NODE_NAMES)

ETHERNET_INPUT = NODE_NAMES.index("ethernet-input")
ARP_INPUT = NODE_NAMES.index("arp-input")
IP4_INPUT = NODE_NAMES.index("ip4-input")
IP6_INPUT = NODE_NAMES.index("ip6-input")
FW_IN = NODE_NAMES.index("fw-in")
IP4_LOCAL = NODE_NAMES.index("ip4-local")
IP6_LOCAL = NODE_NAMES.index("ip6-local")
IP4_REASS = NODE_NAMES.index("ip4-reass")
IP6_REASS = NODE_NAMES.index("ip6-reass")
IP4_LOOKUP = NODE_NAMES.index("ip4-lookup")
IP6_LOOKUP = NODE_NAMES.index("ip6-lookup")
GSO_SEGMENT = NODE_NAMES.index("gso-segment")
SRV6_LOCALSID = NODE_NAMES.index("srv6-localsid")
SRV6_ENCAP = NODE_NAMES.index("srv6-encap")
ICMP4_ERROR = NODE_NAMES.index("icmp4-error")
ICMP6_ERROR = NODE_NAMES.index("icmp6-error")
TCP_RESET = NODE_NAMES.index("tcp-reset")
FW_OUT = NODE_NAMES.index("fw-out")
IP4_REWRITE = NODE_NAMES.index("ip4-rewrite")
IP6_REWRITE = NODE_NAMES.index("ip6-rewrite")
IP4_FRAG = NODE_NAMES.index("ip4-frag")
NEIGHBOR_REQUEST = NODE_NAMES.index("neighbor-request")
INTERFACE_OUTPUT = NODE_NAMES.index("interface-output")
ERROR_DROP = NODE_NAMES.index("error-drop")
PUNT = NODE_NAMES.index("punt")

# Final dispositions written to M_NEXT by the terminal nodes.
DONE_TX = 100
DONE_DROP = 101
DONE_PUNT = 102
FREE = 103

