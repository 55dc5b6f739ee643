"""Configuration validation and ``vecroute check``: good configs pass, every bad one gives
exactly one line naming the file, the key and the problem, exit status 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from vecroute.cli import main
from vecroute.config_types import ConfigError
from vecroute.control.config import load_config, parse_config

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

BASE = """\
[[interfaces]]
name = "eth0"
mac = "02:00:00:00:00:01"
addresses = ["198.51.100.254/24", "2001:db8:1::1/64"]

[[interfaces]]
name = "eth1"
mac = "02:00:00:00:00:02"
addresses = ["192.0.2.1/26", "2001:db8:2::1/64"]
mtu = 1400
"""

GOOD_EXTRA = """
[[routes]]
prefix = "203.0.113.0/25"
via = "192.0.2.2"

[[routes]]
prefix = "203.0.113.128/25"
via = ["192.0.2.2", "192.0.2.3"]
weights = [1, 3]

[[routes]]
prefix = "2001:db8:100::/48"
via = "2001:db8:2::2"

[[routes]]
prefix = "198.18.0.0/15"
blackhole = true

[[routes]]
prefix = "2001:db8:200::/48"
dev = "eth1"

[[neighbors]]
ip = "192.0.2.2"
mac = "02:00:00:00:bb:02"
interface = "eth1"

[icmp]
rate = 100
burst = 10
tcp_reset_rate = 20

