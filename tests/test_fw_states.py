"""Dynamic states: bidirectional matching, TCP tracking and lifetimes, max_states, expiry
reclaim (lazy and swept), growth, and states following rule changes."""

from __future__ import annotations

import numpy as np
import pytest

import vecroute.firewall.firewall as fw_module
from vecroute.firewall.config import parse_firewall_config
from vecroute.firewall.firewall import Firewall
from vecroute.firewall.keys import make_key
from vecroute.firewall.layout import DROP_STATE_FULL, V_DROP, V_PASS
from vecroute.firewall.states import (
    FC_COUNT,
    FC_CURSOR,
    new_ctl,
    new_table,
    state_capacity_limit,
    states_need_growth,
    sweep_states,
)

S = 10**9
SYN, ACK, FIN, RST = 0x02, 0x10, 0x01, 0x04
IN, OUT = "192.0.2.10", "198.51.100.20"


def firewall(rules=None, **raw) -> Firewall:
    raw.setdefault(
        "rules",
        rules
        or [
            "100 check-state",
            "200 allow tcp from 192.0.2.0/24 to any setup keep-state",
            "300 allow udp from 192.0.2.0/24 to any keep-state",
            "400 allow icmp from 192.0.2.0/24 to any keep-state",
            "500 allow ip6 from 2001:db8:1::/48 to any keep-state",
        ],
    )
    return Firewall(parse_firewall_config(raw, "s.toml"))


def tcp(src, dst, sp, dp, flags):
    return make_key(src, dst, 6, sp, dp, flags)


def go(fw, key, now):
    v, r, a = fw.classify(np.atleast_2d(key), 0, now)
    return int(v[0]), fw.rule_at(int(r[0])).number, int(a[0])


def test_tcp_both_directions_and_only_the_flow():
    fw = firewall()
    assert go(fw, tcp(IN, OUT, 40000, 80, SYN), S) == (V_PASS, 200, 0)
    assert go(fw, tcp(OUT, IN, 80, 40000, SYN | ACK), S) == (V_PASS, 200, 0)
    assert go(fw, tcp(IN, OUT, 40000, 80, ACK), S) == (V_PASS, 200, 0)
    # other ports, other hosts, reverse direction without a state: default deny
    assert go(fw, tcp(OUT, IN, 80, 40001, SYN | ACK), S)[1] == 65535
    assert go(fw, tcp(OUT, "192.0.2.11", 80, 40000, ACK), S)[1] == 65535
    assert go(fw, tcp(OUT, IN, 81, 40000, ACK), S)[1] == 65535
    st = fw.states(S)
    assert len(st) == 1 and st[0]["src"] == IN and st[0]["dport"] == 80
    assert st[0]["packets"] == 3 and st[0]["rule"] == 200
    assert fw.compiled.cnt[1, 0] == 3  # rule 200: the creating packet + 2 state matches
    text = fw.show_states(S)
    assert text.startswith(
        "## Dynamic rules (1):\n00200 3 192 (300s) STATE tcp 192.0.2.10 40000 <-> 198.51.100.20 80"
    )


def test_ipv6_and_icmp_states():
    fw = firewall()
    k = make_key("2001:db8:1::5", "2001:db8:9::1", 17, 5000, 53)
    assert go(fw, k, S)[1] == 500
    back = make_key("2001:db8:9::1", "2001:db8:1::5", 17, 53, 5000)
    assert go(fw, back, S)[1] == 500
    ping = make_key(IN, OUT, 1, icmptype=8)
    pong = make_key(OUT, IN, 1, icmptype=0)
    assert go(fw, pong, S)[1] == 65535
    assert go(fw, ping, S)[1] == 400
    assert go(fw, pong, S)[1] == 400


