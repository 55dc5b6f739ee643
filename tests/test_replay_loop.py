"""Replay's compiled loop against a plain-Python reference of what a replay must write.

The reference reads the inputs with scapy, merges them with ``sorted`` (stable), runs the
same graph one batch at a time through ``Graph.run`` and formats every transmitted packet
with ``struct``: sorted by (origin, sequence), stamped with its origin's timestamp (the
batch's clock for a packet with no origin in the batch). The replay's files must equal
its output byte for byte: forwarded, generated (fragments, ARP/NS, ICMP errors, echo
replies) and suppressed packets alike, over record buffers much smaller than the output
(many calls, batches written in parts), and with a firewall whose state table grows.
"""

from __future__ import annotations

import random
import struct
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    DST4,
    DST4_SMALL,
    H0,
    H0_IP4,
    H0_IP6,
    N1,
    R0,
    R0_IP4,
    R1,
    SMALL_MTU,
    base_config,
)
from scapy.layers.inet import ICMP, IP, TCP, UDP, fragment
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.utils import RawPcapReader, rdpcap, wrpcap
from test_replay_cli import toml_of

from vecroute.control.config import load_config
from vecroute.io import replay as replay_mod
from vecroute.io.replay import Replayer
from vecroute.packet.batch import M_LEN, M_OFF, M_ORIG, M_SEQ, M_TX, SLOT

T0 = Decimal("1700000000")
FW_TOML = (Path(__file__).resolve().parent.parent / "examples" / "firewall.toml").read_text()


def reference(cfg_path: Path, inputs: list[tuple[str, Path]], vector: int) -> dict[str, bytes]:
    """File name -> the bytes a replay must write (see the module docstring)."""
    cfg = load_config(cfg_path)
    rp = Replayer(cfg, vector)  # its graph and batch; its loop is not used
    frames = []
    for name, path in inputs:
        ifx = cfg.interface_index(name)
        for data, meta in RawPcapReader(str(path)):
            if hasattr(meta, "tshigh"):  # pcapng
                t = ((meta.tshigh << 32) | meta.tslow) * (10**9 // meta.tsresol)
            else:  # microsecond pcap (what wrpcap writes)
                t = meta.sec * 10**9 + meta.usec * 1000
            frames.append((t, ifx, data))
    frames.sort(key=lambda f: f[0])  # stable: ties keep input order
    out: dict[int, list[bytes]] = {}
    b, g = rp.batch, rp.graph
    for s in range(0, len(frames), vector):
        chunk = frames[s : s + vector]
        blob = b"".join(f[2] for f in chunk)
        lens = np.array([len(f[2]) for f in chunk], np.int32)
        offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        ts = np.array([f[0] for f in chunk], np.int64)
        rx = np.array([f[1] for f in chunk], np.int32)
        n = b.load(np.frombuffer(blob, np.uint8), offs, lens, ts, rx, 0, len(chunk))
        now = int(ts[-1])
        tx = [int(i) for i in g.run(b, now)]
        meta = b.meta
        for i in sorted(tx, key=lambda i: (int(meta[M_ORIG, i]), int(meta[M_SEQ, i]))):
            g0 = int(meta[M_ORIG, i])
            t = int(ts[g0]) if g0 < n else now
            o, ln = int(meta[M_OFF, i]), int(meta[M_LEN, i])
            rec = struct.pack("<IIII", t // 10**9, t % 10**9, ln, ln) + b.buf[o : o + ln].tobytes()
            out.setdefault(int(meta[M_TX, i]), []).append(rec)
    head = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1)
    return {f"{cfg.interfaces[p].name}.pcap": head + b"".join(r) for p, r in out.items()}


def assert_same_as_reference(cfg_path: Path, inputs, vector: int, out: Path) -> None:
    rp = Replayer(load_config(cfg_path), vector)
    res = rp.run([(n, str(p)) for n, p in inputs], out)
    want = reference(cfg_path, inputs, vector)
    got = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], name
    assert res.packets_out == sum(len(rdpcap(str(out / f))) for f in want)
    return res