[router]
vector_size = 128
"""


def run_check(tmp_path: Path, text: str, name: str = "router.toml"):
    f = tmp_path / name
    f.write_text(text)
    res = CliRunner().invoke(main, ["check", str(f)])
    return f, res


def test_good_config(tmp_path: Path) -> None:
    f, res = run_check(tmp_path, BASE + GOOD_EXTRA)
    assert res.exit_code == 0, res.output
    assert "ok" in res.stdout and str(f) in res.stdout
    cfg = load_config(f)
    assert [i.name for i in cfg.interfaces] == ["eth0", "eth1"]
    assert cfg.interfaces[1].mtu == 1400
    assert cfg.routes[1].weights == [1, 3] and len(cfg.routes[1].via) == 2
    assert cfg.routes[3].blackhole and cfg.routes[4].dev == "eth1"
    assert (cfg.icmp.rate, cfg.icmp.burst, cfg.router.vector_size) == (100, 10, 128)
    assert (cfg.icmp.tcp_reset_rate, cfg.icmp.tcp_reset_burst) == (20, 50)


def test_demo_config() -> None:
    res = CliRunner().invoke(main, ["check", str(EXAMPLES / "demo.toml")])
    assert res.exit_code == 0, res.output


BAD = [
    # (appended text, key that must be named, words of the problem)
    ("bogus = 1\n", "bogus", "unknown key"),
    (
        '[[routes]]\nprefix = "203.0.113.0/24"\nvia = "192.0.2.2"\ncolour = "red"\n',
        "routes[0].colour",
        "unknown key",
    ),
    ("[icmp]\nrate = 5\nburts = 3\n", "icmp.burts", "unknown key"),
    (
        '[[routes]]\nprefix = "203.0.113.0/33"\nvia = "192.0.2.2"\n',
        "routes[0].prefix",
        "not a prefix",
    ),
    ('[[routes]]\nprefix = "not-a-net"\nvia = "192.0.2.2"\n', "routes[0].prefix", "not a prefix"),
    (
        '[[routes]]\nprefix = "203.0.113.0/24"\nvia = "192.0.2.300"\n',
        "routes[0].via",
        "not an IPv4 or IPv6 address",
    ),
    (
        '[[routes]]\nprefix = "203.0.113.0/24"\nvia = [5]\n',
        "routes[0].via",
        "not an IPv4 or IPv6 address",
    ),
    ('[[routes]]\nprefix = "203.0.113.0/24"\nvia = "2001:db8:2::9"\n', "routes[0].via", "not IPv4"),
    (
        '[[routes]]\nprefix = "203.0.113.0/24"\nvia = "10.9.9.9"\n',
        "routes[0].via",
        "not on a connected subnet",
    ),
    (
        '[[routes]]\nprefix = "2001:db8:9::/48"\nvia = "2001:db8:77::1"\n',
        "routes[0].via",
        "not on a connected subnet",
    ),
    ('[[routes]]\nprefix = "203.0.113.0/24"\n', "routes[0].via", "needs via"),
    (
        '[[routes]]\nprefix = "203.0.113.0/24"\ndev = "eth7"\n',
        "routes[0].dev",
        "no interface named",
    ),
    (
        '[[routes]]\nprefix = "203.0.113.0/24"\nvia = ["192.0.2.2", "192.0.2.3"]\nweights = [1]\n',
        "routes[0].weights",
        "weight",
    ),
    (
        '[[routes]]\nprefix = "203.0.113.0/24"\nvia = ["192.0.2.2", "192.0.2.3"]\n'
        "weights = [64, 64]\n",
        "routes[0].weights",
        "at most 64",
    ),
    (
        '[[neighbors]]\nip = "192.0.2.2"\nmac = "02:00:00:00:bb"\ninterface = "eth1"\n',
        "neighbors[0].mac",
        "not a MAC",
    ),
    (
        '[[neighbors]]\nip = "192.0.2.2"\nmac = "02:00:00:00:bb:zz"\ninterface = "eth1"\n',
        "neighbors[0].mac",
        "not a MAC",
    ),
    (
        '[[neighbors]]\nip = "192.0.2.2"\nmac = "02:00:00:00:bb:02"\ninterface = "eth9"\n',
        "neighbors[0].interface",
        "no interface named",
    ),
    (
        '[[neighbors]]\nip = "192.0.2.2"\nmac = "02:00:00:00:bb:02"\n',
        "neighbors[0].interface",
        "missing",
    ),
    (
        '[[neighbors]]\nip = "nope"\nmac = "02:00:00:00:bb:02"\ninterface = "eth1"\n',
        "neighbors[0].ip",
        "not an IPv4 or IPv6 address",
    ),
    ("[icmp]\nrate = -1\n", "icmp.rate", "out of range"),
    ("[icmp]\ntcp_reset_burst = -1\n", "icmp.tcp_reset_burst", "out of range"),
    ('[router]\nvector_size = "big"\n', "router.vector_size", "expected int"),
]


@pytest.mark.parametrize("extra,key,problem", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_config(tmp_path: Path, extra: str, key: str, problem: str) -> None:
    f, res = run_check(tmp_path, BASE + extra)
    assert_one_line_error(res, f, key, problem)


BAD_INTERFACES = [
    ('[[interfaces]]\nname = "eth0"\nmac = "02:00:00:00:00"\n', "interfaces[0].mac", "not a MAC"),
    ('[[interfaces]]\nname = "eth0"\nmac = 5\n', "interfaces[0].mac", "not a MAC"),
    ('[[interfaces]]\nmac = "02:00:00:00:00:01"\n', "interfaces[0].name", "missing"),
    (
        '[[interfaces]]\nname = "eth0"\naddresses = ["198.51.100.1/33"]\n',
        "interfaces[0].addresses",
        "not an address",
    ),
    (
        '[[interfaces]]\nname = "eth0"\naddresses = [7]\n',
        "interfaces[0].addresses",
        "not an address",
    ),
    (
        '[[interfaces]]\nname = "eth0"\naddresses = "198.51.100.1/24"\n',
        "interfaces[0].addresses",
        "expected list",
    ),
    ('[[interfaces]]\nname = "eth0"\nmtu = 10\n', "interfaces[0].mtu", "out of range"),
    ('[[interfaces]]\nname = "eth0"\nmtu = true\n', "interfaces[0].mtu", "expected an integer"),
    (
        '[[interfaces]]\nname = "eth0"\naddresses = ["2001:db8::1/64"]\nmtu = 1000\n',
        "interfaces[0].mtu",
        "IPv6 minimum",
    ),
    (
        '[[interfaces]]\nname = "eth0"\n\n[[interfaces]]\nname = "eth0"\n',
        "interfaces[1].name",
        "defined twice",
    ),
    (
        '[[interfaces]]\nname = "an-interface-name-too-long"\n',
        "interfaces[0].name",
        "not a valid interface name",
    ),
    ('[[interfaces]]\nname = "eth0"\nspeed = 10\n', "interfaces[0].speed", "unknown key"),
    ("[icmp]\nrate = 1\n", "interfaces", "at least one"),
    ('[[interfaces]]\nname = "eth0"\n', "interfaces[0].mac", "required"),  # no device here
    ('routes = 5\n[[interfaces]]\nname = "eth0"\n', "routes", "expected an array"),
    ('interfaces = ["eth0"]\n', "interfaces[0]", "expected a table"),
]


@pytest.mark.parametrize(
    "text,key,problem", BAD_INTERFACES, ids=[b[1] + ":" + b[2] for b in BAD_INTERFACES]
)
def test_bad_interfaces(tmp_path: Path, text: str, key: str, problem: str) -> None:
    f, res = run_check(tmp_path, text)
    assert_one_line_error(res, f, key, problem)


@pytest.mark.parametrize(
    "text",
    [
        '[[interfaces]\nname = "eth0"\n',
        "name = \n",
        '[[interfaces]]\nname = "eth0\n',
        "\x00\x01\x02 binary",
        "a = 1\na = 2\n",
    ],
    ids=["bracket", "no-value", "unterminated", "binary", "duplicate-key"],
)
def test_bad_toml(tmp_path: Path, text: str) -> None:
    f, res = run_check(tmp_path, text)
    assert_one_line_error(res, f, None, "invalid TOML")


def test_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "nope.toml"
    res = CliRunner().invoke(main, ["check", str(f)])
    assert_one_line_error(res, f, None, "cannot read")


def assert_one_line_error(res, f: Path, key: str | None, problem: str) -> None:
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert isinstance(res.exception, SystemExit), res.exception  # no traceback
    err = res.stderr
    assert "Traceback" not in res.output
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("vecroute: ")
    assert str(f) in line, "names the file"
    if key is not None:
        assert key in line, f"names the key {key}: {line}"
    assert problem in line, f"says what is wrong ({problem}): {line}"
    assert res.stdout == ""


def test_parse_config_errors_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"^x\.toml: interfaces\[0\]\.mtu: "):
        parse_config({"interfaces": [{"name": "a", "mtu": 1}]}, "x.toml")


def test_check_subprocess_exit_codes(tmp_path: Path) -> None:
    """The real entry point: exit 2 and one stderr line, no traceback."""
    bad = tmp_path / "bad.toml"
    bad.write_text(BASE + '[[routes]]\nprefix = "203.0.113.0/24"\nvia = "10.1.1.1"\n')
    good = tmp_path / "good.toml"
    good.write_text(BASE + GOOD_EXTRA)
    cmd = [sys.executable, "-m", "vecroute.cli", "check"]
    p = subprocess.run([*cmd, str(bad)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert str(bad) in p.stderr and "routes[0]" in p.stderr
    p = subprocess.run([*cmd, str(good)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


# --- every bad input class is one line (issue 12, findings 4 and 8) ----------------------------

FW = '\n[firewall]\ndefault = "allow"\n'
BAD_INPUTS = [
    # (config bytes, key that must be named or None, words of the problem)
    (BASE.encode() + b"# caf\xe9\n", "line 11", "not UTF-8"),
    (b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n", None, "nested too deep"),
    ((BASE + "[icmp]\nrate = " + "9" * 5000 + "\n").encode(), None, "invalid TOML"),
    ((BASE + FW + 'rules = ["\u00b2 allow ip from any to any"]\n').encode(),
     "firewall.rules[0]", "expected an action"),
    ((BASE + FW + 'rules = ["100 allow tcp from any ' + "9" * 5000 + ' to any"]\n').encode(),
     "firewall.rules[0]", "out of range"),
    ((BASE + "[srv6]\nlocalsids = 5\n").encode(), "srv6.localsids", "expected an array"),
    ((BASE + '[srv6]\npolicies = "x"\n').encode(), "srv6.policies", "expected an array"),
    ((BASE + "[srv6]\nsteering = {}\n").encode(), "srv6.steering", "expected an array"),
    ((BASE + '[srv6]\nencap_source = "2001:db8::1"\n[[srv6.policies]]\nbsid = "2001:db8:b::1"\n'
             'segments = ["192.0.2.7"]\n').encode(), "srv6.policies[0].segments",
     "not an IPv6 address"),
    ((BASE + '[[routes]]\nprefix = "fe80::%eth0/64"\ndev = "eth0"\n').encode(),
     "routes[0].prefix", "not a prefix"),
    ((BASE + '[[routes]]\nprefix = "2001:db8:9::/48"\nvia = "fe80::1%eth1"\n').encode(),
     "routes[0].via", "not an IPv4 or IPv6 address"),
    (b'[[interfaces]]\nname = "a\\u0000b"\nmac = "02:00:00:00:00:01"\n', "interfaces[0].name",
     "not a valid interface name"),
    (b'[[interfaces]]\nname = "eth0"\nmac = "02:00:00:00:00:01\\n"\n', "interfaces[0].mac",
     "not a MAC"),
    (b'[[interfaces]]\nname = "eth0"\nmac = "01:00:5e:00:00:01"\n', "interfaces[0].mac",
     "not a unicast MAC"),
    ((BASE + '[control]\nsocket = "/run/x\\u0000y"\n').encode(), "control.socket", "no NUL"),
    ((BASE + '[control]\nsocket = "/' + "s" * 200 + '"\n').encode(), "control.socket",
     "1..107 bytes"),
    ((BASE + FW + '[[firewall.tables]]\nname = "caf\u00e9"\n').encode(),
     "firewall.tables[0].name", "not a table name"),
]


@pytest.mark.parametrize("data,key,problem", BAD_INPUTS,
                         ids=[f"{k}:{p}" for _, k, p in BAD_INPUTS])
def test_bad_inputs_are_one_line(tmp_path: Path, data: bytes, key: str | None,
                                 problem: str) -> None:
    f = tmp_path / "router.toml"
    f.write_bytes(data)
    assert_one_line_error(CliRunner().invoke(main, ["check", str(f)]), f, key, problem)


def test_more_tables_than_the_limit_is_one_line(tmp_path: Path) -> None:
    from vecroute.fib.fib import MAX_TABLES

    routes = "".join(f'[[routes]]\nprefix = "203.0.113.0/24"\nblackhole = true\ntable = {k}\n'
                     for k in range(1, MAX_TABLES + 1))
    f, res = run_check(tmp_path, BASE + routes)
    assert_one_line_error(res, f, f"routes[{MAX_TABLES - 1}]", "too many tables")


SECRET = "hunter2-do-not-echo"


@pytest.mark.parametrize("kind", ["addr", "number", "iface"])
def test_table_file_errors_never_echo_the_file(tmp_path: Path, kind: str) -> None:
    # a table file may be any file at all (/etc/shadow): its place, never its content
    (tmp_path / "t.txt").write_text(f"{SECRET}:$6$x:1 2 3\n")
    f, res = run_check(tmp_path, BASE + FW + f'[[firewall.tables]]\nname = "t"\ntype = "{kind}"'
                                             '\nfile = "t.txt"\n')
    assert_one_line_error(res, f, "t.txt:1", "")
    assert SECRET not in res.output


def test_rules_file_errors_never_echo_the_file(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text(f"allow ip from any to any\n{SECRET}:$6$x\n")
    f, res = run_check(tmp_path, BASE + FW + 'rules_file = "r.txt"\n')
    assert_one_line_error(res, f, "r.txt:2", "word 1")
    assert SECRET not in res.output
    (tmp_path / "r.txt").write_bytes(f"allow ip from any to any # {SECRET}\xe9".encode("latin-1"))
    f, res = run_check(tmp_path, BASE + FW + 'rules_file = "r.txt"\n')
    assert_one_line_error(res, f, "rules_file", "not UTF-8")
    assert SECRET not in res.output


def test_table_file_size_limit(tmp_path: Path, monkeypatch) -> None:
    import vecroute.firewall.config as fwc

    monkeypatch.setattr(fwc, "MAX_TABLE_FILE", 100)
    (tmp_path / "t.txt").write_text("192.0.2.0/24\n" * 20)
    f, res = run_check(tmp_path, BASE + FW + '[[firewall.tables]]\nname = "t"\nfile = "t.txt"\n')
    assert_one_line_error(res, f, "firewall.tables[0].file", "larger than 100 bytes")


def test_special_files_are_refused_without_hanging(tmp_path: Path) -> None:
    """A FIFO as a table file, a rules file or the config itself blocked `check` forever
    (open() of a FIFO waits for a writer); /dev/zero would never end. One line, exit 2."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cmd = [sys.executable, "-m", "vecroute.cli", "check"]
    cases = [
        (fifo, "cannot read"),
        (BASE + FW + '[[firewall.tables]]\nname = "t"\nfile = "fifo"\n', "not a regular file"),
        (BASE + FW + 'rules_file = "fifo"\n', "not a regular file"),
        (BASE + FW + '[[firewall.tables]]\nname = "t"\nfile = "/dev/zero"\n',
         "not a regular file"),
    ]
    for k, (case, problem) in enumerate(cases):
        if isinstance(case, Path):
            f = case
        else:
            f = tmp_path / f"c{k}.toml"
            f.write_text(case)
        p = subprocess.run([*cmd, str(f)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (case, p.stderr)
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
        assert problem in p.stderr and str(f) in p.stderr, p.stderr
