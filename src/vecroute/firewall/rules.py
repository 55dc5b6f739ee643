"""ipfw-style firewall rules: the syntax tree, the parser and the canonical text form.

One rule is one line::

    [NUMBER] ACTION [log] PROTO from SRC [PORTS] to DST [PORTS] [OPTIONS...] [// comment]
    [NUMBER] check-state [// comment]

Every word is listed in docs/firewall.md. ``parse_rule`` turns a line into a :class:`Rule`
(a frozen dataclass, comparable and hashable); ``str(rule)`` gives the canonical text, which
parses back to an equal rule. A bad rule raises :class:`RuleError` naming where the rule came
from, the 1-based index of the wrong word and the word itself, e.g.
``rules[3]: word 4 'fromm': expected 'from'``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Network, IPv6Network

DEFAULT_NUMBER = 65535
MAX_NUMBER = 65534  # the highest number a user rule may have
AUTO_STEP = 100  # ipfw autoinc_step: a rule without a number gets the highest number + 100

# canonical action names and their spellings
ACTION_WORDS = {
    "allow": "allow",
    "accept": "allow",
    "pass": "allow",
    "permit": "allow",
    "deny": "deny",
    "drop": "deny",
    "reject": "reject",
    "unreach": "unreach",
    "unreach6": "unreach6",
    "reset": "reset",
    "count": "count",
    "skipto": "skipto",
    "check-state": "check-state",
}

# protocol words -> (proto number or None for any, family or None)
PROTO_WORDS: dict[str, tuple[int | None, int | None]] = {
    "ip": (None, None),
    "all": (None, None),
    "ip4": (None, 4),
    "ipv4": (None, 4),
    "ip6": (None, 6),
    "ipv6": (None, 6),
    "icmp": (1, None),
    "tcp": (6, None),
    "udp": (17, None),
    "gre": (47, None),
    "esp": (50, None),
    "ah": (51, None),
    "ipv6-icmp": (58, None),
    "icmp6": (58, None),
    "sctp": (132, None),
}
PROTO_NAMES = {
    1: "icmp",
    6: "tcp",
    17: "udp",
    47: "gre",
    50: "esp",
    51: "ah",
    58: "ipv6-icmp",
    132: "sctp",
}

# ICMP destination unreachable codes (unreach CODE) and ICMPv6 ones (unreach6 CODE)
UNREACH4_CODES = {
    "net": 0,
    "host": 1,
    "protocol": 2,
    "port": 3,
    "needfrag": 4,
    "srcfail": 5,
    "net-unknown": 6,
    "host-unknown": 7,
    "isolated": 8,
    "net-prohib": 9,
    "host-prohib": 10,
    "tosnet": 11,
    "toshost": 12,
    "filter-prohib": 13,
    "host-precedence": 14,
    "precedence-cutoff": 15,
}
UNREACH6_CODES = {
    "no-route": 0,
    "admin-prohib": 1,
    "beyond-scope": 2,
    "address": 3,
    "port": 4,
    "failed-policy": 5,
    "reject-route": 6,
}
UNREACH4_NAMES = {v: k for k, v in UNREACH4_CODES.items()}
UNREACH6_NAMES = {v: k for k, v in UNREACH6_CODES.items()}
# the ICMPv6 code sent for an IPv6 packet hitting `unreach CODE`, and the reverse
UNREACH4_TO_6 = {0: 0, 1: 3, 3: 4, 7: 3, 6: 0}  # everything else: admin-prohib (1)
UNREACH6_TO_4 = {0: 0, 2: 1, 3: 1, 4: 3}  # everything else: filter-prohib (13)
REJECT_CODE4 = 1  # reject: ICMP host unreachable
REJECT_CODE6 = 1  # reject: ICMPv6 administratively prohibited

TCP_FLAGS = {
    "fin": 0x01,
    "syn": 0x02,
    "rst": 0x04,
    "psh": 0x08,
    "ack": 0x10,
    "urg": 0x20,
    "ece": 0x40,
    "cwr": 0x80,
}
TCP_FLAG_NAMES = {v: k for k, v in TCP_FLAGS.items()}

IFACE_OPTIONS = ("via", "recv", "xmit")
LOOKUP_FIELDS = ("src-ip", "dst-ip", "src-port", "dst-port")
OPTION_WORDS = (
    "in",
    "out",
    "via",
    "recv",
    "xmit",
    "tcpflags",
    "setup",
    "established",
    "icmptypes",
    "icmp6types",
    "frag",
    "ipversion",
    "ipttl",
    "lookup",
    "keep-state",
)

_TABLE_RE = re.compile(r"^table\(\s*([A-Za-z0-9_.\-]+)\s*(?:,\s*(\d+)\s*)?\)\Z", re.ASCII)
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,63}\Z")
TABLE_NAME_RE = _NAME_RE  # table names: 1-63 ASCII letters, digits, _.-
_PORTS_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*\Z", re.ASCII)
_RANGES_RE = _PORTS_RE
MAX_TABLE_VALUE = (1 << 22) - 1  # table values share the LPM's 22-bit value field


class RuleError(ValueError):
    """A rule that does not parse or compile: where, the wrong word and why (one line)."""

    def __init__(self, where: str, word_index: int | None, word: str | None, msg: str) -> None:
        self.where = where
        self.word_index = word_index
        self.word = word
        self.msg = msg
        if word_index is None:
            text = f"{where}: {msg}"
        else:
            text = f"{where}: word {word_index} {word!r}: {msg}"
        super().__init__(text)


# ---------------------------------------------------------------------------------------------
# syntax tree
# ---------------------------------------------------------------------------------------------

Network = IPv4Network | IPv6Network


@dataclass(frozen=True)
class AddrItem:
    """One element of an address: ``any``, ``me``, ``me6``, a prefix or a table."""

    kind: str  # "any" | "me" | "me6" | "net" | "table"
    net: Network | None = None
    table: str | None = None
    value: int | None = None  # table(NAME,VALUE): the entry's value must equal VALUE
    word: int = field(default=0, compare=False)  # word index, for compile-time errors

    def __str__(self) -> str:
        if self.kind == "net":
            n = self.net
            full = 32 if n.version == 4 else 128
            return str(n.network_address) if n.prefixlen == full else str(n)
        if self.kind == "table":
            return (
                f"table({self.table})"
                if self.value is None
                else f"table({self.table},{self.value})"
            )
        return self.kind


@dataclass(frozen=True)
class AddrSpec:
    """``[not] ITEM`` or ``[not] { ITEM, ITEM ... }`` (a list matches any of its items)."""

    negate: bool
    items: tuple[AddrItem, ...]

    @property
    def is_any(self) -> bool:
        return not self.negate and len(self.items) == 1 and self.items[0].kind == "any"

    def __str__(self) -> str:
        if len(self.items) == 1:
            body = str(self.items[0])
        else:
            body = "{ " + ", ".join(str(i) for i in self.items) + " }"
        return ("not " if self.negate else "") + body


ANY = AddrSpec(False, (AddrItem("any"),))

Ranges = tuple[tuple[int, int], ...]


def format_ranges(r: Ranges) -> str:
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in r)


@dataclass(frozen=True)
class Option:
    """One option word with its arguments (see ``OPTION_WORDS``).

    ``args`` by name: via/recv/xmit: (IFNAME,) or ("table", NAME, VALUE|None) or ("any",);
    tcpflags: (set_mask, clear_mask); icmptypes/icmp6types: (sorted types...);
    ipversion: (4|6,); ipttl: ((lo, hi), ...); lookup: (FIELD, NAME, VALUE|None);
    in/out/setup/established/frag: ().
    """

    name: str
    negate: bool = False
    args: tuple = ()
    word: int = field(default=0, compare=False)

    def __str__(self) -> str:
        s = "not " if self.negate else ""
        n, a = self.name, self.args
        if n in IFACE_OPTIONS:
            if a[0] == "table":
                t = f"table({a[1]})" if a[2] is None else f"table({a[1]},{a[2]})"
                return f"{s}{n} {t}"
            return f"{s}{n} {a[0]}"
        if n == "tcpflags":
            words = [TCP_FLAG_NAMES[b] for b in sorted(TCP_FLAG_NAMES) if a[0] & b]
            words += ["!" + TCP_FLAG_NAMES[b] for b in sorted(TCP_FLAG_NAMES) if a[1] & b]
            return f"{s}tcpflags {','.join(words)}"
        if n in ("icmptypes", "icmp6types"):
            return f"{s}{n} {','.join(str(t) for t in a)}"
        if n == "ipversion":
            return f"{s}ipversion {a[0]}"
        if n == "ipttl":
            return f"{s}ipttl {format_ranges(a)}"
        if n == "lookup":
            t = a[1] if a[2] is None else f"{a[1]},{a[2]}"
            return f"{s}lookup {a[0]} {t}"
        return f"{s}{n}"


@dataclass(frozen=True)
class Rule:
    """A parsed rule. ``arg``: skipto target number (-1 = tablearg) or the unreach code."""

    number: int
    action: str  # canonical: allow deny reject unreach unreach6 reset count skipto check-state
    arg: int | None = None
    log: bool = False
    proto: int | None = None  # upper-layer protocol, None = any
    family: int | None = None  # 4 or 6 from the words ip4/ip6, None = both
    src: AddrSpec = ANY
    sport: Ranges | None = None
    dst: AddrSpec = ANY
    dport: Ranges | None = None
    options: tuple[Option, ...] = ()
    keep_state: bool = False
    comment: str | None = None

    @property
    def tablearg(self) -> bool:
        return self.action == "skipto" and self.arg == -1

    def icmp_codes(self) -> tuple[int, int]:
        """(ICMP code for IPv4 packets, ICMPv6 code for IPv6 packets) of reject/unreach."""
        if self.action == "reject":
            return REJECT_CODE4, REJECT_CODE6
        if self.action == "unreach":
            return self.arg, UNREACH4_TO_6.get(self.arg, 1)
        if self.action == "unreach6":
            return UNREACH6_TO_4.get(self.arg, 13), self.arg
        return 0, 0

    def body_text(self) -> str:
        """The canonical rule without its number (what ``ipfw show`` prints after counters)."""
        a = self.action
        if a == "skipto":
            act = "skipto " + ("tablearg" if self.arg == -1 else str(self.arg))
        elif a == "unreach":
            act = "unreach " + UNREACH4_NAMES.get(self.arg, str(self.arg))
        elif a == "unreach6":
            act = "unreach6 " + UNREACH6_NAMES.get(self.arg, str(self.arg))
        else:
            act = a
        words = [act]
        if self.log:
            words.append("log")
        if a != "check-state":
            if self.family is not None:
                words.append(f"ip{self.family}")
            elif self.proto is None:
                words.append("ip")
            else:
                words.append(PROTO_NAMES.get(self.proto, str(self.proto)))
            words += ["from", str(self.src)]
            if self.sport is not None:
                words.append(format_ranges(self.sport))
            words += ["to", str(self.dst)]
            if self.dport is not None:
                words.append(format_ranges(self.dport))
            words += [str(o) for o in self.options]
            if self.keep_state:
                words.append("keep-state")
        if self.comment:
            words.append("// " + self.comment)
        return " ".join(words)

    def __str__(self) -> str:
        if not self.number:
            return self.body_text()
        return f"{self.number:05d} {self.body_text()}"


def default_rule(allow: bool) -> Rule:
    """Rule 65535: ``allow ip from any to any`` or ``deny ip from any to any``."""
    return Rule(DEFAULT_NUMBER, "allow" if allow else "deny")


# ---------------------------------------------------------------------------------------------
# tokenizer
# ---------------------------------------------------------------------------------------------


def tokenize(text: str) -> tuple[list[str], str | None]:
    """Split a rule into words: braces are words of their own, ``table(a, 1)`` is one word,
    ``// comment`` is cut off and returned separately."""
    comment = None
    cut = text.find("//")
    if cut >= 0:
        comment = text[cut + 2 :].strip() or None
        text = text[:cut]
    raw = text.replace("{", " { ").replace("}", " } ").split()
    words: list[str] = []
    i = 0
    while i < len(raw):
        w = raw[i]
        if w.lower().startswith("table(") and ")" not in w:
            j = i + 1
            while j < len(raw) and ")" not in raw[j - 1]:
                w += " " + raw[j]
                j += 1
            i = j
        else:
            i += 1
        words.append(w)
    return words, comment


