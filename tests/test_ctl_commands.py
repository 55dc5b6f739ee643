"""ctl command parsing and effects, against a FIB (no sockets): errors change nothing."""

import ipaddress

import pytest

from vecroute.control.commands import CommandError, execute
from vecroute.control.config import parse_config
from vecroute.control.neighbors import NeighborTable
from vecroute.fib.fib import Fib
from vecroute.graph.dataplane import fib_state
from vecroute.graph.dispatch import Graph
from vecroute.packet.batch import PacketBatch


class FakeRouter:
    def __init__(self) -> None:
        cfg = parse_config(
            {
                "interfaces": [
                    {
                        "name": "eth0",
                        "mac": "02:00:00:00:00:01",
                        "addresses": ["198.51.100.254/24"],
                    },
                    {
                        "name": "eth1",
                        "mac": "02:00:00:00:00:02",
                        "addresses": ["192.0.2.254/24", "2001:db8:2::1/64"],
                    },
                ]
            }
        )
        self.fib = Fib.from_config(cfg)
        self.graph = Graph(fib_state(self.fib), PacketBatch(4))
        self.neigh = NeighborTable(self.fib, lambda *a: None, lambda *a: None)
        self.commits = 0

    def stats(self):
        return self.graph.state

    def neighbor_rows(self):
        return self.neigh.rows()

    def neighbor_stats(self):
        return self.neigh.stat_rows()

    def add_neighbor(self, ip, mac, ifname):
        self.neigh.add_static(self.fib.interface_index(ifname), ipaddress.ip_address(ip), mac, 0)
        self.commit()

    def del_neighbor(self, ip, ifname):
        return self.neigh.delete(self.fib.interface_index(ifname), ipaddress.ip_address(ip))

    def commit(self):
        self.commits += 1
        self.graph.swap_state(fib_state(self.fib))

    def clear_counters(self):
        self.graph.state.clear_counters()


@pytest.fixture
def r():
    return FakeRouter()


def test_route_add_show_del(r):
    execute(r, "route add 203.0.113.0/24 via 192.0.2.1 via 192.0.2.2".split())
    assert r.fib.lpm[4].lookup(0, "203.0.113.9") >= 0
    rep = execute(r, "show routes 203.0.113.0/24".split())
    assert [x["prefix"] for x in rep.data] == ["203.0.113.0/24"]
    assert "via 192.0.2.1" in rep.text and "via 192.0.2.2" in rep.text
    execute(r, "route del 203.0.113.0/24".split())
    assert r.fib.lpm[4].lookup(0, "203.0.113.9") == -1


@pytest.mark.parametrize(
    "cmd,word",
    [
        ("route add 203.0.113.0/33 via 192.0.2.1", "203.0.113.0/33"),
        ("route add 203.0.113.0/24 via 192.0.2.300", "192.0.2.300"),
        ("route add 203.0.113.0/24 via 203.0.113.1", "not on a connected subnet"),
        ("route add 203.0.113.0/24 gateway 192.0.2.1", "gateway"),
        ("route add 203.0.113.0/24 via", "via"),
        ("route add 203.0.113.0/24 via 192.0.2.1 table x", "x"),
        ("route frob 203.0.113.0/24", "frob"),
        ("route del 198.51.100.0/24", "connected"),
        ("route del 203.0.113.0/24", "no route"),
        ("show bananas", "bananas"),
        ("neighbor add 192.0.2.1 lladdr zz:00:00:00:00:01 dev eth1", "zz:00"),
        ("neighbor add 192.0.2.1 lladdr 02:00:00:00:00:01 dev eth9", "eth9"),
        ("neighbor add 192.0.2.1 dev eth1", "lladdr"),
        ("frobnicate", "frobnicate"),
        ("clear everything", "clear counters"),
    ],
)
def test_malformed_commands_name_the_problem_and_change_nothing(r, cmd, word):
    before = sorted(map(str, r.fib.routes))
    with pytest.raises(CommandError) as e:
        execute(r, cmd.split())
    msg = str(e.value)
    assert word in msg and "\n" not in msg
    assert sorted(map(str, r.fib.routes)) == before


def test_neighbor_add_resolves_route(r):
    execute(r, "route add 203.0.113.0/24 via 192.0.2.1".split())
    execute(r, "neighbor add 192.0.2.1 lladdr 02:00:00:00:00:aa dev eth1".split())
    rep = execute(r, ["show", "neighbors"])
    assert rep.data == [
        {
            "interface": "eth1",
            "ip": "192.0.2.1",
            "mac": "02:00:00:00:00:aa",
            "state": "permanent",
            "queued": 0,
        }
    ]
    assert "lladdr 02:00:00:00:00:aa" in execute(r, "show routes 203.0.113.5".split()).text