@pytest.mark.parametrize(
    "steps, life",
    [
        ([(0, SYN)], 20),  # SYN seen one way only
        ([(0, SYN), (1, SYN | ACK)], 20),  # both SYNs, not acknowledged: still embryonic
        ([(0, SYN), (1, SYN | ACK), (0, ACK)], 300),  # handshake completed: established
        ([(0, SYN), (0, ACK), (1, SYN | ACK)], 20),  # an ACK before the SYN-ACK: no
        ([(0, SYN), (1, SYN | ACK), (0, ACK), (0, FIN | ACK)], 300),  # one side closing
        ([(0, SYN), (1, SYN | ACK), (0, FIN | ACK), (1, FIN | ACK)], 1),  # both FINs
        ([(0, SYN), (1, SYN | ACK), (1, RST)], 1),  # reset
    ],
)
def test_tcp_lifetimes(steps, life):
    fw = firewall()
    now = S
    for d, flags in steps:
        k = tcp(IN, OUT, 40000, 80, flags) if d == 0 else tcp(OUT, IN, 80, 40000, flags)
        assert go(fw, k, now)[1] == 200
    probe = tcp(OUT, IN, 80, 40000, ACK)
    assert go(fw, probe, now + life * S - 1)[1] == 200  # refreshes: expiry moves on
    t = now + life * S - 1
    assert go(fw, probe, t + life * S)[1] == 65535  # expired exactly at last + life


def test_udp_other_lifetimes_and_configured_values():
    fw = firewall(lifetimes={"udp": 3, "other": 7})
    u = make_key(IN, OUT, 17, 1, 2)
    ub = make_key(OUT, IN, 17, 2, 1)
    assert go(fw, u, S)[1] == 300
    assert go(fw, ub, S + 3 * S - 1)[1] == 300
    assert go(fw, ub, S + 6 * S)[1] == 65535
    fw = firewall()
    assert go(fw, u, S)[1] == 300
    assert go(fw, ub, S + 10 * S - 1)[1] == 300
    assert go(fw, ub, S + 20 * S)[1] == 65535
    i = make_key(IN, OUT, 1, icmptype=8)
    ib = make_key(OUT, IN, 1, icmptype=0)
    assert go(fw, i, S)[1] == 400
    assert go(fw, ib, 30 * S)[1] == 400
    assert go(fw, ib, 61 * S)[1] == 65535


def test_max_states_drops_new_flows_only():
    """A table full of answered flows refuses new ones (unanswered states would be evicted
    to make room: test_fw_flood.py)."""
    fw = firewall(max_states=3)
    for p in range(3):
        assert go(fw, make_key(IN, OUT, 17, 1000 + p, 53), S)[1] == 300
        assert go(fw, make_key(OUT, IN, 17, 53, 1000 + p), S)[1] == 300
    v, rule, aux = go(fw, make_key(IN, OUT, 17, 2000, 53), S)
    assert (v, rule, aux) == (V_DROP, 300, DROP_STATE_FULL)
    assert fw.counters()["full-drops"] == 1
    # existing flows keep working, both ways
    assert go(fw, make_key(OUT, IN, 17, 53, 1001), S)[:2] == (V_PASS, 300)
    # after they expire, there is room again (reclaimed lazily or by the sweep)
    assert go(fw, make_key(IN, OUT, 17, 2000, 53), 12 * S)[:2] == (V_PASS, 300)
    assert fw.counters()["states"] <= 3


def test_expired_states_are_swept_in_bounded_steps():
    fw = firewall(max_states=100000)
    n = 3000
    keys = np.stack([make_key(IN, OUT, 17, 1024 + p, 53) for p in range(n)])
    fw.classify(keys, 0, S)
    assert fw.counters()["states"] == n
    cap = fw.st.shape[0]
    assert cap >= 2 * n  # grew from 1024 rows, load stays <= 1/2
    # each batch examines 64 rows (a reclaimed row is examined again, as a later row may
    # have moved into it): the whole table after (cap + n) / 64 batches, no pause
    ctl = fw.ctl
    later = 100 * S
    batches = 0
    while ctl[FC_COUNT] > 0:
        fw.classify(make_key(OUT, IN, 6, 1, 2, SYN)[None, :], 0, later)
        batches += 1
        assert batches <= (cap + n) // 64 + 2
    assert fw.counters()["expired"] == n and fw.states(later) == []


