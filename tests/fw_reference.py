"""Independent oracles for the firewall: a plain-Python ordered scan and a numpy brute force.

``RefFirewall`` evaluates the parsed rules one by one, in order, with ``ipaddress`` objects,
dict tables (longest match by scanning every entry) and a dict of states. It shares nothing
with vecroute's compiler or kernels but the parsed rule objects (the parser has its own
tests). ``classbench_first_match`` classifies straight from the ClassBench numbers.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import numpy as np

from vecroute.firewall.keys import (
    K_COLS,
    K_DPORT,
    K_DST_LO,
    K_ICMPTYPE,
    K_PROTO,
    K_SPORT,
    K_SRC_LO,
    K_TCPFLAGS,
)
from vecroute.firewall.rules import DEFAULT_NUMBER, Rule

PASS, DROP, REJECT, RESET = 0, 1, 2, 3
M64 = (1 << 64) - 1
LIFE = {"syn": 20, "established": 300, "fin": 1, "rst": 1, "udp": 10, "other": 30}


@dataclass
class Pkt:
    family: int
    src: int
    dst: int
    proto: int = -1
    sport: int = -1
    dport: int = -1
    tcpflags: int = -1
    icmptype: int = -1
    ttl: int = 64
    frag: int = 0  # 1 fragment, 2 not the first one
    rx: int = 0
    tx: int = -1
    length: int = 64

    def key(self) -> np.ndarray:
        k = np.zeros(K_COLS, np.int64)

        def s64(v: int) -> int:
            return v - (1 << 64) if v >> 63 else v

        k[0] = self.family
        if self.family == 4:
            k[2], k[4] = self.src, self.dst
        else:
            k[1], k[2] = s64(self.src >> 64), s64(self.src & M64)
            k[3], k[4] = s64(self.dst >> 64), s64(self.dst & M64)
        k[5:] = (
            self.proto,
            self.sport,
            self.dport,
            self.tcpflags,
            self.icmptype,
            self.ttl,
            self.frag,
            self.rx,
            self.tx,
            self.length,
        )
        return k

    @property
    def nonfirst(self) -> bool:
        return bool(self.frag & 2)

    def ip(self, which: str):
        v = self.src if which == "src" else self.dst
        return ipaddress.IPv4Address(v) if self.family == 4 else ipaddress.IPv6Address(v)


def keys_of(pkts: list[Pkt]) -> np.ndarray:
    return np.stack([p.key() for p in pkts]) if pkts else np.zeros((0, K_COLS), np.int64)


class RefTables:
    """name -> (type, {key: value}); addr keys are ip_network objects."""

    def __init__(self) -> None:
        self.t: dict[str, tuple[str, dict]] = {}

    def create(self, name: str, type_: str) -> None:
        self.t[name] = (type_, {})

    def add(self, name: str, key, value: int = 0) -> None:
        ty, d = self.t[name]
        if ty == "addr":
            key = ipaddress.ip_network(key, strict=False)
        d[key] = value

    def lookup(self, name: str, key) -> int | None:
        ty, d = self.t[name]
        if ty == "addr":
            best = None
            for net, v in d.items():
                if net.version == key.version and key in net:
                    if best is None or net.prefixlen > best[0]:
                        best = (net.prefixlen, v)
            return None if best is None else best[1]
        return d.get(key)


class RefFirewall:
    def __init__(
        self,
        rules: list[Rule],
        default_allow: bool = False,
        tables: RefTables | None = None,
        interfaces: list[str] | None = None,
        me4: list[str] = (),
        me6: list[str] = (),
        max_states: int = 1 << 30,
        lifetimes: dict | None = None,
    ) -> None:
        user = sorted(rules, key=lambda r: r.number)
        self.rules = user + [Rule(DEFAULT_NUMBER, "allow" if default_allow else "deny")]
        self.tables = tables or RefTables()
        self.interfaces = interfaces or []
        self.me4 = {ipaddress.IPv4Address(a) for a in me4}
        self.me6 = {ipaddress.IPv6Address(a) for a in me6}
        self.max_states = max_states
        self.life = {k: int(v * 1e9) for k, v in (lifetimes or LIFE).items()}
        self.counters = [[0, 0, 0] for _ in self.rules]
        self.states: dict[tuple, dict] = {}
        self.full_drops = 0

    # -- matching -----------------------------------------------------------------------------

    def _addr(self, spec, p: Pkt, which: str):
        ip = p.ip(which)
        targ = None
        if spec.is_any:
            return True, None
        items = spec.items
        if len(items) == 1 and items[0].kind == "table":
            v = self.tables.lookup(items[0].table, ip)
            m = v is not None and (items[0].value is None or v == items[0].value)
            if m:
                targ = v
        else:
            m = False
            for it in items:
                if it.kind == "net":
                    m |= it.net.version == ip.version and ip in it.net
                elif it.kind == "me":
                    m |= ip in (self.me4 if ip.version == 4 else self.me6)
                elif it.kind == "me6":
                    m |= ip.version == 6 and ip in self.me6
        return (not m) if spec.negate else m, targ

    @staticmethod
    def _ports(ranges, port: int, p: Pkt) -> bool:
        if ranges is None:
            return True
        if port < 0 or p.nonfirst:
            return False
        return any(lo <= port <= hi for lo, hi in ranges)

    def _option(self, o, p: Pkt, direction: int):
        targ = None
        n, a = o.name, o.args
        tcp_ok = p.proto == 6 and not p.nonfirst and p.tcpflags >= 0
        if n == "in":
            m = direction == 0
        elif n == "out":
            m = direction == 1
        elif n in ("via", "recv", "xmit"):
            if n == "recv" or (n == "via" and direction == 0):
                ifx = p.rx
            else:
                ifx = p.tx
            if a[0] == "any":
                m = ifx >= 0
            elif a[0] == "table":
                name = self.interfaces[ifx] if 0 <= ifx < len(self.interfaces) else None
                v = self.tables.lookup(a[1], name) if name is not None else None
                m = v is not None and (a[2] is None or v == a[2])
                if m:
                    targ = v
            else:
                m = 0 <= ifx < len(self.interfaces) and self.interfaces[ifx] == a[0]
        elif n == "tcpflags":
            m = tcp_ok and (p.tcpflags & a[0]) == a[0] and (p.tcpflags & a[1]) == 0
        elif n == "setup":
            m = tcp_ok and bool(p.tcpflags & 0x02) and not (p.tcpflags & 0x10)
        elif n == "established":
            m = tcp_ok and bool(p.tcpflags & 0x14)
        elif n == "icmptypes":
            m = p.family == 4 and p.proto == 1 and not p.nonfirst and p.icmptype in a
        elif n == "icmp6types":
            m = p.family == 6 and p.proto == 58 and not p.nonfirst and p.icmptype in a
        elif n == "frag":
            m = p.nonfirst
        elif n == "ipversion":
            m = p.family == a[0]
        elif n == "ipttl":
            m = any(lo <= p.ttl <= hi for lo, hi in a)
        elif n == "lookup":
            fld, name, value = a
            if fld in ("src-ip", "dst-ip"):
                v = self.tables.lookup(name, p.ip("src" if fld == "src-ip" else "dst"))
            else:
                port = p.sport if fld == "src-port" else p.dport
                v = None if port < 0 or p.nonfirst else self.tables.lookup(name, port)
            m = v is not None and (value is None or v == value)
            if m:
                targ = v
        else:
            raise AssertionError(n)
        return (not m) if o.negate else m, targ

    def match(self, r: Rule, p: Pkt, direction: int) -> tuple[bool, int]:
        """(matches, tablearg) of one rule's body."""
        if r.proto is not None and p.proto != r.proto:
            return False, 0
        if r.family is not None and p.family != r.family:
            return False, 0
        targ = 0
        m, t = self._addr(r.src, p, "src")
        if not m:
            return False, 0
        targ = t if t is not None else targ
        if not self._ports(r.sport, p.sport, p):
            return False, 0
        m, t = self._addr(r.dst, p, "dst")
        if not m:
            return False, 0
        targ = t if t is not None else targ
        if not self._ports(r.dport, p.dport, p):
            return False, 0
        for o in r.options:
            m, t = self._option(o, p, direction)
            if not m:
                return False, 0
            targ = t if t is not None else targ
        return True, targ

    # -- states -------------------------------------------------------------------------------

    @staticmethod
    def _skey(p: Pkt):
        sp = max(p.sport, 0) if not p.nonfirst else 0
        dp = max(p.dport, 0) if not p.nonfirst else 0
        a, b = (p.src, sp), (p.dst, dp)
        if b < a:
            return (p.family, p.proto, b, a), False
        return (p.family, p.proto, a, b), True

    def _update(self, s: dict, ab: bool, p: Pkt, now: int) -> None:
        fwd = s["ab"] == ab
        if p.proto == 6:
            fl = (p.tcpflags & 0x07) if p.tcpflags > 0 else 0
            s["flags"] |= fl if fwd else fl << 8
            f = s["flags"]
            if f & 0x0404:
                life = self.life["rst"]
            elif f & 0x0101 == 0x0101:
                life = self.life["fin"]
            elif f & 0x0202 == 0x0202:
                life = self.life["established"]
            else:
                life = self.life["syn"]
        elif p.proto == 17:
            life = self.life["udp"]
        else:
            life = self.life["other"]
        s["expire"] = now + life
        s["pkts"] += 1
        s["bytes"] += p.length

    def live_states(self, now: int) -> int:
        return sum(1 for s in self.states.values() if s["expire"] > now)

    # -- classification -------------------------------------------------------------------------

    def _target(self, i: int, number: int) -> int:
        want = max(number, self.rules[i].number + 1)
        for j, r in enumerate(self.rules):
            if r.number >= want:
                return j
        return len(self.rules) - 1

    def _verdict(self, i: int, p: Pkt) -> tuple[int, int, int]:
        r = self.rules[i]
        if r.action == "allow":
            return PASS, i, 0
        if r.action in ("reject", "unreach", "unreach6"):
            c4, c6 = r.icmp_codes()
            return (REJECT, i, (3 << 8) | c4) if p.family == 4 else (REJECT, i, (1 << 8) | c6)
        if (
            r.action == "reset"
            and p.proto == 6
            and p.tcpflags >= 0
            and not p.nonfirst
            and not p.tcpflags & 0x04
        ):
            return RESET, i, 0
        return DROP, i, 0

    def _count(self, i: int, p: Pkt, now: int) -> None:
        c = self.counters[i]
        c[0] += 1
        c[1] += p.length
        c[2] = now

    def classify(self, p: Pkt, direction: int = 0, now: int = 0) -> tuple[int, int, int]:
        i = 0
        probed = False
        found = False
        skey, ab = self._skey(p)
        while True:
            r = self.rules[i]
            if (r.action == "check-state" or r.keep_state) and not probed:
                probed = True
                s = self.states.get(skey)
                if s is not None and s["expire"] <= now:
                    del self.states[skey]
                    s = None
                if s is not None:
                    found = True
                    self._update(s, ab, p, now)
                    q = s["rule"]
                    self._count(q, p, now)
                    if self.rules[q].action == "skipto":
                        i = self._target(q, self.rules[q].arg)
                        continue
                    return self._verdict(q, p)
            if r.action == "check-state":
                i += 1
                continue
            m, targ = self.match(r, p, direction)
            if not m:
                i += 1
                continue
            if r.keep_state and not found:
                if self.live_states(now) >= self.max_states:
                    self.full_drops += 1
                    self._count(i, p, now)
                    return DROP, i, 1
                self.states.pop(skey, None)
                s = {"rule": i, "ab": ab, "flags": 0, "expire": now, "pkts": 0, "bytes": 0}
                self.states[skey] = s
                self._update(s, ab, p, now)
                found = True
            self._count(i, p, now)
            if r.action == "count":
                i += 1
                continue
            if r.action == "skipto":
                i = self._target(i, targ if r.arg == -1 else r.arg)
                continue
            return self._verdict(i, p)


