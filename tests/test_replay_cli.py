"""``vecroute replay``: pcaps in, one pcap per transmitting interface out, read back with
scapy; timestamp-ordered merging of inputs, stats JSON, damaged and garbage captures."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import (
    DST4,
    DST4_SMALL,
    DST6,
    H0,
    H0_IP4,
    H0_IP6,
    N1,
    N2,
    R0,
    R0_IP4,
    R1,
    R2,
    SMALL_MTU,
    assert_checksums,
    base_config,
)
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.utils import rdpcap, wrpcap

from vecroute.cli import main

T0 = Decimal("1700000000.000000")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def toml_of(cfg: dict) -> str:
    """The config dict as TOML (only what base_config uses)."""

    def val(v) -> str:
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return str(v).lower() if isinstance(v, bool) else str(v)

    out = []
    for sect in ("interfaces", "routes", "neighbors"):
        for t in cfg.get(sect, []):
            out.append(f"[[{sect}]]")
            out += [f"{k} = {val(v)}" for k, v in t.items()]
            out.append("")
    for sect in ("icmp", "router"):
        if sect in cfg:
            out.append(f"[{sect}]")
            out += [f"{k} = {val(v)}" for k, v in cfg[sect].items()]
    return "\n".join(out) + "\n"


def write_pcap(path: Path, pkts: list, times: list[Decimal]) -> None:
    for p, t in zip(pkts, times, strict=True):
        p.time = t
    wrpcap(str(path), pkts)


def replay(tmp_path: Path, cfg: dict, inputs: dict[str, list], extra: list[str] | None = None):
    conf = tmp_path / "router.toml"
    conf.write_text(toml_of(cfg))
    args = [
        "replay",
        str(conf),
        "--out-dir",
        str(tmp_path / "out"),
        "--stats-json",
        str(tmp_path / "stats.json"),
        "-q",
    ]
    for name, path in inputs.items():
        args += ["--in", f"{name}={path}"]
    return CliRunner().invoke(main, args + (extra or []))


def test_replay_two_inputs(tmp_path: Path) -> None:
    e0 = Ether(dst=R0, src=H0)
    e1 = Ether(dst=R1, src=N1)
    a = [
        e0 / IP(src=H0_IP4, dst=DST4, id=k) / UDP(sport=k, dport=7) / (b"a" * k)
        for k in range(1, 6)
    ]
    a.append(e0 / IPv6(src=H0_IP6, dst=DST6) / UDP() / b"v6")
    a.append(e0 / IP(src=H0_IP4, dst=DST4_SMALL) / UDP() / (b"F" * 1000))  # 2 fragments
    a.append(e0 / IP(src=H0_IP4, dst=R0_IP4) / ICMP(id=3, seq=3) / b"ping")
    b = [
        e1 / IP(src="203.0.113.9", dst=DST4_SMALL, id=100 + k) / UDP() / (b"b" * k)
        for k in range(4)
    ]
    ta = [T0 + Decimal(k) / 10 for k in range(len(a))]  # 0.0, 0.1, ... 0.7
    tb = [T0 + Decimal(2 * k + 1) / 20 for k in range(len(b))]  # 0.05, 0.15, 0.25, 0.35
    write_pcap(tmp_path / "a.pcap", a, ta)
    write_pcap(tmp_path / "b.pcap", b, tb)
    res = replay(
        tmp_path, base_config(), {"eth0": tmp_path / "a.pcap", "eth1": tmp_path / "b.pcap"}
    )
    assert res.exit_code == 0, (res.output, res.exception)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["eth0.pcap", "eth1.pcap", "eth2.pcap"]

    # eth1: the five IPv4 and one IPv6 packets from a, in order, same timestamps
    o1 = rdpcap(str(out / "eth1.pcap"))
    assert len(o1) == 6
    for q, p, t in zip(o1, a[:6], ta[:6], strict=True):
        assert Decimal(str(q.time)) == t
        assert q[Ether].dst == N1 and q[Ether].src == R1
        l3 = IP if IP in p else IPv6
        assert bytes(q[l3].payload) == bytes(p[l3].payload)
        assert_checksums(q)

    # eth2: a's fragments and b's four packets merged by timestamp
    o2 = rdpcap(str(out / "eth2.pcap"))
    times = [Decimal(str(q.time)) for q in o2]
    assert times == sorted(times), "inputs are merged in timestamp order"
    assert len(o2) == 4 + 2
    frag_id = IP(bytes(a[6][IP])).id
    want = sorted([(t, p[IP].id) for p, t in zip(b, tb, strict=True)] + [(ta[6], frag_id)] * 2)
    assert [(Decimal(str(q.time)), q[IP].id) for q in o2] == want
    for q in o2:
        assert q[Ether].dst == N2 and q[Ether].src == R2 and len(q[IP]) <= SMALL_MTU
        assert_checksums(q)

    # eth0: the echo reply, at the request's timestamp
    o0 = rdpcap(str(out / "eth0.pcap"))
    assert len(o0) == 1 and o0[0][ICMP].type == 0 and Decimal(str(o0[0].time)) == ta[7]

    stats = json.loads((tmp_path / "stats.json").read_text())
    assert {"interfaces", "errors", "runtime", "summary"} <= set(stats)
    ifs = {i["name"]: i for i in stats["interfaces"]}
    assert ifs["eth0"]["rx_packets"] == len(a) and ifs["eth1"]["rx_packets"] == len(b)
    assert ifs["eth1"]["tx_packets"] == 6 and ifs["eth2"]["tx_packets"] == 6
    errors = {e["counter"]: e["count"] for e in stats["errors"]}
    assert errors["echo-reply-sent"] == 1 and errors["fragments-created"] == 2
    assert stats["summary"]["packets_in"] == len(a) + len(b)
    assert stats["summary"]["packets_out"] == 13
    assert any(r["node"] == "ip4-lookup" for r in stats["runtime"])


def test_replay_processes_in_timestamp_order(tmp_path: Path) -> None:
    """With an ICMP burst of 1 and no refill, only the earliest offending packet gets an
    error: it is the one on the second --in, because it is earlier in time."""
    cfg = base_config(icmp={"rate": 0, "burst": 1})
    late = Ether(dst=R0, src=H0) / IP(src=H0_IP4, dst=DST4, ttl=1, id=1) / UDP()
    early = Ether(dst=R1, src=N1) / IP(src="203.0.113.9", dst=H0_IP4, ttl=1, id=2) / UDP()
    write_pcap(tmp_path / "a.pcap", [late], [T0 + 1])
    write_pcap(tmp_path / "b.pcap", [early], [T0])
    res = replay(
        tmp_path,
        cfg,
        {"eth0": tmp_path / "a.pcap", "eth1": tmp_path / "b.pcap"},
        ["--vector-size", "1"],
    )
    assert res.exit_code == 0, res.output
    outs = list((tmp_path / "out").iterdir())
    assert [p.name for p in outs] == ["eth1.pcap"]
    o = rdpcap(str(outs[0]))
    assert len(o) == 1 and o[0][ICMP].type == 11 and o[0][IP].dst == "203.0.113.9"
    assert Decimal(str(o[0].time)) == T0
    errors = {
        e["counter"]: e["count"]
        for e in json.loads((tmp_path / "stats.json").read_text())["errors"]
    }
    assert errors["icmp-error-sent"] == 1 and errors["icmp-rate-limited"] == 1


def test_replay_arp_request_timestamp(tmp_path: Path) -> None:
    """A generated packet (ARP request) carries the timestamp of the packet it came from;
    one request per second per neighbour, by capture time."""
    p = Ether(dst=R0, src=H0) / IP(src=H0_IP4, dst="203.0.113.200") / UDP()
    times = [T0, T0 + Decimal("0.5"), T0 + Decimal("1.2")]
    write_pcap(tmp_path / "a.pcap", [p.copy() for _ in times], times)
    res = replay(tmp_path, base_config(), {"eth0": tmp_path / "a.pcap"}, ["--vector-size", "1"])
    assert res.exit_code == 0
    o = rdpcap(str(tmp_path / "out" / "eth1.pcap"))
    assert [Decimal(str(q.time)) for q in o] == [times[0], times[2]]
    assert all(q[ARP].op == 1 and q[ARP].pdst == "192.0.2.3" for q in o)


def _pcap_with(tmp_path: Path, n: int) -> tuple[Path, list[int]]:
    pkts = [
        Ether(dst=R0, src=H0) / IP(src=H0_IP4, dst=DST4, id=k) / UDP() / (b"x" * (10 + k))
        for k in range(n)
    ]
    f = tmp_path / "in.pcap"
    write_pcap(f, pkts, [T0 + k for k in range(n)])
    offs, o = [], 24
    for p in pkts:
        offs.append(o)
        o += 16 + len(p)
    assert f.stat().st_size == o
    return f, offs


@pytest.mark.parametrize("cut", ["header", "data"])
def test_replay_truncated_capture(tmp_path: Path, cut: str) -> None:
    f, offs = _pcap_with(tmp_path, 10)
    data = f.read_bytes()
    damaged = offs[6] + (8 if cut == "header" else 16 + 5)
    f.write_bytes(data[:damaged])
    res = replay(tmp_path, base_config(), {"eth0": f})
    assert res.exit_code == 1, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit)
    o = rdpcap(str(tmp_path / "out" / "eth1.pcap"))
    assert [q[IP].id for q in o] == list(range(6)), "everything before the damage"
    assert [Decimal(str(q.time)) for q in o] == [T0 + k for k in range(6)]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    m = re.search(r"byte offset (\d+)", lines[0])
    assert m and str(f) in lines[0]
    assert int(m.group(1)) in (offs[6], offs[6] + 16), lines[0]
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["summary"]["packets_in"] == 6
    assert stats["summary"]["capture_errors"]


@pytest.mark.parametrize(
    "content",
    [
        b"this is not a capture file at all, just text\n" * 3,
        b"",
        b"\xd4\xc3\xb2",
        bytes(range(256)),
    ],
    ids=["text", "empty", "short", "binary"],
)
def test_replay_garbage_file(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "junk.pcap"
    f.write_bytes(content)
    res = replay(tmp_path, base_config(), {"eth0": f})
    assert res.exit_code == 2, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vecroute: ") and str(f) in lines[0]
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--in", "eth9=X"], "eth9"),
        (["--in", "eth0"], "IFNAME=FILE"),
        (["--in", "eth0=/nonexistent/x.pcap"], "x.pcap"),
        ([], "no input"),
    ],
    ids=["unknown-if", "no-equals", "missing-file", "no-input"],
)
def test_replay_bad_arguments(tmp_path: Path, args: list[str], needle: str) -> None:
    conf = tmp_path / "router.toml"
    conf.write_text(toml_of(base_config()))
    args = [a.replace("X", str(tmp_path / "x.pcap")) for a in args]
    (tmp_path / "x.pcap").write_bytes(b"")
    res = CliRunner().invoke(main, ["replay", str(conf), "--out-dir", str(tmp_path / "o"), *args])
    assert res.exit_code == 2, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], res.stderr


def test_replay_demo_subprocess(tmp_path: Path) -> None:
    """The bundled demo through the real entry point."""
    out = tmp_path / "out"
    stats = tmp_path / "s.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "vecroute.cli",
            "replay",
            str(EXAMPLES / "demo.toml"),
            "--in",
            f"eth0={EXAMPLES / 'demo-eth0.pcap'}",
            "--in",
            f"eth1={EXAMPLES / 'demo-eth1.pcap'}",
            "--out-dir",
            str(out),
            "--stats-json",
            str(stats),
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    s = json.loads(stats.read_text())
    assert s["summary"]["packets_in"] == len(rdpcap(str(EXAMPLES / "demo-eth0.pcap"))) + len(
        rdpcap(str(EXAMPLES / "demo-eth1.pcap"))
    )
    for name, path in s["summary"]["outputs"].items():
        pk = rdpcap(path)
        assert pk and Path(path).name == f"{name}.pcap"
        times = [q.time for q in pk]
        assert times == sorted(times)
