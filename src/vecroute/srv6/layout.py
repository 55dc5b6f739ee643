"""The columns of the SRv6 arrays the control plane builds (srv6/tables.py) and the data
path reads: local SIDs, policies, segment lists and their first-hop caches."""

# SRv6 local SIDs (sr_sid int32 [n, SID_COLS])
SID_BEHAVIOR = 0
SID_FLAVOR = 1  # 1 = PSP
SID_FIB4 = 2  # FIB table index for End.T / End.DT4 / End.DT46 (ip4 part)
SID_FIB6 = 3  # FIB table index for End.T / End.DT6 / End.DT46 (ip6 part)
SID_ADJ = 4  # adjacency for End.X / End.DX4 / End.DX6
SID_COLS = 5
# SR policies (sr_pol int32 [n, POL_COLS]): buckets of segment lists in sr_bucket
POL_BSTART = 0
POL_BN = 1
POL_COLS = 2
# segment lists (sr_list int32 [n, LIST_COLS]); the outer header is precomputed in sr_hdr
LIST_HDRLEN = 0  # bytes of outer IPv6 header + SRH
LIST_SRH = 1  # 1 when the list carries an SRH (not a single-segment .Red)
LIST_FIB = 2  # FIB table index (ip6) where the first segment is looked up
LIST_FLOW = 3  # how the outer flow label is set: FLOW_HASH / FLOW_INNER / FLOW_ZERO
LIST_COLS = 4
# the outer IPv6 header's flow label (Linux's net.ipv6.seg6_flowlabel 1 / 0 / -1)
FLOW_HASH = 0  # the inner packet's flow hash (RFC 6437 section 3, RFC 6438): the default
FLOW_INNER = 1  # the inner IPv6 packet's own label (0 for an IPv4 inner packet)
FLOW_ZERO = 2
FLOW_LABELS = ("hash", "inner", "zero")  # by value, as the configuration names them
SR_HDR_MAX = 40 + 8 + 16 * 16  # at most 16 segments
# each list's first-hop cache (sr_cache int64 [n, CACHE_COLS], the seed's dst_cache)
CACHE_GEN = 0  # the FIB generation it was filled at (-1: never)
CACHE_LB = 1  # the first segment's load-balance (-1: no route)
CACHE_ADJ = 2  # its adjacency when it has one bucket, else -1
CACHE_COLS = 3
