"""Differential tests: the Linux kernel, configured from the same config, is the reference.

Each input goes into a Linux router in a namespace and through ``vecroute replay``; the two
outputs are reduced to per-input summaries and compared (tests/linux_reference.py). A
difference fails unless a row of linux_reference.EXPECTED explains it; the failure names
the input (label, receiving interface, scapy summary, bytes) and both summaries.

A bounded corpus: the hand-picked cases of tests/linux_corpus.py (every category at least
once) and a derandomized hypothesis sample. ``python -m bench.linux_differential`` runs a
larger one and prints every difference.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from linux_corpus import CONFIG, REDIRECTS_KEY, generate, handpicked
from linux_reference import (
    DROPPED,
    Case,
    Diff,
    LinuxRouter,
    classify,
    compare,
    render_expected_table,
    require_root,
    summarize,
    vecroute_run,
)
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import Ether

from vecroute.control.config import parse_config

pytestmark = pytest.mark.netns

GENERATED = 300  # hypothesis examples per run (derandomized: the same every run)
DOC = Path(__file__).resolve().parents[1] / "docs" / "linux-differences.md"
HANDPICKED = handpicked()


@pytest.fixture(scope="module")
def linux():
    require_root()
    with LinuxRouter(CONFIG) as lr:
        yield lr


def run_both(linux: LinuxRouter, cases: list[Case], workdir: Path) -> list[Diff]:
    lin = linux.run(cases)
    assert linux.lost_markers == 0, f"{linux.lost_markers} marker replies never came back"
    return compare(CONFIG, cases, lin, vecroute_run(CONFIG, cases, workdir))


def unexpected(diffs: list[Diff]) -> list[Diff]:
    return [d for d in diffs if classify(d) is None]


@pytest.fixture(scope="module")
def handpicked_diffs(linux, tmp_path_factory) -> dict[str, Diff]:
    diffs = run_both(linux, HANDPICKED, tmp_path_factory.mktemp("handpicked"))
    return {d.case.label: d for d in diffs}


def test_reference_router_works(linux):
    """The harness itself: Linux forwards, answers and errs as a router should, so that
    'no difference' means something."""
    cfg = parse_config(CONFIG)
    frame = Ether(dst="02:00:00:00:00:01", src="02:00:00:00:aa:10")
    cases = [
        Case("fwd", "eth0", bytes(frame / IP(src="198.51.100.10", dst="203.0.113.5") / UDP())),
        Case("ttl", "eth0", bytes(frame / IP(src="198.51.100.10", dst="203.0.113.5", ttl=1)
                                  / UDP())),
    ]
    fwd, ttl = (summarize(cfg, c, linux.send(c)) for c in cases)
    assert fwd[0].startswith("eth1 fwd ttl=63 "), fwd
    assert ttl[0].startswith("eth0 icmp4 11/0 src=198.51.100.254 "), ttl


def test_labels_are_unique():
    labels = [c.label for c in HANDPICKED]
    assert len(labels) == len(set(labels))


@pytest.mark.parametrize("label", [c.label for c in HANDPICKED])
def test_handpicked(handpicked_diffs, label):
    d = handpicked_diffs.get(label)
    if d is not None and classify(d) is None:
        pytest.fail(f"unexpected difference with Linux: {d.line()}", pytrace=False)


def test_generated_corpus(linux, tmp_path):
    cases = generate(GENERATED)
    bad = unexpected(run_both(linux, cases, tmp_path))
    if bad:
        pytest.fail(f"{len(bad)} of {len(cases)} generated inputs differ from Linux:\n"
                    + "\n".join(d.line() for d in bad), pytrace=False)


def test_expected_rows_are_narrow():
    """A row must not explain an input both routers drop, nor a made-up difference."""
    for c in HANDPICKED[:5]:
        d = Diff(c, DROPPED, ("eth9 nothing",))
        assert classify(d) is None, (classify(d), c.label)


def test_docs_carry_the_expected_table():
    text = DOC.read_text()
    m = re.search(r"<!-- expected:begin -->\n(.*?)<!-- expected:end -->", text, re.S)
    assert m, f"{DOC}: no <!-- expected:begin --> ... <!-- expected:end --> block"
    assert m.group(1) == render_expected_table(), (
        f"{DOC} is out of step with linux_reference.EXPECTED: run "
        "python -m bench.linux_differential --update-docs"
    )


def test_normaliser_sees_what_matters():
    """The summary changes with the TTL, the interface, the next-hop MAC, the payload and an
    ICMP error's source; it does not change with the IP id or checksums."""
    cfg = parse_config(CONFIG)
    inp = IP(src="198.51.100.10", dst="203.0.113.5", ttl=64, id=1) / UDP() / b"data"
    case = Case("x", "eth0", bytes(Ether(dst="02:00:00:00:00:01") / inp))

    def out(ifname="eth1", dst="02:00:00:00:bb:02", **kw) -> str:
        p = inp.copy()
        p.ttl = 63
        for k, v in kw.items():
            setattr(p[UDP] if k == "sport" else p, k, v)
        frame = bytes(Ether(dst=dst, src="02:00:00:00:00:02") / p)
        return summarize(cfg, case, [(ifname, frame)])[0]

    base = out()
    assert base.startswith("eth1 fwd ttl=63 len=32 dmac=02:00:00:00:bb:02 "), base
    assert out(id=999) == base and out(chksum=0x1234) == base
    assert out(ttl=62) != base and out(ifname="eth3") != base
    assert out(dst="02:00:00:00:bb:03") != base and out(sport=7) != base
    err = Ether(src="02:00:00:00:00:01") / IP(src="198.51.100.254", dst="198.51.100.10") / ICMP(
        type=11, code=0) / bytes(inp)
    other = err.copy()
    other[IP].src = "192.0.2.1"
    assert summarize(cfg, case, [("eth0", bytes(err))]) != summarize(
        cfg, case, [("eth0", bytes(other))])
    assert "quote=32" in summarize(cfg, case, [("eth0", bytes(err))])[0]


def test_ipv4_redirect(tmp_path):
    """A packet that leaves by the interface it came in on, towards a next hop on its
    source's subnet: with redirects on (where vecroute has the key), both routers forward
    it and send the same host redirect; without the key neither sends one. A fresh Linux
    router, because Linux backs off per source after its first redirect."""
    require_root()
    config = copy.deepcopy(CONFIG)
    for itf in config["interfaces"]:
        if REDIRECTS_KEY:
            itf["redirects"] = True
    host = "02:00:00:00:bb:03"  # a second host on eth1, whose better next hop is N1
    config["neighbors"].append({"ip": "192.0.2.3", "mac": host, "interface": "eth1"})
    frame = Ether(dst="02:00:00:00:00:02", src=host) / IP(src="192.0.2.3", dst="203.0.113.5")
    case = Case("v4-redirect", "eth1", bytes(frame / UDP(sport=1, dport=2)))
    with LinuxRouter(config) as lr:
        lin = lr.run([case])
    diffs = compare(config, [case], lin, vecroute_run(config, [case], tmp_path))
    assert not unexpected(diffs), diffs[0].line()
    got = summarize(parse_config(config), case, lin[0])
    assert any(" fwd " in x for x in got), got
    assert any(" icmp4 5/1 " in x and " gw=192.0.2.2 " in x for x in got) == REDIRECTS_KEY, got