def test_show_neighbor_stats_names_each_invalid_nd_reason(r):
    from scapy.layers.inet6 import ICMPv6ND_NA, ICMPv6NDOptDstLLAddr, IPv6
    from scapy.layers.l2 import Ether

    na = bytes(
        Ether(src="02:00:00:00:aa:01", dst="02:00:00:00:00:02")
        / IPv6(src="2001:db8:2::10", dst="2001:db8:2::1", hlim=255)
        / ICMPv6ND_NA(tgt="ff02::1", S=1)
        / ICMPv6NDOptDstLLAddr(lladdr="02:00:00:00:aa:01")
    )
    r.neigh.handle_nd(1, na, 0)
    rep = execute(r, "show neighbors stats".split())
    stats = {x["stat"]: x["count"] for x in rep.data}
    assert stats["nd-invalid target-multicast"] == 1 and stats["ignored"] == 1
    assert stats["nd-invalid bad-checksum"] == 0 and stats["resolution_failed"] == 0
    assert "nd-invalid target-multicast" in rep.text


def test_show_views_and_clear(r):
    for what in ("interfaces", "runtime", "errors", "routes"):
        rep = execute(r, ["show", what])
        assert isinstance(rep.data, list) and isinstance(rep.text, str)
    r.graph.state.counters[0] = 5
    execute(r, ["clear", "counters"])
    assert int(r.graph.state.counters.sum()) == 0


@pytest.mark.parametrize("weight", ["0", "65", "99999999999999"])
def test_route_weight_out_of_range_is_one_error_and_changes_nothing(r, weight):
    # weight 0 left a load-balance without buckets (the data path divides by their
    # number); a huge one allocated its buckets before being refused
    before = dict(r.fib.routes)
    with pytest.raises(CommandError) as e:
        execute(r, f"route add 203.0.113.0/24 via 192.0.2.1 weight {weight}".split())
    assert "weight" in str(e.value) and "\n" not in str(e.value)
    assert r.fib.routes == before


@pytest.mark.parametrize("weights", [[0], [0, 0], [10**12], [40, 40], [1.5]])
def test_fib_refuses_bad_weights_before_building(r, weights):
    from vecroute.fib.fib import RouteError

    via = [ipaddress.ip_address(f"192.0.2.{k + 1}") for k in range(len(weights))]
    with pytest.raises(RouteError, match="weights"):
        r.fib.add_route(ipaddress.ip_network("203.0.113.0/24"), via=via, weights=weights)


# --- every field is checked against its bounds before anything changes (issue 12, 3) --------


@pytest.mark.parametrize(
    "cmd,word",
    [
        ("route add 203.0.113.0/24 blackhole table 4294967296", "table"),
        ("route add 203.0.113.0/24 blackhole table " + "9" * 4000, "table"),
        ("route add 203.0.113.0/24 blackhole table \u0661", "table"),  # int() takes it: 1
        ("route add 203.0.113.0/24 blackhole table +7", "table"),
        ("route add 203.0.113.0/24 blackhole table 1_0", "table"),
        ("route add 203.0.113.0/24 via 192.0.2.1 weight \u00b2", "weight"),
        ("route add fe80::%eth1/64 dev eth1", "not a prefix"),
        ("route add 2001:db8:9::/48 via fe80::1%eth1 dev eth1", "not an IPv4 or IPv6"),
        ("route add 203.0.113.0/24 via 192.0.2.77 table 77", "not on a connected subnet"),
        ("show routes table -1", "table"),
        ("neighbor add 224.0.0.5 lladdr 02:00:00:00:00:aa dev eth1", "not a unicast"),
        ("neighbor add 255.255.255.255 lladdr 02:00:00:00:00:aa dev eth1", "not a unicast"),
        ("neighbor add :: lladdr 02:00:00:00:00:aa dev eth1", "not a unicast"),
        ("neighbor add 192.0.2.1 lladdr 02:00:00:00:00:aa\n dev eth1", "lladdr"),
    ],
)
def test_out_of_bounds_fields_are_one_error_and_change_nothing(r, cmd, word):
    before = sorted(map(str, r.fib.routes)), len(r.fib.adjs), r.fib.lpm[4]._ids[:]
    with pytest.raises(CommandError) as e:
        execute(r, cmd.split(" "))
    msg = str(e.value)
    assert word in msg and "\n" not in msg and len(msg) < 200, msg
    assert (sorted(map(str, r.fib.routes)), len(r.fib.adjs), r.fib.lpm[4]._ids) == before


def test_too_many_ecmp_buckets_create_no_adjacency(r):
    before = len(r.fib.adjs)
    with pytest.raises(CommandError, match="buckets"):
        execute(r, "route add 203.0.113.0/24 via 192.0.2.1 weight 64 via 192.0.2.2 weight 64"
                   .split())
    assert len(r.fib.adjs) == before


def test_fib_tables_are_bounded(r):
    from vecroute.fib.fib import MAX_TABLES

    n = len(r.fib.lpm[4]._ids)
    for k in range(1, MAX_TABLES - n + 1):
        execute(r, f"route add 203.0.113.0/24 blackhole table {k}".split())
    with pytest.raises(CommandError, match="too many tables"):
        execute(r, "route add 203.0.113.0/24 blackhole table 4000000000".split())
    assert len(r.fib.lpm[4]._ids) == MAX_TABLES


def test_long_words_are_quoted_short(r):
    with pytest.raises(CommandError) as e:
        execute(r, ["route", "add", "x" * 4096])
    assert len(str(e.value)) < 120
