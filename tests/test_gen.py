"""`vecroute gen`: pktgen's arithmetic, and frames that scapy parses with valid checksums."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from scapy.all import ICMP, IP, TCP, UDP, Ether, ICMPv6EchoRequest, IPv6

from vecroute.io.af_packet import PacketSocket
from vecroute.io.netns import Lab, entered
from vecroute.measure.gen import GenResult
from vecroute.packet.batch import PacketBatch


def test_pktgen_arithmetic_reproduces_the_seed_line():
    # the Linux SRv6 seed: "680427pps 5443Mb/sec (5443416000bps) errors: 0", 1000-byte frames
    r = GenResult(packets=6804270, size=1000, elapsed_ns=10_000_000_000, idle_ns=0, errors=0)
    lines = r.pktgen_text().splitlines()
    assert lines[0] == "OK: 10000000(c10000000+d0) usec, 6804270 (1000byte,0frags)"
    assert lines[1] == "  680427pps 5443Mb/sec (5443416000bps) errors: 0"


def _checksums_ok(pkt) -> bool:
    for layer in (IP, UDP, TCP, ICMP):
        if pkt.haslayer(layer) and hasattr(pkt[layer], "chksum"):
            got = pkt[layer].chksum
            p2 = Ether(bytes(pkt))
            del p2[layer].chksum
            if Ether(bytes(p2))[layer].chksum != got:
                return False
    for layer in (UDP, TCP, ICMPv6EchoRequest):
        if pkt.haslayer(IPv6) and pkt.haslayer(layer):
            got = pkt[layer].cksum if hasattr(pkt[layer], "cksum") else pkt[layer].chksum
            p2 = Ether(bytes(pkt))
            f = "cksum" if hasattr(p2[layer], "cksum") else "chksum"
            delattr(p2[layer], f)
            if getattr(Ether(bytes(p2))[layer], f) != got:
                return False
    return True


@pytest.mark.netns
@pytest.mark.parametrize(
    "src,dst,proto,size,layer",
    [
        ("198.51.100.1", "203.0.113.9", "udp", 64, UDP),
        ("198.51.100.1", "203.0.113.9", "tcp-syn", 64, TCP),
        ("198.51.100.1", "203.0.113.9", "icmp", 100, ICMP),
        ("2001:db8::1", "2001:db8:1::9", "udp", 78, UDP),
        ("2001:db8::1", "2001:db8:1::9", "tcp-syn", 78, TCP),
        ("2001:db8::1", "2001:db8:1::9", "icmp", 100, ICMPv6EchoRequest),
    ],
)
def test_gen_frames_parse_cleanly(tmp_path, src, dst, proto, size, layer):
    if os.geteuid() != 0:
        pytest.fail("needs root (network namespaces), as in CI")
    with Lab("vg") as lab:
        a_ns, b_ns = lab.netns("a"), lab.netns("b")
        a, b = lab.veth(a_ns, b_ns, disable_ipv6=(True, True))
        with entered(b_ns):
            rx = PacketSocket(b, tx_frames=0)
        try:
            out = lab.run(
                a_ns,
                [
                    sys.executable,
                    "-m",
                    "vecroute.cli",
                    "gen",
                    a,
                    "--src",
                    src,
                    "--dst",
                    dst,
                    "--dst-mac",
                    "02:00:00:00:00:01",
                    "--proto",
                    proto,
                    "--size",
                    str(size),
                    "--count",
                    "600",
                    "--flows",
                    "10",
                ],
            )
            assert re.match(
                rf"OK: \d+\(c\d+\+d\d+\) usec, 600 \({size}byte,0frags\)\n  \d+pps "
                r"\d+Mb/sec \(\d+bps\) errors: 0",
                out,
            ), out
            batch = PacketBatch(1024)
            got: list[bytes] = []
            deadline = time.monotonic() + 5
            while len(got) < 600 and time.monotonic() < deadline:
                rx.wait(100)
                n = rx.recv_batch(batch.buf, batch.meta, batch.ts, 0, 1024, 0)
                got += [batch.frame(i) for i in range(n)]
        finally:
            rx.close()
    assert len(got) == 600
    ports = set()
    for raw in got:
        p = Ether(raw)
        assert len(raw) == size and p.dst == "02:00:00:00:00:01"
        assert p.haslayer(layer), p.summary()
        assert _checksums_ok(p), p.summary()
        if layer in (UDP, TCP):
            ports.add(p[layer].sport)
    if layer in (UDP, TCP):
        assert len(ports) == 10


def test_gen_errors_are_one_line():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vecroute.cli",
            "gen",
            "lo",
            "--src",
            "192.0.2.1",
            "--dst",
            "2001:db8::1",
            "--dst-mac",
            "02:00:00:00:00:01",
            "--count",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "same IP version" in r.stderr and "Traceback" not in r.stderr
