"""Regenerate the bundled demo captures (needs scapy, a test dependency).

    python examples/make_demo_traffic.py

The captures hold a mix that exercises every path of the router: forwarded IPv4/IPv6
flows (ECMP included), pings to the router, TTL expiry, no route, fragmentation and
frag-needed on the 576-byte link, an unresolved neighbour, ARP, and malformed frames.
"""

from pathlib import Path

from scapy.all import ARP, ICMP, IP, TCP, UDP, Ether, ICMPv6EchoRequest, IPv6, Raw, wrpcap

HERE = Path(__file__).parent
R0, R1 = "02:00:00:00:00:01", "02:00:00:00:00:02"
H0, N1 = "02:00:00:00:aa:10", "02:00:00:00:bb:01"
T0 = 1_700_000_000.0


def eth0_traffic() -> list:
    e = Ether(src=H0, dst=R0)
    pkts = []
    for n in range(40):  # UDP flows, some to the ECMP prefix
        dst = f"203.0.113.{(n % 4) * 40 + 5}"
        pkts.append(
            e / IP(src="198.51.100.10", dst=dst) / UDP(sport=10000 + n, dport=53) / Raw(b"q" * 18)
        )
    for n in range(10):
        pkts.append(
            e
            / IP(src="198.51.100.10", dst="203.0.113.7")
            / TCP(sport=40000 + n, dport=80, flags="S")
        )
        pkts.append(
            e
            / IPv6(src="2001:db8:1::10", dst=f"2001:db8:100::{n + 1}")
            / UDP(sport=5000 + n, dport=53)
            / Raw(b"v6")
        )
    pkts += [
        Ether(src=H0, dst="ff:ff:ff:ff:ff:ff")
        / ARP(op=1, hwsrc=H0, psrc="198.51.100.10", pdst="198.51.100.254"),
        e / IP(src="198.51.100.10", dst="198.51.100.254") / ICMP(id=1, seq=1) / Raw(b"ping"),
        e
        / IPv6(src="2001:db8:1::10", dst="2001:db8:1::1")
        / ICMPv6EchoRequest(id=1, seq=1, data=b"ping6"),
        e / IP(src="198.51.100.10", dst="203.0.113.9", ttl=1) / UDP(sport=33434, dport=33434),
        e
        / IPv6(src="2001:db8:1::10", dst="2001:db8:100::9", hlim=1)
        / UDP(sport=33434, dport=33434),
        e / IP(src="198.51.100.10", dst="203.0.113.200") / UDP(sport=1, dport=2),  # no route
        e / IPv6(src="2001:db8:1::10", dst="2001:db8:dead::1") / UDP(sport=1, dport=2),
        e
        / IP(src="198.51.100.10", dst="192.0.2.130", flags=0)
        / UDP(sport=7, dport=7)
        / Raw(b"F" * 1200),
        e
        / IP(src="198.51.100.10", dst="192.0.2.130", flags="DF")
        / UDP(sport=7, dport=7)
        / Raw(b"D" * 1200),
        e / IP(src="198.51.100.10", dst="192.0.2.30") / UDP(sport=9, dport=9),  # neighbour unknown
        e / IP(src="127.0.0.1", dst="203.0.113.9") / UDP(),  # martian source
        e / IP(src="198.51.100.10", dst="203.0.113.9", chksum=0x1234) / UDP(),  # bad checksum
        Ether(src=H0, dst="02:00:00:00:00:99") / IP(src="198.51.100.10", dst="203.0.113.9") / UDP(),
        Ether(src=H0, dst=R0, type=0x88B5) / Raw(b"experimental ethertype"),
    ]
    trunc = e / IP(src="198.51.100.10", dst="203.0.113.9") / UDP() / Raw(b"x" * 40)
    raw = bytes(trunc)[:30]
    pkts.append(Ether(raw))
    return pkts


def eth1_traffic() -> list:
    e = Ether(src=N1, dst=R1)
    return [
        e
        / IP(src="203.0.113.5", dst="198.51.100.10")
        / UDP(sport=53, dport=10000 + n)
        / Raw(b"a" * 18)
        for n in range(20)
    ]


def stamp(pkts: list, start: float, step: float) -> list:
    for n, p in enumerate(pkts):
        p.time = start + n * step
    return pkts


if __name__ == "__main__":
    wrpcap(str(HERE / "demo-eth0.pcap"), stamp(eth0_traffic(), T0, 0.001))
    wrpcap(str(HERE / "demo-eth1.pcap"), stamp(eth1_traffic(), T0 + 0.0005, 0.001))
    print("wrote", HERE / "demo-eth0.pcap", HERE / "demo-eth1.pcap")
