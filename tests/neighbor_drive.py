"""Random driver over Fib + NeighborTable + SRv6 tables (plain Python), checking invariants."""

import ipaddress
import random
import sys

from neighbor_model import cfg, check_fib, check_table

from vecroute.config_types import NeighborSettings
from vecroute.control.neighbors import NeighborTable
from vecroute.control.punts import Pending
from vecroute.fib.fib import Fib, RouteError
from vecroute.packet.batch import F_REINJECTED
from vecroute.srv6.tables import LocalSid

S = 1_000_000_000
SKIP19 = False  # op 19: an End.X SID refused by the table limit (its pin once leaked)
IPS4 = [ipaddress.ip_address(f"10.1.0.{i}") for i in range(1, 7)] + [
    ipaddress.ip_address(f"10.2.0.{i}") for i in range(1, 4)]
IPS6 = [ipaddress.ip_address(f"2001:db8:1::{i:x}") for i in range(2, 6)] + [
    ipaddress.ip_address(f"2001:db8:2::{i:x}") for i in range(2, 4)]
PREFIXES4 = ["203.0.113.0/24", "198.51.100.0/24", "10.1.0.1/32", "10.1.0.2/32", "10.9.0.0/16"]
PREFIXES6 = ["2001:db8:100::/48", "2001:db8:1::2/128", "2001:db8:200::/48"]
SIDS = [ipaddress.ip_network(f"fc00::{i}/128") for i in range(1, 4)]
CONF_NB = [
    {"ip": "10.1.0.5", "mac": "02:bb:00:00:00:05", "interface": "eth0"},
    {"ip": "10.1.0.1", "mac": "02:bb:00:00:00:01", "interface": "eth0"},
    {"ip": "2001:db8:1::3", "mac": "02:bb:00:00:00:63", "interface": "eth0"},
]


def ifx_of(ip):
    return 0 if (ip in ipaddress.ip_network("10.1.0.0/24")
                 or ip in ipaddress.ip_network("2001:db8:1::/64")) else 1