def mixed_traffic(rng: random.Random, n: int, dst_mac: str, src_mac: str, src4: str,
                  src6: str) -> list:
    """Forwarded v4/v6, fragmented, DF too big, TTL 1, no route, unresolved next hops
    (ARP/NS), pings to the router, reassembly (whole and incomplete datagrams), runts,
    ARP requests, TCP to a small MTU."""
    out = []
    for k in range(n):
        e = Ether(dst=dst_mac, src=src_mac)
        r = rng.random()
        if r < 0.4:
            p = e / IP(src=src4, dst=f"203.0.113.{rng.randint(1, 254)}", id=k) / UDP(
                sport=k, dport=53) / (b"x" * rng.randint(0, 40))
        elif r < 0.5:
            dst = rng.choice(["2001:db8:100::5", "2001:db8:200::5", "2001:db8:300::5",
                              "2001:db8:dead::1"])
            p = e / IPv6(src=src6, dst=dst) / UDP(sport=k) / (b"y" * rng.choice([10, 1300]))
        elif r < 0.6:
            p = e / IP(src=src4, dst=DST4_SMALL, id=k, flags=rng.choice([0, 2])) / UDP() / (
                b"F" * rng.randint(500, 1400))
        elif r < 0.67:
            p = e / IP(src=src4, dst=DST4, ttl=1, id=k) / UDP() / b"ttl"
        elif r < 0.72:
            p = e / IP(src=src4, dst="198.18.0.1", id=k) / TCP(flags="S")
        elif r < 0.77:
            p = e / IP(src=src4, dst=f"203.0.113.{rng.randint(193, 254)}", id=k) / UDP()
        elif r < 0.82:
            p = e / IP(src=src4, dst=R0_IP4, id=k) / ICMP(id=k, seq=1) / b"ping"
        elif r < 0.86:
            frags = fragment(IP(src=src4, dst=R0_IP4, id=k) / ICMP(id=7) / (b"R" * 2000), 600)
            out += [e / f for f in (frags[:-1] if rng.random() < 0.5 else frags)]
            continue
        elif r < 0.9:
            p = Ether(bytes(e / IP(src=src4, dst="203.0.113.9"))[: rng.randint(14, 30)])
        elif r < 0.95:
            p = Ether(dst="ff:ff:ff:ff:ff:ff", src=src_mac) / ARP(psrc=src4, hwsrc=src_mac,
                                                                  pdst=R0_IP4)
        else:
            p = e / IP(src=src4, dst=DST4_SMALL, id=k, flags=2) / TCP(flags="A") / (b"D" * 1000)
        out.append(p)
    return out


