"""ClassBench rule sets -> vecroute rules, and traffic that hits them.

A ClassBench line (the NeuroCuts files in ``shared/data/classbench``)::

    @sip/len <TAB> dip/len <TAB> sp_lo : sp_hi <TAB> dp_lo : dp_hi <TAB> proto/mask <TAB> flags/mask

becomes ``NUMBER ACTION PROTO from SIP to DIP [SPORTS] [DPORTS] [tcpflags ...|icmptypes N]``:

- proto mask 0 -> ``ip`` (any); mask 0xFF -> the protocol (tcp, udp, icmp or a number);
- a full port range 0:65535 -> no port condition; a single port -> ``N``; else ``lo-hi``;
- flags/mask: ClassBench puts the TCP flags in the high byte (0x1000/0x1000 = ACK set,
  0x0200/0x1200 = SYN set and ACK clear): each mask bit becomes ``flag`` or ``!flag`` of
  ``tcpflags``; for ICMP the high byte is the ICMP type (mask 0xFF00 -> ``icmptypes N``).
  Anything else (a code mask, flags on other protocols) is rejected.

Semantics match the ClassBench definition (first matching line wins), with one convention
for packets without ports (ICMP, GRE, ...): they match only full port ranges.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vecroute.firewall.keys import (
    K_COLS,
    K_DPORT,
    K_DST_LO,
    K_FAMILY,
    K_ICMPTYPE,
    K_LEN,
    K_PROTO,
    K_SPORT,
    K_SRC_LO,
    K_TCPFLAGS,
    K_TTL,
    K_TX,
)
from vecroute.firewall.rules import PROTO_NAMES, TCP_FLAG_NAMES

# columns of the numeric form
CB_SRC = 0
CB_SLEN = 1
CB_DST = 2
CB_DLEN = 3
CB_SP_LO = 4
CB_SP_HI = 5
CB_DP_LO = 6
CB_DP_HI = 7
CB_PROTO = 8
CB_PMASK = 9
CB_FLAGS = 10
CB_FMASK = 11
CB_COLS = 12


def _ip(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def load_classbench(path: str | Path) -> np.ndarray:
    """The rules of a ClassBench file as ``int64[n, CB_COLS]``."""
    rows = []
    for k, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        f = line.lstrip("@").split("\t")
        if len(f) < 6:
            raise ValueError(f"{path}:{k}: expected 6 tab-separated fields")
        s, sl = f[0].split("/")
        d, dl = f[1].split("/")
        sp = [int(x) for x in f[2].split(":")]
        dp = [int(x) for x in f[3].split(":")]
        pr, pm = (int(x, 16) for x in f[4].split("/"))
        fl, fm = (int(x, 16) for x in f[5].split("/"))
        rows.append((_ip(s), int(sl), _ip(d), int(dl), sp[0], sp[1], dp[0], dp[1], pr, pm, fl, fm))
    return np.array(rows, np.int64).reshape(-1, CB_COLS)


def _net(addr: int, plen: int) -> str:
    mask = 0 if plen == 0 else ((1 << 32) - 1) ^ ((1 << (32 - plen)) - 1)
    a = addr & mask
    text = ".".join(str((a >> s) & 255) for s in (24, 16, 8, 0))
    return text if plen == 32 else f"{text}/{plen}"


def _ports(lo: int, hi: int) -> str | None:
    if lo == 0 and hi == 65535:
        return None
    return str(lo) if lo == hi else f"{lo}-{hi}"


def to_rules(
    cb: np.ndarray, action: str = "allow", first_number: int = 1, step: int = 1
) -> list[str]:
    """vecroute rule texts, numbered first_number, first_number + step, ..."""
    out = []
    for k, row in enumerate(cb.tolist()):
        s, sl, d, dl, spl, sph, dpl, dph, pr, pm, fl, fm = row
        if pm == 0:
            proto = "ip"
        elif pm == 0xFF:
            proto = PROTO_NAMES.get(pr, str(pr))
        else:
            raise ValueError(f"rule {k}: protocol mask {pm:#x} is not 0 or 0xff")
        words = [str(first_number + k * step), action, proto, "from", _net(s, sl)]
        p = _ports(spl, sph)
        if p:
            words.append(p)
        words += ["to", _net(d, dl)]
        p = _ports(dpl, dph)
        if p:
            words.append(p)
        if fm:
            if pm == 0xFF and pr == 6 and fm & 0xFF == 0:
                flags = []
                for bit in sorted(TCP_FLAG_NAMES):
                    if (fm >> 8) & bit:
                        flags.append(("" if (fl >> 8) & bit else "!") + TCP_FLAG_NAMES[bit])
                words += ["tcpflags", ",".join(flags)]
            elif pm == 0xFF and pr == 1 and fm == 0xFF00:
                words += ["icmptypes", str(fl >> 8)]
            else:
                raise ValueError(f"rule {k}: flags {fl:#06x}/{fm:#06x} not expressible")
        out.append(" ".join(words))
    return out


def gen_keys(cb: np.ndarray, n: int, seed: int = 1, hit_fraction: float = 0.5) -> np.ndarray:
    """IPv4 key rows: ``hit_fraction`` of them drawn inside random rules (a random point of
    the rule's box), the rest uniformly random (protocols tcp/udp/icmp/gre/other)."""
    rng = np.random.default_rng(seed)
    keys = np.zeros((n, K_COLS), np.int64)
    keys[:, K_FAMILY] = 4
    keys[:, K_TTL] = 64
    keys[:, K_TX] = -1
    keys[:, K_LEN] = 64
    nh = int(n * hit_fraction)
    # random half
    keys[:, K_SRC_LO] = rng.integers(0, 1 << 32, n)
    keys[:, K_DST_LO] = rng.integers(0, 1 << 32, n)
    keys[:, K_PROTO] = rng.choice([6, 6, 6, 17, 17, 1, 47, 50], n)
    keys[:, K_SPORT] = rng.integers(0, 65536, n)
    keys[:, K_DPORT] = rng.integers(0, 65536, n)
    keys[:, K_TCPFLAGS] = rng.integers(0, 256, n)
    keys[:, K_ICMPTYPE] = rng.integers(0, 20, n)
    # hits
    if nh and cb.shape[0]:
        pick = cb[rng.integers(0, cb.shape[0], nh)]
        for col, acol, lcol in ((K_SRC_LO, CB_SRC, CB_SLEN), (K_DST_LO, CB_DST, CB_DLEN)):
            plen = pick[:, lcol]
            host = np.where(plen == 32, 0, (np.int64(1) << (32 - plen)) - 1)
            base = pick[:, acol] & ~host & 0xFFFFFFFF
            keys[:nh, col] = base | (rng.integers(0, 1 << 32, nh) & host)
        keys[:nh, K_SPORT] = rng.integers(pick[:, CB_SP_LO], pick[:, CB_SP_HI] + 1)
        keys[:nh, K_DPORT] = rng.integers(pick[:, CB_DP_LO], pick[:, CB_DP_HI] + 1)
        fixed = pick[:, CB_PMASK] == 0xFF
        keys[:nh, K_PROTO] = np.where(fixed, pick[:, CB_PROTO], keys[:nh, K_PROTO])
        fm = pick[:, CB_FMASK] >> 8
        fv = pick[:, CB_FLAGS] >> 8
        rnd = rng.integers(0, 256, nh)
        keys[:nh, K_TCPFLAGS] = (rnd & ~fm) | (fv & fm)
        keys[:nh, K_ICMPTYPE] = np.where(fm == 0xFF, fv, keys[:nh, K_ICMPTYPE])
    # protocols without ports / flags / types
    pr = keys[:, K_PROTO]
    noport = (pr != 6) & (pr != 17)
    keys[noport, K_SPORT] = -1
    keys[noport, K_DPORT] = -1
    keys[pr != 6, K_TCPFLAGS] = -1
    keys[pr != 1, K_ICMPTYPE] = -1
    return keys