# ---------------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------------


class _Cursor:
    def __init__(self, words: list[str], where: str) -> None:
        self.words = words
        self.i = 0
        self.where = where

    def peek(self) -> str | None:
        return self.words[self.i] if self.i < len(self.words) else None

    def peekl(self) -> str | None:
        w = self.peek()
        return None if w is None else w.lower()

    def take(self, what: str) -> str:
        w = self.peek()
        if w is None:
            raise self.error(f"missing {what} at the end of the rule", at_end=True)
        self.i += 1
        return w

    @property
    def last(self) -> int:
        """1-based index of the word taken last."""
        return self.i

    def error(self, msg: str, at_end: bool = False, index: int | None = None) -> RuleError:
        if at_end:
            return RuleError(self.where, None, None, msg)
        k = self.i if index is None else index
        k = min(max(k, 1), len(self.words))
        return RuleError(self.where, k, self.words[k - 1], msg)

    def error_here(self, msg: str) -> RuleError:
        """An error about the next (not yet taken) word."""
        if self.i >= len(self.words):
            return RuleError(self.where, None, None, msg + " (end of the rule)")
        return RuleError(self.where, self.i + 1, self.words[self.i], msg)


def is_number(w: str) -> bool:
    """ASCII digits only: str.isdigit() also accepts "²", which int() refuses."""
    return w.isascii() and w.isdigit()


