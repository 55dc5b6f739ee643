"""The control protocol fuzzed against a live `vecroute run` (issue 12, finding 3).

hypothesis sends requests made of the real command vocabulary mixed with hostile words
(huge and negative numbers, other scripts' digits, scope ids, NUL, newlines, 4096-character
words), random JSON documents, raw bytes, and huge or deeply nested values. Every request
must get exactly one reply: ``ok`` or one error line that is not an internal error (an
internal error is a field nobody validated). Afterwards the router still forwards a ping,
still answers, and never logged a traceback.

The vocabulary avoids every address on the ping's path (198.51.100.0/24, 203.0.113.0/24,
2001:db8:1::/64, 2001:db8:2::/64) and every firewall action that drops, so whatever the
fuzz manages to add cannot be what breaks the final ping.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ctl_server import read_all

from vecroute.io.netns import Lab
from vecroute.lab import H2_V4, H2_V6, build, start_router

pytestmark = pytest.mark.netns

COMMANDS = ["show", "route", "neighbor", "neigh", "clear", "sr", "fw"]
WORDS = [
    # show
    "interfaces", "routes", "neighbors", "stats", "runtime", "errors", "all", "counters",
    # route / neighbor
    "add", "del", "delete", "via", "dev", "table", "weight", "blackhole", "lladdr",
    # sr
    "localsid", "policy", "steer", "behavior", "End", "End.X", "End.DT6", "End.DX4", "nh",
    "flavor", "PSP", "fib-table", "bsid", "segments", "source", "mode", "encap", "encap.red",
    "prefix", "address",
    # fw (no dropping action: see the module docstring)
    "states", "zero", "tables", "create", "addr", "number", "iface", "flush", "list", "swap",
    "allow", "count", "ip", "ip6", "tcp", "udp", "from", "any", "to", "me", "keep-state",
    "table(t)", "t", "u", "100", "65535",
    # values
    "192.0.2.0/24", "192.0.2.1", "192.0.2.77", "0.0.0.0/0", "2001:db8:ff::/64",
    "2001:db8:ff::1", "2001:db8:ee::1", "::/0", "02:00:00:00:00:aa", "ff:ff:ff:ff:ff:ff",
    "0", "1", "7", "64", "65", "-1", "4294967295", "4294967296", "9" * 30, "1e9", "0x10",
    " 7", "1_0", "+7", "\u00b2", "\u0661\u0662", "fe80::1%eth0", "fe80::%p0/64",
    "192.0.2.0/33", "2001:db8::/129", "2001:db8:ff::1,192.0.2.7", ",", "",
    "\x00", "a\nb", "caf\u00e9", "\u202e", "\U0001f600", "@p0", "@p1", "eth99",
]
HOSTILE = st.sampled_from(["9" * 4096, "[" * 4000, "x" * 4096, "\\" * 2000, "\ud800"])
WORD = st.one_of(
    st.sampled_from(WORDS), st.sampled_from(COMMANDS), HOSTILE,
    st.text(max_size=12), st.integers().map(str),
)
RANDOM_ARGV = st.tuples(st.sampled_from(COMMANDS), st.lists(WORD, max_size=12)).map(
    lambda t: [t[0], *t[1]]
)


def field(*good: str) -> st.SearchStrategy[str]:
    """A command's field: mostly one of its good values, else anything hostile."""
    return st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(good),
                     st.sampled_from(WORDS), HOSTILE, st.text(max_size=8),
                     st.integers().map(str))


def opt(*words: st.SearchStrategy[str] | str) -> st.SearchStrategy[list[str]]:
    parts = [st.just(w) if isinstance(w, str) else w for w in words]
    return st.one_of(st.just([]), st.tuples(*parts).map(list))


def cmd(*parts) -> st.SearchStrategy[list[str]]:
    """Words and optional groups, flattened into one argv."""
    items = [st.just([p]) if isinstance(p, str) else p for p in parts]
    return st.tuples(*items).map(lambda xs: [w for x in xs for w in x])


