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
    "ip4-local",
    "ip6-local",
    "ip4-lookup",
    "ip6-lookup",
    "icmp4-error",
    "icmp6-error",
    "ip4-rewrite",
    "ip6-rewrite",
    "ip4-frag",
    "neighbor-request",
    "interface-output",
    "error-drop",
    "punt",
)
N_NODES = len(NODE_NAMES)

ETHERNET_INPUT = 0
ARP_INPUT = 1
IP4_INPUT = 2
IP6_INPUT = 3
IP4_LOCAL = 4
IP6_LOCAL = 5
IP4_LOOKUP = 6
IP6_LOOKUP = 7
ICMP4_ERROR = 8
ICMP6_ERROR = 9
IP4_REWRITE = 10
IP6_REWRITE = 11
IP4_FRAG = 12
NEIGHBOR_REQUEST = 13
INTERFACE_OUTPUT = 14
ERROR_DROP = 15
PUNT = 16

# Final dispositions written to M_NEXT by the terminal nodes.
DONE_TX = 100
DONE_DROP = 101
DONE_PUNT = 102
FREE = 103

assert NODE_NAMES.index("punt") == PUNT