def _bounded(text: str, hi: int) -> int:
    """int(text) of ASCII digits, or hi + 1 for a number too long to be in range (int()
    of thousands of digits is slow, of more than 4300 an error)."""
    return int(text) if len(text) <= len(str(hi)) + 1 else hi + 1


def _shown(text: str) -> str:
    return text if len(text) <= 24 else text[:20] + "..."


def _int(c: _Cursor, w: str, lo: int, hi: int, what: str) -> int:
    if not is_number(w):
        raise c.error(f"expected {what} ({lo}..{hi})")
    v = _bounded(w, hi)
    if not lo <= v <= hi:
        raise c.error(f"{what} {_shown(w)} out of range {lo}..{hi}")
    return v


def _ranges(c: _Cursor, w: str, lo: int, hi: int, what: str) -> Ranges:
    if not _RANGES_RE.match(w):
        raise c.error(f"expected {what} like 80 or 1000-2000 or 22,80,443")
    out = []
    for part in w.split(","):
        a, _, b = part.partition("-")
        x, y = _bounded(a, hi), _bounded(b, hi) if b else _bounded(a, hi)
        if not (lo <= x <= hi and lo <= y <= hi):
            raise c.error(f"{what} {_shown(part)} out of range {lo}..{hi}")
        if x > y:
            raise c.error(f"{what} range {part} is reversed")
        out.append((x, y))
    return tuple(out)


