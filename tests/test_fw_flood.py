"""A SYN flood against the state table: unanswered (embryonic) states get shorter
lifetimes when the table fills (pf's adaptive timeouts) and are evicted to make room for a
new state when it is full (Linux conntrack's early_drop); answered flows always survive.

Each flood is SYN-only from random sources (or answered with SYN-ACKs by the server) and
goes through the compiled classifier in vectors, like the graph runs it."""

from __future__ import annotations

import numpy as np
from test_fw_states import go, tcp

from vecroute.firewall.config import parse_firewall_config
from vecroute.firewall.firewall import Firewall
from vecroute.firewall.keys import make_key
from vecroute.firewall.layout import DROP_STATE_FULL, V_DROP, V_PASS
from vecroute.firewall.states import capacity_for

S = 10**9
SYN, ACK = 0x02, 0x10
SERVER = "198.51.100.20"
CLIENT = "192.0.2.10"


def firewall(**raw) -> Firewall:
    raw.setdefault(
        "rules",
        [
            "100 check-state",
            f"200 allow tcp from any to {SERVER} 80 setup keep-state",
            "300 allow udp from any to any keep-state",
        ],
    )
    return Firewall(parse_firewall_config(raw, "f.toml"))


def handshake(fw, client, sport, now):
    """SYN, SYN-ACK, ACK of a client to SERVER:80; each packet's (verdict, rule)."""
    return [
        go(fw, tcp(client, SERVER, sport, 80, SYN), now)[:2],
        go(fw, tcp(SERVER, client, 80, sport, SYN | ACK), now)[:2],
        go(fw, tcp(client, SERVER, sport, 80, ACK), now)[:2],
    ]


def flood_keys(n, seed=7, answered=False):
    """n SYNs to SERVER:80 from distinct random (source in 203.0.113.0/24, port) pairs
    (with ``answered``, each followed by the server's SYN-ACK)."""
    pick = np.random.default_rng(seed).permutation(256 * 256)[:n]
    rows = []
    for x in pick:
        src, port = f"203.0.113.{x & 0xFF}", 1024 + int(x >> 8)
        rows.append(tcp(src, SERVER, port, 80, SYN))
        if answered:
            rows.append(tcp(SERVER, src, 80, port, SYN | ACK))
    return np.stack(rows)


def check_accounting(fw):
    c = fw.counters()
    assert c["created"] == c["states"] + c["expired"] + c["evicted"]
    assert c["states"] <= fw.config.max_states
    assert fw.st.shape[0] <= capacity_for(fw.config.max_states)
    return c


def test_syn_flood_cannot_lock_out_new_flows_nor_break_established_ones():
    fw = firewall(max_states=1000)
    assert handshake(fw, CLIENT, 40000, S) == [(V_PASS, 200)] * 3  # before the flood
    flood = flood_keys(5000)
    v, _, _ = fw.classify(flood, 0, 2 * S)
    assert (v == V_PASS).all()  # each SYN got a state: an older embryonic one made room
    # (a) the established flow keeps passing, both ways
    assert go(fw, tcp(SERVER, CLIENT, 80, 40000, ACK), 3 * S)[:2] == (V_PASS, 200)
    assert go(fw, tcp(CLIENT, SERVER, 40000, 80, ACK), 3 * S)[:2] == (V_PASS, 200)
    # (b) a new legitimate flow after the flood gets a state and completes its handshake
    assert handshake(fw, "192.0.2.11", 40001, 3 * S) == [(V_PASS, 200)] * 3
    # (c) bounded by max_states, (d) every state accounted for
    c = check_accounting(fw)
    assert c["states"] == 1000 and c["created"] == 5002 and c["full-drops"] == 0
    assert c["evicted"] == 5002 - 1000 and len(fw.states(3 * S)) == 1000
    assert sum(1 for s in fw.states(3 * S) if s["src"] in (CLIENT, "192.0.2.11")) == 2


def test_flood_the_server_answers_with_syn_acks_stays_embryonic():
    """ipfw calls a state with SYN both ways established (300 s): a flood a live server
    answers would fill the table with them. Only the client's ACK completes it here."""
    fw = firewall(max_states=500)
    assert handshake(fw, CLIENT, 40000, S) == [(V_PASS, 200)] * 3
    v, _, _ = fw.classify(flood_keys(2000, seed=3, answered=True), 0, 2 * S)
    assert (v == V_PASS).all() and fw.counters()["full-drops"] == 0
    assert handshake(fw, "192.0.2.11", 40001, 3 * S) == [(V_PASS, 200)] * 3
    assert go(fw, tcp(SERVER, CLIENT, 80, 40000, ACK), 3 * S)[:2] == (V_PASS, 200)
    c = check_accounting(fw)
    assert c["states"] == 500 and c["evicted"] == 2002 - 500
    # an answered-but-unacknowledged state lives `syn` (20 s, scaled down), not 300 s
    late = 2 * S + 21 * S
    assert {s["src"] for s in fw.states(late)} == {CLIENT, "192.0.2.11"}