def one(s: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    return s.map(lambda w: [w])


PREFIX = field("192.0.2.0/24", "192.0.2.128/25", "0.0.0.0/0", "2001:db8:ff::/64", "::/0",
               "2001:db8:ff::1/128")
ADDR = field("192.0.2.1", "192.0.2.77", "2001:db8:ff::1", "2001:db8:ee::1", "2001:db8:ff::b")
V6 = field("2001:db8:ff::1", "2001:db8:ee::1", "2001:db8:ee::2", "2001:db8:ff::b")
NUM = field("0", "1", "7", "64", "100", "4294967295")
DEV = field("@p0", "@p1")
MAC = field("02:00:00:00:00:aa", "02:00:00:00:00:bb")
SEGS = st.lists(V6, min_size=1, max_size=18).map(",".join) | V6
TNAME = field("t", "u", "n")
# no action that drops (see the module docstring)
RULE = cmd(opt(NUM), one(field("allow", "count")), one(field("ip", "ip6", "tcp", "udp")),
           "from", one(field("any", "me", "192.0.2.0/24", "table(t)")), "to",
           one(field("any", "me6", "2001:db8:ff::/64")), opt(field("22", "1000-2000")),
           opt(field("keep-state", "in", "out")))
ARGV = st.one_of(
    RANDOM_ARGV,
    cmd("show", one(field("interfaces", "routes", "neighbors", "runtime", "errors")),
        opt(PREFIX), opt("table", NUM)),
    cmd("route", "add", one(PREFIX), opt("via", ADDR), opt("weight", NUM), opt("via", ADDR),
        opt("dev", DEV), opt("table", NUM), opt("blackhole")),
    cmd("route", one(field("del", "delete")), one(PREFIX), opt("table", NUM)),
    cmd("neighbor", one(field("add", "del")), one(ADDR), opt("lladdr", MAC), opt("dev", DEV)),
    cmd("sr", "localsid", one(field("add", "del")), one(PREFIX), opt("behavior",
        field("End", "End.X", "End.T", "End.DX4", "End.DX6", "End.DT4", "End.DT6",
              "End.DT46")), opt("nh", ADDR), opt("table", NUM), opt("flavor", field("PSP")),
        opt("fib-table", NUM)),
    cmd("sr", "policy", one(field("add", "del")), "bsid", one(V6), opt("segments", SEGS),
        opt("source", V6), opt("mode", field("encap", "encap.red")), opt("weight", NUM)),
    cmd("sr", "steer", one(field("add", "del")), one(PREFIX), opt("via", "bsid", V6),
        opt("table", NUM)),
    cmd("sr", one(field("localsid", "policy", "steer")), "show"),
    cmd("fw", "add", RULE),
    cmd("fw", one(field("delete", "zero")), one(NUM)),
    cmd("fw", "table", one(TNAME), "create", one(field("addr", "number", "iface"))),
    cmd("fw", "table", one(TNAME), one(field("add", "delete")),
        one(field("192.0.2.9", "2001:db8:ff::9 7", "22", "@p0", "192.0.2.0/24 3"))),
    cmd("fw", "table", one(TNAME), one(field("flush", "list", "swap")), opt(TNAME)),
    cmd("fw", one(field("show", "states", "counters", "tables"))),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                               max_size=4),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    fw = ('\n[firewall]\ndefault = "allow"\nrules = ["100 allow ip from any to any"]\n'
          '[srv6]\nencap_source = "2001:db8:2::1"\n')
    with Lab("vz") as lab:
        t = build(lab, tmp_path_factory.mktemp("fuzz"), extra_config=fw)
        start_router(t)
        yield t
        if t.router and t.router.poll() is not None:
            print(t.log.read_text()[-3000:])


def exchange(path: str, payload: bytes) -> dict:
    """One raw request; the reply must be one JSON object and a newline."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(20)
        s.connect(path)
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before reading all of it (too large): the reply is there
        data = read_all(s)
    assert data.endswith(b"\n") and data.count(b"\n") == 1, data[:300]
    return json.loads(data)


def check(reply: dict, what) -> None:
    assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), (what, reply)
    if not reply["ok"]:
        err = reply["error"]
        assert isinstance(err, str) and err and "\n" not in err, (what, reply)
        assert "internal error" not in err, (what, err)  # a field nobody validated
        assert len(err) < 600, (what, err)


def test_fuzzed_requests_never_stop_the_router(topo):
    ports = {"@p0": topo.ports[0], "@p1": topo.ports[1]}

    @settings(max_examples=6000, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(ARGV)
    def words(argv):
        argv = [ports.get(w, w) for w in argv]
        line = json.dumps({"argv": argv}).encode() + b"\n"
        check(exchange(topo.socket, line), argv)

    @settings(max_examples=2000, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(JSON.map(lambda v: json.dumps(v).encode()),
                     JSON.map(lambda v: json.dumps({"argv": v}).encode()),
                     st.binary(max_size=200)))
    def documents(payload):
        check(exchange(topo.socket, payload.replace(b"\n", b" ") + b"\n"), payload[:100])

    words()
    documents()
    for payload in [
        b"[" * 60000 + b"\n",  # nested deeper than any parser's recursion
        b'{"argv": ' + b"[" * 30000 + b"]" * 30000 + b"}\n",
        b'{"argv": ["show"], "n": ' + b"9" * 60000 + b"}\n",  # int() of 60000 digits
        b'{"argv": ["route", "add", "192.0.2.0/24", "blackhole", "table", "'
        + b"9" * 4000 + b'"]}\n',
        b"x" * 200_000 + b"\n",  # more than the request limit
        json.dumps({"argv": ["show"] * 257}).encode() + b"\n",
        json.dumps({"argv": ["fw", "add", *(["allow"] * 255)]}).encode() + b"\n",
    ]:
        check(exchange(topo.socket, payload), payload[:60])

    assert topo.router.poll() is None, topo.log.read_text()[-3000:]
    for dst in (H2_V4, H2_V6):
        fam = ["-6"] if ":" in dst else []
        r = subprocess.run(["ip", "netns", "exec", topo.h1, "ping", *fam, "-c", "2", "-i", "0.2",
                            "-W", "3", dst], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    assert [i["name"] for i in topo.ctl("show", "interfaces")["data"]] == topo.ports
    assert topo.ctl("show", "errors")["ok"] and topo.ctl("fw", "show")["ok"]
    log = topo.log.read_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