def _table_word(c: _Cursor, w: str) -> tuple[str, int | None]:
    m = _TABLE_RE.match(w)
    if not m:
        raise c.error("expected table(NAME) or table(NAME,VALUE)")
    value = None
    if m.group(2) is not None:
        value = _bounded(m.group(2), MAX_TABLE_VALUE)
        if value > MAX_TABLE_VALUE:
            raise c.error(f"table value {_shown(m.group(2))} out of range 0..{MAX_TABLE_VALUE}")
    return m.group(1), value


def _addr_item(c: _Cursor, w: str, in_list: bool) -> AddrItem:
    lw = w.lower()
    k = c.last
    if lw in ("me", "me6"):
        return AddrItem(lw, word=k)
    if lw == "any":
        if in_list:
            raise c.error("'any' cannot be part of a list")
        return AddrItem("any", word=k)
    if lw.startswith("table("):
        if in_list:
            raise c.error("a table cannot be part of a list")
        name, value = _table_word(c, w)
        return AddrItem("table", table=name, value=value, word=k)
    try:
        net = ipaddress.ip_network(w, strict=False)
    except ValueError:
        raise c.error(
            "expected an address: any, me, me6, a.b.c.d[/len], an IPv6 prefix, "
            "{ list } or table(NAME)"
        ) from None
    return AddrItem("net", net=net, word=k)


