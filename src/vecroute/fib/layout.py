"""The columns of the arrays the FIB builds and the data path reads: interfaces,
adjacencies, load-balances.

Plain integer constants (numba freezes them into the kernels that read them), below both
the FIB, which fills the arrays, and the graph, which reads them.
"""

# interface columns (ifc int32 [n_if, IF_COLS])
I_MTU = 0
I_FIB4 = 1  # FIB table index for ip4 packets received here
I_FIB6 = 2
I_IP4 = 3  # primary ip4 address (as int32 bits), 0 if none
I_UP = 4
I_REPLY_ADJ = 5  # the interface's reply adjacency (answers to link-local sources)
I_REDIRECTS = 6  # 1: send ICMP / ND redirects from this interface
I_IP4_MASK = 7  # netmask of the primary ip4 address (as int32 bits)
I_HOST = 8  # 1: the port has a Linux mirror (linux-cp): what the router does not answer
            # itself goes to Linux (host-punt) instead of an ICMP error or RST
IF_COLS = 9
IF6_LL = 0  # if_ip6[i, 0] link-local address
IF6_GLOBAL = 1  # if_ip6[i, 1] primary global address (zeros if none)
IF6_OTHER = 2  # if_ip6[i, 2:] the interface's other IPv6 addresses (zeros past the last)

# adjacency columns (adj int32 [n_adj, ADJ_COLS])
A_TYPE = 0
A_IF = 1
A_NH4 = 2  # ip4 next hop
A_NH6 = 3  # 4 words of the ip6 next hop, big-endian words: A_NH6 .. A_NH6+3
# ADJ_SRV6_ENCAP (no next hop): the policy's segment list when it has one (its weight only
# replicates buckets), else -1 (the flow's hash picks one of sr_bucket's): the fused path
# reads the list from the adjacency it already holds, two dependent reads (policy, bucket)
# fewer
A_SR_LIST = A_NH6
# ADJ_SRV6_ENCAP: the policy's outer flow label (srv6/layout.py FLOW_*): the fused path
# starts the flow hash as soon as it holds the adjacency when the label is the hash
A_SR_FLOW = A_NH6 + 1
A_FAMILY = 7
A_RWLEN = 8
# the node a packet using the adjacency goes to after the lookup (VPP's lookup_next_index),
# one per packet family (the local, drop, reject, SRv6 and reply adjacencies serve both);
# the control plane fills them (fib/adjacency.py ADJ_NEXT), the lookup only loads them
A_NEXT4 = 9
A_NEXT6 = 10
ADJ_COLS = 11
ADJ_REWRITE = 0  # forward: prepend adj_rw
ADJ_LOCAL = 1  # receive: for us
ADJ_DROP = 2  # blackhole
ADJ_INCOMPLETE = 3  # next hop known, its MAC not yet
ADJ_GLEAN = 4  # connected subnet: the next hop is the destination itself
ADJ_SRV6_ENCAP = 5  # steer into an SR policy: A_NH4 holds the policy index
ADJ_SRV6_LOCALSID = 6  # a local SID: A_NH4 holds the local SID index
LOCAL_ANYCAST = 1  # A_NH4 of the local adjacency of subnet-router anycast addresses
# an answer to a link-local source leaves by the interface the question came in on, to the
# MAC it came from (kept in the packet's M_AUX / M_AUX2): never through the FIB
ADJ_REPLY = 7
# Linux's reject routes (ip route add unreachable / prohibit): answered with an ICMP error
ADJ_UNREACH = 8  # IPv4 host unreachable (code 1), ICMPv6 no route (code 0)
ADJ_PROHIBIT = 9  # IPv4 administratively prohibited (code 13), ICMPv6 code 1
ADJ_NAMES = ("rewrite", "local", "drop", "incomplete", "glean", "sr-policy", "sr-localsid",
             "reply", "unreachable", "prohibit")
RW_MAX = 16

# load-balance columns (lb int32 [n_lb, 2]): start, count in lb_buckets
LB_START = 0
LB_N = 1