def test_answered_flows_are_never_evicted():
    fw = firewall(max_states=50)
    for k in range(40):
        assert handshake(fw, f"192.0.2.{k + 1}", 40000, S) == [(V_PASS, 200)] * 3
    v, _, _ = fw.classify(flood_keys(100), 0, 2 * S)
    assert (v == V_PASS).all()
    c = fw.counters()
    assert c["evicted"] == 100 - 10 and c["states"] == 50
    # ten more real clients take the flood's last ten rows: then the table is all answered
    for k in range(40, 50):
        assert handshake(fw, f"192.0.2.{k + 1}", 40000, 2 * S) == [(V_PASS, 200)] * 3
    assert fw.counters()["evicted"] == 100
    assert go(fw, tcp("192.0.2.99", SERVER, 40000, 80, SYN), 2 * S) == (
        V_DROP, 200, DROP_STATE_FULL)
    assert fw.counters()["full-drops"] == 1
    for k in range(50):  # all fifty still pass
        assert go(fw, tcp(SERVER, f"192.0.2.{k + 1}", 80, 40000, ACK), 3 * S)[:2] == (
            V_PASS, 200)
    check_accounting(fw)


def test_unanswered_udp_is_evicted_answered_udp_is_not():
    fw = firewall(max_states=3)
    u = [make_key(CLIENT, SERVER, 17, 1000 + p, 53) for p in range(3)]
    back = [make_key(SERVER, CLIENT, 17, 53, 1000 + p) for p in range(3)]
    for k in u:
        assert go(fw, k, S)[:2] == (V_PASS, 300)
    assert go(fw, back[0], S)[:2] == (V_PASS, 300)  # flow 0 answered
    assert go(fw, make_key(CLIENT, SERVER, 17, 2000, 53), S)[:2] == (V_PASS, 300)
    assert fw.counters()["evicted"] == 1 and fw.counters()["states"] == 3
    assert go(fw, back[0], S)[:2] == (V_PASS, 300)  # the answered flow stayed


def test_adaptive_lifetimes_shrink_embryonic_states_only():
    # max_states 100: scaling from 60 states (x (120 - n) / 60), established never scaled
    fw = firewall(max_states=100)
    t0 = S
    assert handshake(fw, CLIENT, 40000, t0) == [(V_PASS, 200)] * 3  # state 1
    for k in range(2, 101):  # states 2..100, SYN only
        go(fw, tcp(f"203.0.113.{k}", SERVER, 5000, 80, SYN), t0)
    assert fw.counters()["states"] == 100

    def alive(k, now):
        return go(fw, tcp(SERVER, f"203.0.113.{k}", 80, 5000, SYN | ACK), now)[0] == V_PASS

    # the 100th state lived 20 s x 20 / 60 = 6.67 s, the 61st 20 s x 59 / 60, the 60th 20 s
    assert not alive(100, t0 + 6667 * S // 1000)
    assert alive(99, t0 + 6 * S)  # 20 s x 21 / 60 = 7 s (the SYN-ACK refreshes it)
    assert alive(60, t0 + 19 * S) and alive(61, t0 + 19 * S)
    # the established flow was refreshed at 100 states: still 300 s
    assert go(fw, tcp(SERVER, CLIENT, 80, 40000, ACK), t0 + 10 * S)[:2] == (V_PASS, 200)
    assert go(fw, tcp(SERVER, CLIENT, 80, 40000, ACK), t0 + 300 * S)[:2] == (V_PASS, 200)
    c = fw.counters()
    assert c["early-expired"] >= 1 and c["early-expired"] <= c["expired"]


def test_adaptive_bounds_are_configurable_and_checked():
    import pytest

    from vecroute.firewall.config import FirewallConfigError
    from vecroute.firewall.states import FC_ADAPT_END, FC_ADAPT_START

    fw = firewall(max_states=1000, adaptive_start=900, adaptive_end=2000)
    assert (fw.ctl[FC_ADAPT_START], fw.ctl[FC_ADAPT_END]) == (900, 2000)
    fw = firewall(max_states=1000)
    assert (fw.ctl[FC_ADAPT_START], fw.ctl[FC_ADAPT_END]) == (600, 1200)
    with pytest.raises(FirewallConfigError, match="adaptive_end: must be above max_states"):
        firewall(max_states=1000, adaptive_end=1000)
    with pytest.raises(FirewallConfigError, match="adaptive_start: must be below"):
        firewall(max_states=1000, adaptive_start=1500, adaptive_end=1400)
    with pytest.raises(FirewallConfigError, match="adaptive_start: expected"):
        firewall(adaptive_start=-1)