def _addr(c: _Cursor, what: str) -> AddrSpec:
    negate = False
    w = c.take(what)
    if w.lower() == "not":
        negate = True
        w = c.take(what)
    if w == "{":
        items: list[AddrItem] = []
        while True:
            w = c.take("'}' closing the address list")
            if w == "}":
                break
            if w.lower() == "or" and items:
                continue
            for part in w.split(","):
                if part:
                    items.append(_addr_item(c, part, True))
        if not items:
            raise c.error("empty address list")
        return AddrSpec(negate, tuple(items))
    if "," in w and not w.lower().startswith("table("):
        items = [_addr_item(c, part, True) for part in w.split(",") if part]
        return AddrSpec(negate, tuple(items))
    item = _addr_item(c, w, False)
    if item.kind == "any" and negate:
        raise c.error("'not any' never matches")
    return AddrSpec(negate, (item,))


def _iface_arg(c: _Cursor) -> tuple:
    w = c.take("an interface name or table(NAME)")
    if w.lower().startswith("table("):
        name, value = _table_word(c, w)
        return ("table", name, value)
    if w.lower() == "any":
        return ("any",)
    if not _NAME_RE.match(w) or w in OPTION_WORDS:
        raise c.error("expected an interface name, any or table(NAME)")
    return (w,)


def _tcpflags(c: _Cursor, w: str) -> tuple[int, int]:
    set_mask = clear_mask = 0
    for part in w.lower().split(","):
        neg = part.startswith("!")
        name = part[1:] if neg else part
        if name not in TCP_FLAGS:
            raise c.error(f"unknown TCP flag {name!r} (fin syn rst psh ack urg ece cwr, !flag)")
        bit = TCP_FLAGS[name]
        if neg:
            clear_mask |= bit
        else:
            set_mask |= bit
    if set_mask & clear_mask:
        raise c.error("a TCP flag is both required and forbidden")
    return set_mask, clear_mask


def _option(c: _Cursor, negate: bool) -> Option | None:
    """Parse one option (the word has been taken); None for keep-state."""
    k = c.last
    name = c.words[k - 1].lower()
    if name in ("in", "out", "setup", "established", "frag"):
        return Option(name, negate, (), k)
    if name in IFACE_OPTIONS:
        return Option(name, negate, _iface_arg(c), k)
    if name == "tcpflags":
        w = c.take("TCP flags like syn,!ack")
        return Option(name, negate, _tcpflags(c, w), k)
    if name in ("icmptypes", "icmp6types"):
        w = c.take("ICMP types like 0,3,8")
        r = _ranges(c, w, 0, 255, "ICMP type")
        types = sorted({t for a, b in r for t in range(a, b + 1)})
        return Option(name, negate, tuple(types), k)
    if name == "ipversion":
        w = c.take("4 or 6")
        if w not in ("4", "6"):
            raise c.error("expected ipversion 4 or 6")
        return Option(name, negate, (int(w),), k)
    if name == "ipttl":
        w = c.take("TTL values like 1,64-128")
        return Option(name, negate, _ranges(c, w, 0, 255, "TTL"), k)
    if name == "lookup":
        f = c.take("src-ip, dst-ip, src-port or dst-port").lower()
        if f not in LOOKUP_FIELDS:
            raise c.error("expected src-ip, dst-ip, src-port or dst-port")
        w = c.take("a table name")
        if w.lower().startswith("table("):
            tname, value = _table_word(c, w)
        else:
            tname, _, v = w.partition(",")
            if not _NAME_RE.match(tname):
                raise c.error("expected a table name")
            value = _int(c, v, 0, MAX_TABLE_VALUE, "table value") if v else None
        return Option(name, negate, (f, tname, value), k)
    raise c.error(f"unknown option (one of: {', '.join(OPTION_WORDS)})", index=k)