class Env:
    def __init__(self, rng, st, skip19=SKIP19):
        self.rng = rng
        self.skip19 = skip19
        nbs = [n for n in CONF_NB if rng.random() < 0.5]
        self.conf = nbs
        self.fib = Fib.from_config(cfg(nbs))
        self.out = [0, 0]
        self.given = 0

        def reinj(pkts, err=None):
            self.out[err is not None] += len(pkts)

        self.tb = NeighborTable(self.fib, lambda i, f: None, reinj, st)
        self.now = 0
        self.log = []

    def step(self):
        rng, tb = self.rng, self.tb
        fib = tb.fib
        self.now += rng.choice([0, 1, S // 10, S // 2, S, 3 * S, 7 * S, 25 * S])
        now = self.now
        op = rng.randrange(21)
        if op == 19 and self.skip19:
            op = 12
        ip = rng.choice(IPS4 + IPS6)
        ifx = ifx_of(ip)
        mac = bytes([2, 0xee, 0, 0, 0, rng.randrange(4)])
        if op == 0:  # add a route
            v6 = rng.random() < 0.4
            prefix = rng.choice(PREFIXES6 if v6 else PREFIXES4)
            pool = IPS6 if v6 else IPS4
            kind = rng.randrange(5)
            try:
                if kind == 0:
                    self.log.append(("add_route", prefix, "blackhole"))
                    fib.add_route(prefix, blackhole=True)
                elif kind == 1:
                    self.log.append(("add_route", prefix, "dev"))
                    fib.add_route(prefix, dev=rng.choice(["eth0", "eth1"]))
                else:
                    via = [rng.choice(pool) for _ in range(rng.randrange(1, 4))]
                    w = [rng.randrange(1, 3) for _ in via] if rng.random() < 0.3 else None
                    self.log.append(("add_route", prefix, via, w))
                    fib.add_route(prefix, via, weights=w)
            except RouteError as e:
                self.log.append(("error", str(e)))
        elif op == 1:
            prefix = rng.choice(PREFIXES4 + PREFIXES6 + ["10.1.0.5/32", "2001:db8:1::3/128"])
            self.log.append(("del_route", prefix))
            try:
                fib.del_route(prefix)
            except RouteError as e:
                self.log.append(("error", str(e)))
        elif op in (2, 3):
            c = rng.random() < 0.5
            self.log.append(("learn", ifx, ip, mac, now, c))
            tb.learn(ifx, ip, mac, now, create=True, confirmed=c)
        elif op == 4:
            self.log.append(("learn-nocreate", ifx, ip, mac, now))
            tb.learn(ifx, ip, mac, now, create=False, confirmed=True,
                     override=rng.random() < 0.5)
        elif op in (5, 6):
            flags = F_REINJECTED if rng.random() < 0.1 else 0
            pkt = Pending(0, 0, ip.version, b"x", 0, flags)
            self.log.append(("resolve", ifx, ip, now))
            self.given += 1
            tb.resolve(ifx, ip, pkt, now)
        elif op in (7, 8):
            self.log.append(("tick", now))
            tb.tick(now)
        elif op == 9:
            self.log.append(("add_static", ifx, ip, mac, now))
            tb.add_static(ifx, ip, mac, now)
        elif op == 10:
            self.log.append(("delete", ifx, ip))
            tb.delete(ifx, ip)
        elif op == 11:  # reload
            nbs = [n for n in CONF_NB if rng.random() < 0.5]
            for n in nbs:
                if rng.random() < 0.3:
                    n = dict(n, mac="02:bb:00:00:00:99")
            routes = [{"prefix": "203.0.113.0/24", "via": "10.1.0.1"}]
            if rng.random() < 0.5:
                routes.append({"prefix": "2001:db8:100::/48", "via": "2001:db8:1::2"})
            c = cfg(nbs, routes)
            new = Fib.from_config(c)
            self.log.append(("adopt", [n["ip"] for n in nbs], now))
            tb.adopt(new, c.neighbors, now)
            self.fib = new
        elif op == 12:  # SRv6 localsid
            sid = rng.choice(SIDS)
            beh = rng.choice(["End", "End.X", "End.DX4"])
            nh = None
            if beh == "End.X":
                nh = rng.choice(IPS6)
            elif beh == "End.DX4":
                nh = rng.choice(IPS4)
            self.log.append(("localsid", sid, beh, nh))
            try:
                fib.sr("add_localsid", LocalSid(sid, beh, nh=nh))
            except RouteError as e:
                self.log.append(("error", str(e)))
        elif op == 13:
            sid = rng.choice(SIDS)
            self.log.append(("del_localsid", sid))
            try:
                fib.sr("del_localsid", sid)
            except RouteError as e:
                self.log.append(("error", str(e)))
        elif op == 14:
            self.log.append(("del_neighbor-fib", ip))
            # the FIB directly (ctl route del of a neighbour route)
            host = ipaddress.ip_network(f"{ip}/{ip.max_prefixlen}")
            try:
                fib.del_route(host)
            except RouteError as e:
                self.log.append(("error", str(e)))
        elif op == 15:
            self.log.append(("handle-ish learn via other ifx", ip))
            tb.learn(1 - ifx, ip, mac, now, create=True, confirmed=False)
        elif op == 16:  # policy
            from vecroute.srv6.tables import Policy
            bsid = ipaddress.ip_address(rng.choice(["fc00:b::1", "fc00:b::2"]))
            segs = [[ipaddress.ip_address("2001:db8:100::1")]]
            self.log.append(("policy", bsid))
            try:
                fib.sr("add_policy", Policy(bsid, [(segs[0], 1)],
                                            source=ipaddress.ip_address("2001:db8:1::1")))
            except RouteError as e:
                self.log.append(("error", str(e)))
        elif op == 17:
            bsid = ipaddress.ip_address(rng.choice(["fc00:b::1", "fc00:b::2"]))
            prefix = rng.choice(PREFIXES4 + PREFIXES6 + ["10.1.0.5/32", "2001:db8:1::3/128"])
            what = rng.choice(["steer", "unsteer", "del_policy"])
            self.log.append((what, prefix, bsid))
            try:
                if what == "steer":
                    fib.sr("steer", prefix, bsid)
                elif what == "unsteer":
                    fib.sr("unsteer", prefix)
                else:
                    fib.sr("del_policy", bsid)
            except RouteError as e:
                self.log.append(("error", str(e)))
        elif op == 18:
            self.log.append(("resolve-none", ifx, ip, now))
            tb.resolve(ifx, ip, None, now)
        elif op == 19:  # localsid in a new table with the table limit reached
            sid = rng.choice(SIDS)
            nh = rng.choice(IPS6)
            t = rng.choice([0, 7])
            for fam in (4, 6):
                fib.lpm[fam].max_tables = len(fib.lpm[fam]._ids) if rng.random() < 0.5 else 256
            self.log.append(("localsid-limited", sid, nh, t))
            try:
                fib.sr("add_localsid", LocalSid(sid, "End.X", nh=nh, table=t))
            except RouteError as e:
                self.log.append(("error", str(e)))
            for fam in (4, 6):
                fib.lpm[fam].max_tables = 256
        elif op == 20:
            v6 = rng.random() < 0.4
            prefix = rng.choice(PREFIXES6 if v6 else PREFIXES4)
            pool = IPS6 if v6 else IPS4
            via = [rng.choice(pool)] * rng.randrange(1, 3)
            dev = rng.choice(["eth0", "eth1"])
            self.log.append(("add_route-dev-via", prefix, via, dev))
            try:
                fib.add_route(prefix, via, dev=dev)
            except RouteError as e:
                self.log.append(("error", str(e)))
        check_fib(tb.fib)
        check_table(tb)
        acc = (sum(self.out) + tb.stats.queue_drops + tb.stats.reinject_loops + tb._queued)
        assert acc == self.given, (
            f"packets: {self.given} given, {acc} accounted ({self.out}, {tb.stats})")


def run(seed, steps=300, st=None, skip19=SKIP19):
    rng = random.Random(seed)
    st = st or NeighborSettings(gc_thresh1=2, gc_thresh2=4, gc_thresh3=6, per_interface=4,
                                queue_len=2, queue_total=5, probe_rate=2, probe_burst=2)
    env = Env(rng, st, skip19)
    check_fib(env.fib)
    check_table(env.tb)
    for _ in range(steps):
        env.step()
    return env


if __name__ == "__main__":
    n0, n1 = int(sys.argv[1]), int(sys.argv[2])
    fails = {}
    for seed in range(n0, n1):
        try:
            run(seed)
        except Exception as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {str(e)[:150]}"
            key = msg.split(":")[0] + ":" + msg.split(":")[1][:40]
            if key not in fails:
                fails[key] = (seed, msg)
                print(seed, msg, flush=True)
    print("done", len(fails))