def stamp(pkts: list, times: list[Decimal]) -> None:
    for p, t in zip(pkts, times, strict=True):
        p.time = t


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> tuple[Path, list[tuple[str, Path]]]:
    """Two inputs of mixed traffic with ties across them and a 40 s gap (reassembly
    contexts time out mid-replay)."""
    d = tmp_path_factory.mktemp("mixed")
    rng = random.Random(5)
    conf = d / "router.toml"
    conf.write_text(toml_of(base_config()))
    a = mixed_traffic(rng, 900, R0, H0, H0_IP4, H0_IP6)
    b = mixed_traffic(rng, 400, R1, N1, "203.0.113.9", "2001:db8:100::9")
    t, ta = T0, []
    for k in range(len(a)):
        t += Decimal(rng.choice([0, 0, 1, 5, 1000])) / 10**6 + (40 if k == len(a) // 2 else 0)
        ta.append(t)
    stamp(a, ta)
    stamp(b, sorted(rng.choice(ta) + Decimal(rng.choice([0, 1])) / 10**6 for _ in b))
    wrpcap(str(d / "a.pcap"), a)
    wrpcap(str(d / "b.pcap"), b)
    return conf, [("eth0", d / "a.pcap"), ("eth1", d / "b.pcap")]


@pytest.mark.parametrize("vector", [1, 7, 256])
def test_mixed_traffic_is_written_as_the_reference(mixed, vector, tmp_path) -> None:
    conf, inputs = mixed
    res = assert_same_as_reference(conf, inputs, vector, tmp_path / "out")
    assert res.packets_in == sum(len(rdpcap(str(p))) for _, p in inputs)
    assert res.read_seconds > 0 and res.seconds >= res.write_seconds > 0


def test_record_buffers_much_smaller_than_the_output(mixed, tmp_path, monkeypatch) -> None:
    """One record per port slice and a bit: every batch is written in parts over many
    calls, and the files are still the same."""
    monkeypatch.setattr(replay_mod, "RECORD_BUFFER", 0)
    monkeypatch.setattr(replay_mod, "PORT_SLICE_MIN", 16 + SLOT)
    conf, inputs = mixed
    assert_same_as_reference(conf, inputs, 64, tmp_path / "out")
    big = tmp_path / "big.pcap"
    pk = [Ether(dst=R0, src=H0) / IP(src=H0_IP4, dst=DST4, id=k) / UDP() / (b"z" * 1400)
          for k in range(300)]
    stamp(pk, [T0 + Decimal(k) / 1000 for k in range(300)])
    wrpcap(str(big), pk)
    assert_same_as_reference(conf, [("eth0", big)], 256, tmp_path / "out2")
    q = rdpcap(str(tmp_path / "out2" / "eth1.pcap"))
    assert [p[IP].id for p in q] == list(range(300))
    assert all(p[IP].ttl == 63 and p[Ether].dst == N1 and p[Ether].src == R1 for p in q)
    assert [Decimal(str(p.time)) for p in q] == [T0 + Decimal(k) / 1000 for k in range(300)]


def test_batches_full_of_generated_packets(tmp_path) -> None:
    """Every packet of every batch fragments into four (more than the spare slots hold),
    or draws an ICMP error or an ARP request: output order is rebuilt by origin, and the
    fragments that found no slot are counted, not written."""
    conf = tmp_path / "router.toml"
    conf.write_text(toml_of(base_config()))
    e = Ether(dst=R0, src=H0)
    pk = []
    for k in range(400):
        if k % 5 == 4:
            pk.append(e / IP(src=H0_IP4, dst=DST4, ttl=1, id=k) / UDP() / b"t")
        elif k % 7 == 6:
            pk.append(e / IP(src=H0_IP4, dst="203.0.113.200", id=k) / UDP())
        else:
            pk.append(e / IP(src=H0_IP4, dst=DST4_SMALL, id=k) / UDP() / (b"G" * 1900))
    stamp(pk, [T0 + Decimal(k) / 10**6 for k in range(400)])
    wrpcap(str(tmp_path / "in.pcap"), pk)
    rp_res = assert_same_as_reference(conf, [("eth0", tmp_path / "in.pcap")], 64,
                                      tmp_path / "out")
    frags = rdpcap(str(tmp_path / "out" / "eth2.pcap"))
    assert frags and all(len(p[IP]) <= SMALL_MTU for p in frags)
    ids = [p[IP].id for p in frags]
    assert ids == sorted(ids), "fragments in input order"
    times = [p.time for p in frags]
    assert times == sorted(times)
    assert rp_res.packets_out > 400


def test_reassembly_timeout_error_carries_the_batch_clock(tmp_path) -> None:
    """A Time Exceeded for a datagram that never completed has no packet of its batch as
    origin: it is stamped with the clock of the batch whose timer sent it and written after
    that batch's packets."""
    conf = tmp_path / "router.toml"
    conf.write_text(toml_of(base_config()))
    e = Ether(dst=R0, src=H0)
    first = fragment(IP(src=H0_IP4, dst=R0_IP4, id=77) / ICMP(id=9) / (b"Q" * 1500), 600)[0]
    late = [e / IP(src=H0_IP4, dst=R0_IP4, id=k) / ICMP(id=k, seq=1) for k in range(3)]
    pk = [e / first, *late]
    times = [T0, T0 + 100, T0 + Decimal("100.2"), T0 + Decimal("100.5")]
    stamp(pk, times)
    wrpcap(str(tmp_path / "in.pcap"), pk)
    out = tmp_path / "out"
    assert_same_as_reference(conf, [("eth0", tmp_path / "in.pcap")], 1, out)
    q = rdpcap(str(out / "eth0.pcap"))
    got = [(p[ICMP].type, p[ICMP].code, Decimal(str(p.time))) for p in q]
    # the timer runs in late[0]'s batch (the fragment's own batch set its arrival time)
    assert got == [(0, 0, times[1]), (11, 1, times[1]), (0, 0, times[2]), (0, 0, times[3])]
    assert q[1][IP].dst == H0_IP4


@pytest.mark.parametrize("vector", [256, 4096])
def test_firewall_state_table_grows_mid_replay(tmp_path, vector) -> None:
    """5000 UDP flows kept in state: the table grows several times between batches, as
    Graph.run's sync_firewall does, and the replies of every flow pass check-state. A
    vector larger than the config's (``--vector-size``) gets room for its states too (the
    firewall was sized for the config's 256: a 4096-packet vector dropped 3328 states)."""
    conf = tmp_path / "fw.toml"
    host = '[[neighbors]]\nip = "198.51.100.7"\nmac = "02:00:00:00:aa:10"\ninterface = "inside"\n'
    conf.write_text(FW_TOML + host)
    cfg = load_config(conf)
    e_in = Ether(dst="02:00:00:00:00:01", src=H0)
    e_out = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:99")
    out_pk = [e_in / IP(src="198.51.100.7", dst="198.18.0.9") / UDP(sport=1024 + k, dport=9)
              for k in range(5000)]
    back = [e_out / IP(src="198.18.0.9", dst="198.51.100.7") / UDP(sport=9, dport=1024 + k)
            for k in range(0, 5000, 50)]
    stamp(out_pk, [T0 + Decimal(k) / 10**6 for k in range(5000)])
    stamp(back, [T0 + 1 + Decimal(k) / 10**6 for k in range(len(back))])
    wrpcap(str(tmp_path / "in.pcap"), out_pk)
    wrpcap(str(tmp_path / "back.pcap"), back)
    inputs = [("inside", tmp_path / "in.pcap"), ("outside", tmp_path / "back.pcap")]
    rp = Replayer(cfg, vector)
    cap0 = rp.firewall.st.shape[0]
    res = rp.run([(n, str(p)) for n, p in inputs], tmp_path / "out")
    assert rp.firewall.st.shape[0] > cap0 * 4
    assert res.packets_out == 5000 + len(back)
    want = reference(conf, inputs, vector)
    assert sorted(want) == ["inside.pcap", "outside.pcap"]
    for name, data in want.items():
        assert (tmp_path / "out" / name).read_bytes() == data
    q = rdpcap(res.outputs["inside"])
    assert [p[UDP].dport for p in q] == list(range(1024, 6024, 50))
    assert all(p[Ether].dst == H0 and p[IP].ttl == 63 for p in q)


def test_empty_capture_writes_nothing(tmp_path) -> None:
    conf = tmp_path / "router.toml"
    conf.write_text(toml_of(base_config()))
    f = tmp_path / "empty.pcap"
    wrpcap(str(f), [])
    res = Replayer(load_config(conf)).run([("eth0", str(f))], tmp_path / "out")
    assert (res.packets_in, res.packets_out, res.outputs) == (0, 0, {})
    assert list((tmp_path / "out").iterdir()) == []


def test_pcapng_input_and_truncation(tmp_path) -> None:
    """A pcapng input merged with a truncated pcap: the damaged file's packets up to the
    damage are replayed, its error reported, the output as the reference's."""
    from scapy.utils import PcapNgWriter

    conf = tmp_path / "router.toml"
    conf.write_text(toml_of(base_config()))
    a = [Ether(dst=R0, src=H0) / IP(src=H0_IP4, dst=DST4, id=k) / UDP() for k in range(20)]
    stamp(a, [T0 + k for k in range(20)])
    with PcapNgWriter(str(tmp_path / "a.pcapng")) as w:
        for p in a:
            w.write(p)
    b = [Ether(dst=R0, src=H0) / IP(src=H0_IP4, dst=DST4_SMALL, id=100 + k) / UDP()
         for k in range(10)]
    stamp(b, [T0 + k + Decimal("0.5") for k in range(10)])
    wrpcap(str(tmp_path / "b.pcap"), b)
    raw = (tmp_path / "b.pcap").read_bytes()
    (tmp_path / "b.pcap").write_bytes(raw[: len(raw) - 10])
    inputs = [("eth0", tmp_path / "a.pcapng"), ("eth0", tmp_path / "b.pcap")]
    res = Replayer(load_config(conf)).run([(n, str(p)) for n, p in inputs], tmp_path / "out")
    assert res.packets_in == 29 and len(res.capture_errors) == 1
    assert "b.pcap" in res.capture_errors[0] and "truncated" in res.capture_errors[0]
    q = rdpcap(str(tmp_path / "out" / "eth1.pcap"))
    assert [p[IP].id for p in q] == list(range(20))
    q2 = rdpcap(str(tmp_path / "out" / "eth2.pcap"))
    assert [p[IP].id for p in q2] == [100 + k for k in range(9)]


@pytest.mark.parametrize("seed", range(20))
def test_tx_order_is_a_stable_sort_by_origin_and_sequence(seed) -> None:
    from vecroute.io.replay_loop import tx_order
    from vecroute.packet.batch import N_META

    rng = np.random.default_rng(seed)
    cap = 80
    meta = np.zeros((N_META, cap), np.int32)
    meta[M_ORIG] = rng.integers(0, cap if seed % 2 else 8, cap)
    meta[M_SEQ] = rng.integers(0, 3 if seed % 3 else 1, cap)
    nt = int(rng.integers(0, cap + 1))
    txl = rng.permutation(cap).astype(np.int32)[:nt]
    if seed % 5 == 0:  # already in order: the common case
        txl = np.array(sorted(txl, key=lambda i: (meta[M_ORIG, i], meta[M_SEQ, i])), np.int32)
    order = np.full(cap, -7, np.int32)
    assert tx_order(txl, nt, meta, order, np.zeros(cap + 1, np.int64)) == -1
    want = sorted(txl.tolist(), key=lambda i: (meta[M_ORIG, i], meta[M_SEQ, i]))
    assert order[:nt].tolist() == want
    if nt > 1:
        meta[M_ORIG, txl[0]] = cap  # no such slot: refused, not counted out of bounds
        assert tx_order(txl, nt, meta, order, np.zeros(cap + 1, np.int64)) == txl[0]
