"""Rule syntax (every word), canonical text, errors with position and word, the [firewall]
configuration section, `ipfw show` rendering and the text commands."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vecroute.config_types import ConfigError
from vecroute.firewall.config import FirewallConfigError, parse_firewall_config
from vecroute.firewall.firewall import Firewall
from vecroute.firewall.keys import make_key
from vecroute.firewall.rules import (
    ACTION_WORDS,
    OPTION_WORDS,
    PROTO_WORDS,
    RuleError,
    parse_rule,
    parse_rules,
)
from vecroute.firewall.show import render_show

EVERY_WORD = [
    "100 allow tcp from any to any",
    "accept udp from any 53 to any",
    "pass icmp from any to any icmptypes 0,3,8",
    "permit ipv6-icmp from any to any icmp6types 128,129",
    "deny ip from 192.0.2.0/24 to any",
    "drop ip4 from 198.51.100.7 to any",
    "reject ip6 from 2001:db8::/32 to any",
    "unreach port udp from any to any 161",
    "unreach 13 udp from any to any 162",
    "unreach6 admin-prohib ip6 from any to any",
    "reset tcp from any to any 23",
    "count log ip from any to any",
    "skipto 1000 ip from any to any in",
    "skipto tablearg ip from table(t) to any",
    "check-state",
    "allow tcp from me to me6 22 setup keep-state",
    "allow tcp from any to any established",
    "allow tcp from any to any tcpflags syn,!ack,fin,!rst,psh,urg,ece,cwr",
    "deny ip from not { 10.0.0.0/8, 172.16.0.0/12 } to any out",
    "deny ip from 10.0.0.1,10.0.0.2 to any",
    "deny ip from { 10.0.0.1 or 10.0.0.2 } to any",
    "deny ip from table(t,3) to not table(t) via eth0",
    "allow ip from any to any recv eth1 xmit eth2",
    "allow ip from any to any recv table(ifs) xmit table(ifs,7)",
    "allow ip from any to any via any",
    "deny ip from any to any frag",
    "deny ip from any to any not frag ipversion 4",
    "deny ip from any to any ipttl 1,2-5",
    "allow 47 from any to any",
    "allow all from any to any",
    "allow ipv4 from any to any",
    "allow ipv6 from any to any",
    "allow icmp6 from any to any",
    "allow gre from any to any",
    "allow esp from any to any",
    "allow ah from any to any",
    "allow sctp from any 1-65535 to any 9",
    "allow ip from any to any lookup dst-port ports",
    "allow ip from any to any lookup src-port ports,2 lookup src-ip t lookup dst-ip t,1",
    "allow ip from any to any // a comment with words",
]


@pytest.mark.parametrize("text", EVERY_WORD)
def test_every_word_parses_and_round_trips(text):
    r = parse_rule(text)
    again = parse_rule(str(r))
    assert again == r
    assert str(again) == str(r)


def test_vocabulary_is_covered():
    words = " ".join(EVERY_WORD).replace(",", " ").split()
    for w in (
        list(ACTION_WORDS)
        + list(PROTO_WORDS)
        + list(OPTION_WORDS)
        + ["not", "log", "me", "me6", "any"]
    ):
        assert w in words, w


def test_parsed_fields():
    r = parse_rule(
        "300 allow tcp from not { 192.0.2.0/24, me } 22,1000-2000 to table(x,5) "
        "80 in recv eth0 tcpflags syn,!ack keep-state // hi"
    )
    assert (r.number, r.action, r.proto, r.keep_state, r.comment) == (300, "allow", 6, True, "hi")
    assert r.src.negate and [i.kind for i in r.src.items] == ["net", "me"]
    assert r.sport == ((22, 22), (1000, 2000)) and r.dport == ((80, 80),)
    assert r.dst.items[0].table == "x" and r.dst.items[0].value == 5
    assert [o.name for o in r.options] == ["in", "recv", "tcpflags"]
    assert r.options[2].args == (0x02, 0x10)
    assert parse_rule("deny ip from 10.1.2.3/8 to any").src.items[0].net == ipaddress.ip_network(
        "10.0.0.0/8"
    )
    assert parse_rule("reject ip from any to any").icmp_codes() == (1, 1)
    assert parse_rule("unreach port ip from any to any").icmp_codes() == (3, 4)
    assert parse_rule("unreach6 port ip6 from any to any").icmp_codes() == (3, 4)
    assert parse_rule("skipto tablearg ip from any to any").tablearg


@pytest.mark.parametrize(
    "text, word, index",
    [
        ("100 allow tcp fromm any to any", "fromm", 4),
        ("allow tcp from 1.2.3.400 to any", "1.2.3.400", 4),
        ("allow tcp from any to any 99999", "99999", 7),
        ("allow tcp from any to any 200-100", "200-100", 7),
        ("allow foo from any to any", "foo", 2),
        ("allow tcp from any to any bogus", "bogus", 7),
        ("allow tcp from { 1.2.3.4, x } to any", "x", 6),
        ("frobnicate ip from any to any", "frobnicate", 1),
        ("70000 allow ip from any to any", "70000", 1),
        ("skipto x ip from any to any", "x", 2),
        ("unreach nowhere ip from any to any", "nowhere", 2),
        ("allow tcp from any to any tcpflags syn,bogus", "syn,bogus", 8),
        ("allow tcp from any to any tcpflags syn,!syn", "syn,!syn", 8),
        ("allow ip from any to any ipversion 5", "5", 8),
        ("allow ip from table(a b) to any", "table(a b)", 4),
        ("allow ip from not any to any", "any", 5),
        ("allow ip from { any, 1.2.3.4 } to any", "any,", 5),
        ("allow ip from any to any lookup uid t", "uid", 8),
        ("allow ip from any to any icmptypes 300", "300", 8),
        ("check-state tcp", "tcp", 2),
    ],
)
def test_errors_name_the_word(text, word, index):
    with pytest.raises(RuleError) as e:
        parse_rule(text, "rules[3]")
    assert e.value.word == word and e.value.word_index == index
    msg = str(e.value)
    assert msg.startswith(f"rules[3]: word {index} {word!r}: ") and "\n" not in msg


@pytest.mark.parametrize(
    "text",
    [
        "",
        "allow tcp from any",
        "allow tcp from any to",
        "count ip from any to any keep-state",
        "skipto tablearg ip from any to any keep-state",
    ],
)
def test_errors_without_a_word(text):
    with pytest.raises(RuleError, match=r"^rules\[0\]: "):
        parse_rule(text, "rules[0]")


def test_auto_numbers_and_order():
    rules = parse_rules(
        [
            "allow ip from any to any",
            "# comment",
            "",
            "50 deny ip from any to any",
            "count ip from any to any",
        ]
    )
    assert [r.number for r in rules] == [100, 50, 200]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="abcdefinotrmpy0123456789.,/:{}()!- ", max_size=60))
def test_garbage_never_crashes_the_parser(text):
    try:
        r = parse_rule(text)
    except RuleError as e:
        assert "\n" not in str(e)
    else:
        assert parse_rule(str(r)) == r


# -- configuration ----------------------------------------------------------------------------


def test_config_full(tmp_path):
    (tmp_path / "rules.txt").write_text(
        "# extra\n500 deny ip from table(bad) to any\nallow ip from any to any\n"
    )
    (tmp_path / "bl.txt").write_text("198.51.100.0/24\n# c\n2001:db8:9::/48 9\n")
    cfg = parse_firewall_config(
        {
            "default": "allow",
            "rules": ["100 allow tcp from any to me 22", "count ip from any to any"],
            "rules_file": "rules.txt",
            "max_states": 5000,
            "lifetimes": {"syn": 5, "udp": 2.5},
            "tables": [
                {"name": "bad", "type": "addr", "entries": ["192.0.2.0/24 3"], "file": "bl.txt"},
                {"name": "ports", "type": "number", "entries": ["22 1"]},
                {"name": "ups", "type": "iface", "entries": ["eth0"]},
            ],
        },
        "r.toml",
        tmp_path,
    )
    assert cfg.default_allow and cfg.max_states == 5000
    assert [r.number for r in cfg.rules] == [100, 200, 500, 600]
    assert cfg.rule_places[2] == f"{tmp_path / 'rules.txt'}:2"
    assert cfg.lifetimes["syn"] == 5 and cfg.lifetimes["udp"] == 2.5
    assert cfg.lifetimes["established"] == 300
    fw = Firewall(cfg, ["eth0"], ["192.0.2.1"])
    assert fw.tables.count("bad") == 3 and fw.tables.lookup("bad", "2001:db8:9::1") == 9
    assert fw.rules[-1].action == "allow"


@pytest.mark.parametrize(
    "raw, msg",
    [
        ({"default": "maybe"}, "firewall.default: expected"),
        ({"bogus": 1}, "firewall.bogus: unknown key"),
        ({"max_states": 0}, "firewall.max_states: expected an integer"),
        ({"rules": "allow"}, "firewall.rules: expected an array"),
        (
            {"rules": ["allow ip from any to any", "allow ip frm any to any"]},
            "firewall.rules[1]: word 3 'frm': expected 'from'",
        ),
        (
            {"rules": ["allow ip from table(nope) to any"]},
            "firewall.rules[0]: word 4 'table(nope)': no table named 'nope'",
        ),
        (
            {
                "rules": ["allow ip from any to any recv table(t)"],
                "tables": [{"name": "t", "type": "addr"}],
            },
            "is a addr table, expected iface",
        ),
        ({"rules_file": "missing.txt"}, "firewall.rules_file: cannot read"),
        ({"tables": [{"name": "t", "type": "list"}]}, "firewall.tables[0].type: expected addr"),
        ({"tables": [{"name": "t"}, {"name": "t"}]}, "firewall.tables[1].name: table 't' defined"),
        (
            {"tables": [{"name": "t", "entries": ["192.0.2.0/24", "300.1.1.1"]}]},
            "firewall.tables[0].entries[1]: '300.1.1.1': not an address",
        ),
        (
            {"tables": [{"name": "t", "type": "number", "entries": ["x 1"]}]},
            "firewall.tables[0].entries[0]: 'x 1': key 'x' is not an integer",
        ),
        ({"tables": [{"name": "t", "file": "nope"}]}, "firewall.tables[0].file: cannot read"),
        ({"lifetimes": {"syn": -1}}, "firewall.lifetimes.syn: expected seconds"),
        ({"lifetimes": {"ack": 1}}, "firewall.lifetimes.ack: unknown lifetime"),
    ],
)
def test_config_errors_are_one_line(raw, msg, tmp_path):
    with pytest.raises(FirewallConfigError) as e:
        parse_firewall_config(raw, "r.toml", tmp_path)
    text = str(e.value)
    assert isinstance(e.value, ConfigError) and isinstance(e.value, ValueError)
    assert text.startswith("r.toml: ") and msg in text and "\n" not in text


def test_table_file_errors_name_the_line(tmp_path):
    # the place and the problem, never the line itself: a table file may be any file
    (tmp_path / "bl.txt").write_text("192.0.2.0/24\n\n10.0.0.0/40\n")
    with pytest.raises(FirewallConfigError, match=r"bl.txt:3: not an address/prefix$"):
        parse_firewall_config({"tables": [{"name": "t", "file": "bl.txt"}]}, "r.toml", tmp_path)


def test_unknown_interface():
    cfg = parse_firewall_config({"rules": ["allow ip from any to any recv eth9"]}, "r.toml")
    with pytest.raises(FirewallConfigError, match="word 7 'eth9': no interface named 'eth9'"):
        cfg.check_interfaces(["eth0"])
    with pytest.raises(RuleError, match="no interface named 'eth9'"):
        Firewall(cfg, ["eth0"])


# -- show and commands ----------------------------------------------------------------------


def test_show_layout():
    rules = parse_rules(["100 allow tcp from any to any 22", "200 count ip from any to any"])
    fw = Firewall(parse_firewall_config({"rules": [str(r) for r in rules]}, "x"))
    cnt = fw.compiled.cnt
    cnt[0] = (12, 1032, 0)
    cnt[2] = (3, 180, 0)
    assert fw.show() == (
        "00100 12 1032 allow tcp from any to any 22\n"
        "00200  0    0 count ip from any to any\n"
        "65535  3  180 deny ip from any to any\n"
    )
    assert (
        render_show(fw.rules, cnt, with_time=True)
        .splitlines()[1]
        .startswith("00200  0    0 " + " " * 24 + " count")
    )


def test_commands_and_bad_input_keep_the_rule_set():
    fw = Firewall(
        parse_firewall_config(
            {"rules": ["100 allow tcp from any to any"], "tables": [{"name": "bad"}]}, "x"
        )
    )
    before = fw.show()
    with pytest.raises(RuleError, match="word 3 'frm'"):
        fw.command(["add", "deny", "ip", "frm", "any", "to", "any"])
    assert fw.show() == before
    assert (
        fw.command(["add", "deny", "ip", "from", "table(bad)", "to", "any"])
        == "00200 deny ip from table(bad) to any\n"
    )
    fw.command(["table", "bad", "add", "192.0.2.0/24", "5,", "2001:db8::/32"])
    assert fw.command(["table", "bad", "list"]) == "192.0.2.0/24 5\n2001:db8::/32 0\n"
    v, r, _ = fw.classify(make_key("192.0.2.9", "198.51.100.1", 17, 1, 2)[None, :])
    assert fw.rule_at(int(r[0])).number == 200 and v[0] == 1
    fw.command(["table", "other", "create", "addr"])
    fw.command(["table", "bad", "swap", "other"])
    assert fw.command(["table", "bad", "list"]) == ""
    v, r, _ = fw.classify(make_key("192.0.2.9", "198.51.100.1", 17, 1, 2)[None, :])
    assert fw.rule_at(int(r[0])).number == 65535
    assert fw.command(["tables"]) == "bad addr 0\nother addr 2\n"
    fw.command(["delete", "200"])
    assert fw.show().count("\n") == 2
    with pytest.raises(ValueError):
        fw.command(["delete", "999"])
    with pytest.raises(ValueError):
        fw.command(["table", "bad", "frobnicate"])
    assert "states: 0" in fw.command(["counters"])