# ---------------------------------------------------------------------------------------------
# ClassBench brute force
# ---------------------------------------------------------------------------------------------


def classbench_first_match(cb: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Index of the first ClassBench rule matching each key row (``len(cb)`` for none),
    from the ClassBench definition: prefix, port ranges, proto/mask, flags/mask (TCP flags,
    or the ICMP type, in the high byte). Ordered scan over the rules, vectorised over the
    packets that have no match yet."""
    n = keys.shape[0]
    out = np.full(n, cb.shape[0], np.int64)
    todo = np.arange(n)
    s, d = keys[:, K_SRC_LO], keys[:, K_DST_LO]
    sp, dp, pr = keys[:, K_SPORT], keys[:, K_DPORT], keys[:, K_PROTO]
    pf = np.where(pr == 6, keys[:, K_TCPFLAGS], np.where(pr == 1, keys[:, K_ICMPTYPE], 0))
    for k, rule in enumerate(cb.tolist()):
        if todo.size == 0:
            break
        sa, sl, da, dl, spl, sph, dpl, dph, p, pm, fl, fm = rule
        smask = 0 if sl == 0 else ((1 << 32) - 1) ^ ((1 << (32 - sl)) - 1)
        dmask = 0 if dl == 0 else ((1 << 32) - 1) ^ ((1 << (32 - dl)) - 1)
        t = todo
        m = ((s[t] & smask) == (sa & smask)) & ((d[t] & dmask) == (da & dmask))
        if not (spl == 0 and sph == 65535):
            m &= (sp[t] >= spl) & (sp[t] <= sph)
        if not (dpl == 0 and dph == 65535):
            m &= (dp[t] >= dpl) & (dp[t] <= dph)
        if pm:
            m &= (pr[t] & pm) == (p & pm)
        if fm >> 8:
            m &= (pf[t] & (fm >> 8)) == ((fl >> 8) & (fm >> 8))
        hit = t[m]
        out[hit] = k
        todo = t[~m]
    return out