def parse_rule(text: str, where: str = "<rule>", number: int | None = None) -> Rule:
    """Parse one rule. ``number`` is used when the text has none (ipfw auto-numbering is
    the caller's job: see :func:`parse_rules`); without either the number is 0 (unset)."""
    words, comment = tokenize(text)
    c = _Cursor(words, where)
    if not words:
        raise RuleError(where, None, None, "empty rule")
    w = c.take("an action")
    num = number
    if is_number(w):
        num = _int(c, w, 1, MAX_NUMBER, "rule number")
        w = c.take("an action")
    action = ACTION_WORDS.get(w.lower())
    if action is None:
        raise c.error(
            "expected an action: allow, deny, reject, unreach CODE, reset, count, "
            "skipto N, check-state"
        )
    arg = None
    if action == "skipto":
        t = c.take("the rule number to skip to")
        arg = -1 if t.lower() == "tablearg" else _int(c, t, 1, DEFAULT_NUMBER, "skipto number")
    elif action == "unreach":
        t = c.take("an ICMP unreachable code")
        arg = UNREACH4_CODES.get(t.lower())
        if arg is None:
            arg = _int(c, t, 0, 255, "ICMP code (or net, host, port, ...)")
    elif action == "unreach6":
        t = c.take("an ICMPv6 unreachable code")
        arg = UNREACH6_CODES.get(t.lower())
        if arg is None:
            arg = _int(c, t, 0, 255, "ICMPv6 code (or no-route, admin-prohib, port, ...)")
    log = False
    if c.peekl() == "log":
        c.take("log")
        log = True
    if action == "check-state":
        if c.peek() is not None:
            raise c.error_here("check-state takes no match conditions")
        return Rule(num or 0, action, None, log, comment=comment)
    w = c.take("a protocol")
    lw = w.lower()
    if lw in PROTO_WORDS:
        proto, family = PROTO_WORDS[lw]
    elif is_number(lw):
        proto, family = _int(c, lw, 0, 255, "protocol number"), None
    else:
        raise c.error("expected a protocol: ip, ip4, ip6, tcp, udp, icmp, ipv6-icmp or 0..255")
    w = c.take("'from'")
    if w.lower() != "from":
        raise c.error("expected 'from'")
    src = _addr(c, "a source address")
    sport = None
    nxt = c.peek()
    if nxt is not None and _PORTS_RE.match(nxt):
        sport = _ranges(c, c.take("ports"), 0, 65535, "port")
    w = c.take("'to'")
    if w.lower() != "to":
        raise c.error("expected 'to'" + (" (or source ports)" if sport is None else ""))
    dst = _addr(c, "a destination address")
    dport = None
    nxt = c.peek()
    if nxt is not None and _PORTS_RE.match(nxt):
        dport = _ranges(c, c.take("ports"), 0, 65535, "port")
    options: list[Option] = []
    keep_state = False
    while c.peek() is not None:
        w = c.take("an option").lower()
        negate = False
        if w == "not":
            negate = True
            w = c.take("an option after 'not'").lower()
        if w == "keep-state":
            if negate:
                raise c.error("keep-state cannot be negated")
            if keep_state:
                raise c.error("keep-state given twice")
            keep_state = True
            continue
        options.append(_option(c, negate))
    if keep_state and action in ("count",):
        raise RuleError(where, None, None, "keep-state cannot be used with count")
    if keep_state and action == "skipto" and arg == -1:
        raise RuleError(where, None, None, "keep-state cannot be used with skipto tablearg")
    return Rule(
        num or 0,
        action,
        arg,
        log,
        proto,
        family,
        src,
        sport,
        dst,
        dport,
        tuple(options),
        keep_state,
        comment,
    )


def is_blank(line: str) -> bool:
    s = line.strip()
    return not s or s.startswith("#")


def number_rules(rules: list[Rule], highest: int = 0, where: list[str] | None = None) -> list[Rule]:
    """Give rules without a number (0) the highest number so far + 100, like ipfw."""
    out = []
    for k, r in enumerate(rules):
        if r.number == 0:
            n = highest + AUTO_STEP
            if n > MAX_NUMBER:
                w = where[k] if where else f"rules[{k}]"
                raise RuleError(
                    w,
                    None,
                    None,
                    f"no rule number left for an automatic number ({n} > {MAX_NUMBER})",
                )
            r = replace(r, number=n)
        highest = max(highest, r.number)
        out.append(r)
    return out


def parse_rules(lines: list[str], where: list[str] | None = None, highest: int = 0) -> list[Rule]:
    """Parse many rules (blank lines and ``#`` comments are skipped) and number them."""
    rules, places = [], []
    for k, line in enumerate(lines):
        if is_blank(line):
            continue
        w = where[k] if where else f"rules[{k}]"
        rules.append(parse_rule(line, w))
        places.append(w)
    return number_rules(rules, highest, places)


def sort_rules(rules: list[Rule]) -> list[Rule]:
    """Rules in evaluation order: by number, rules with equal numbers in insertion order."""
    return sorted(rules, key=lambda r: r.number)