def test_sweep_and_growth_keep_live_states():
    fw = firewall(max_states=100000)
    keys = np.stack([make_key(IN, OUT, 17, 1024 + p, 53) for p in range(2000)])
    fw.classify(keys[:1000], 0, S)
    fw.classify(keys[1000:], 0, 9 * S)  # the first 1000 expire at 11 s, the rest at 19 s
    back = np.stack([make_key(OUT, IN, 17, 53, 1024 + p) for p in range(2000)])
    for _ in range(200):  # sweep everything several times
        fw.classify(back[:0], 0, 12 * S)
    sweep_states(fw.st, fw.ctl, 12 * S, 2 * fw.st.shape[0])
    assert fw.counters()["states"] == 1000
    v, r, _ = fw.classify(back, 0, 12 * S)
    assert (r[:1000] == len(fw.rules) - 1).all() and (v[1000:] == V_PASS).all()


def test_state_table_unit():
    st, ctl = new_table(), new_ctl(10)
    from vecroute.firewall.states import state_find, state_insert, state_key, state_update

    k = state_key(4, 0, 5, 10, 0, 9, 20, 6)
    assert k[:5] == (0, 5, 0, 9, (10 << 16) | 20) and k[6]
    k2 = state_key(4, 0, 9, 20, 0, 5, 10, 6)
    assert k2[:6] == k[:6] and not k2[6]
    row = state_insert(st, ctl, *k[:6], k[6], 3, S)
    state_update(st, ctl, row, k[6], 6, SYN, 60, S)
    assert row >= 0 and state_find(st, ctl, *k2[:6], S) == row
    assert st[row, 6] == S + 20 * S  # SYN lifetime
    st[row, 6] = S  # expires now
    assert state_find(st, ctl, *k[:6], S) == -1 and ctl[FC_COUNT] == 0
    assert ctl[FC_CURSOR] == 0


def test_states_follow_rule_changes():
    fw = firewall()
    go(fw, make_key(IN, OUT, 17, 1, 2), S)
    fw.add("50 count ip from any to any")  # rule indices move: the state still works
    assert go(fw, make_key(OUT, IN, 17, 2, 1), S)[1] == 300
    fw.delete(300)  # its states go with it
    assert go(fw, make_key(OUT, IN, 17, 2, 1), S)[1] == 65535
    assert fw.states(S) == []


@pytest.mark.parametrize("vs", [1, 256, 257, 300, 1024, 4096])
@pytest.mark.parametrize("max_states", [100, 1 << 20])
def test_maintain_grows_exactly_when_grow_states_would(monkeypatch, vs, max_states):
    """maintain()'s one comparison (its threshold solved once per table) against
    grow_states' own test and the compiled loops' (states_need_growth), at and around both
    boundaries of each table size it grows through, for vectors from 1 to 4096 and a
    max_states that stops the growth: it asks grow_states only when that test fails (and
    not again at the size limit), and grows exactly when the loops would return for it."""
    calls = []
    real = fw_module.grow_states
    monkeypatch.setattr(fw_module, "grow_states", lambda *a: calls.append(1) or real(*a))
    raw = {"rules": ["100 allow ip from any to any keep-state"], "max_states": max_states}
    fw = Firewall(parse_firewall_config(raw, "s.toml"), vector_size=vs)
    limit = state_capacity_limit(fw.st, fw.ctl)
    sizes = 0
    while True:
        cap = fw.st.shape[0]
        sizes += 1
        counts = sorted({e + d for e in (cap // 2, cap * 3 // 4 - vs) for d in (-1, 0, 1)}
                        | {0})
        grew = False
        for c in counts:
            fw.ctl[FC_COUNT] = c
            fits = c * 2 <= cap and (c + vs) * 4 <= cap * 3
            need = states_need_growth(fw.st, fw.ctl, vs, limit)
            calls.clear()
            before, gen = fw.st, fw.generation
            got = fw.maintain()
            assert not (calls and fits), (cap, vs, c)  # no call while the table is fine
            assert calls or fits or cap >= limit, (cap, vs, c)
            assert got == need == (fw.st is not before) == (fw.generation != gen), (cap, vs, c)
            if got:
                grew = True
                break
        if not grew:
            break
    assert cap >= limit or sizes > 1, (cap, limit)
    fw.ctl[FC_COUNT] = 0
