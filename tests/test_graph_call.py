"""Graph.run hands the compiled graph one GraphCall (graph/call.py) built from the batch's
and the graph's arrays: it must follow the batch it is given, the state swapped in and the
firewall attached, never run on arrays it was built from before."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest
from conftest import DST4, DST6, N3_IP4, R0, Router, eth
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6

from vecroute.firewall.config import parse_firewall_config
from vecroute.firewall.firewall import Firewall
from vecroute.graph.dataplane import fib_state
from vecroute.packet.batch import PacketBatch


def _one(r: Router, pkt) -> tuple[str, object]:
    res = r.run([pkt])
    assert len(res.tx) == 1, res
    return res.tx[0].ifname, res.tx[0].pkt


def test_each_batch_object_runs_on_its_own_arrays():
    r = Router()
    first, other = r.batch, PacketBatch(r.batch.vector_size)
    for batch, pkt in [(first, eth(R0) / IP(dst=DST4, ttl=9) / UDP()),
                       (other, eth(R0) / IPv6(dst=DST6, hlim=7) / UDP()),
                       (first, eth(R0) / IP(dst=DST4, ttl=5) / UDP()),
                       (other, eth(R0) / IPv6(dst=DST6, hlim=3) / UDP())]:
        r.batch = batch
        ifname, out = _one(r, pkt)
        assert ifname == "eth1"
        if IP in pkt:  # a call bound to the other batch would read that batch's frame
            assert IP in out and out[IP].ttl == pkt[IP].ttl - 1 and out[IP].dst == DST4
        else:
            assert IPv6 in out and out[IPv6].hlim == pkt[IPv6].hlim - 1
            assert out[IPv6].dst == DST6


def test_a_batch_larger_than_the_graph_is_refused():
    r = Router(vector_size=16)
    with pytest.raises(ValueError, match="slots for a graph built for"):
        r.graph.run(PacketBatch(64), 0)
    r.batch.n = r.batch.capacity + 1  # a count past its slots
    with pytest.raises(ValueError, match="packets in"):
        r.graph.run(r.batch, 0)


def test_a_batch_whose_arrays_were_replaced_is_bound_again():
    r = Router()
    assert _one(r, eth(R0) / IP(dst=DST4, ttl=9) / UDP())[0] == "eth1"
    b = r.batch
    b.buf, b.meta, b.nalloc = np.zeros_like(b.buf), np.zeros_like(b.meta), np.zeros_like(b.nalloc)
    ifname, out = _one(r, eth(R0) / IP(dst=DST4, ttl=4) / UDP())
    assert ifname == "eth1" and out[IP].ttl == 3


def test_a_batch_run_twice_is_left_as_it_is():
    """Run again without a reload, every packet already has its disposition (DONE_TX is
    past the nodes' ids): the graph leaves them, it does not index its frames with it."""
    r = Router()
    res = r.run([eth(R0) / IP(dst=DST4, ttl=9) / UDP()] * 3)
    assert res.fates == ["tx"] * 3
    before = r.state.counters.copy()
    txl = r.graph.run(r.batch, 0)
    assert len(txl) == 0
    assert (r.state.counters == before).all()


def test_the_call_follows_a_swapped_state():
    r = Router()
    assert _one(r, eth(R0) / IP(dst=DST4, ttl=9) / UDP())[0] == "eth1"
    r.fib.add_route(ipaddress.ip_network(f"{DST4}/32"), [ipaddress.ip_address(N3_IP4)])
    r.graph.swap_state(fib_state(r.fib))
    r.state = r.graph.state
    assert _one(r, eth(R0) / IP(dst=DST4, ttl=9) / UDP())[0] == "eth3"


def test_the_call_follows_attach_and_generation_changes():
    r = Router()
    pkt = eth(R0) / IP(dst=DST4, ttl=9) / UDP(dport=9)
    assert _one(r, pkt)[0] == "eth1"
    fw = Firewall(parse_firewall_config({"rules": ["100 deny udp from any to any 9"]}),
                  interfaces=r.names)
    r.graph.attach_firewall(fw)
    res = r.run([pkt])
    assert res.tx == [] and res.fates == ["drop"]
    fw.add("50 allow udp from any to any 9")  # a new generation: rebuilt arrays
    assert _one(r, pkt)[0] == "eth1"
    r.graph.attach_firewall(None)
    assert _one(r, eth(R0) / IP(dst=DST4, ttl=9) / UDP(dport=7))[0] == "eth1"
