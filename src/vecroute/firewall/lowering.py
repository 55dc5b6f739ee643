"""Rule lowering: one parsed rule -> its conditions on the five indexed fields + a residual
program.

The classifier indexes five fields (source address, destination address, source port,
destination port, and "meta" = direction x address family x protocol). ``not``, lists and
``me`` are exact in the index (``me`` expands to the router's addresses here, at compile
time); what the index cannot express (tables, interfaces, TCP flags, ICMP types, TTL, frag)
leaves the field "any" and becomes residual program rows (``OP_*`` in :mod:`.layout`)
that only candidate rules run. Both the full compiler and the incremental updates lower
rules through :func:`lower_rule`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from vecroute.firewall.layout import (
    ACTION_CODES,
    OP_ADDR_TABLE,
    OP_DATA,
    OP_ESTABLISHED,
    OP_FRAG,
    OP_ICMP4TYPES,
    OP_ICMP6TYPES,
    OP_IFACE,
    OP_IFACE_TABLE,
    OP_PORT_TABLE,
    OP_SETUP,
    OP_TCPFLAGS,
    OP_TTL,
    RF_CHECK,
    RF_KEEP,
    RF_LOG,
    RF_PROBE,
)
from vecroute.firewall.rules import IFACE_OPTIONS, AddrSpec, Rule, RuleError
from vecroute.firewall.tables import FwTables


class LowerContext:
    """What lowering needs besides the rule: tables, interfaces, the router's addresses."""

    def __init__(
        self, tables: FwTables | None, interfaces: Sequence[str], me4: Sequence, me6: Sequence
    ) -> None:
        self.tables = tables
        self.interfaces = list(interfaces)
        self.me4 = sorted({int(IPv4Address(str(a))) for a in me4})
        self.me6 = sorted({int(IPv6Address(str(a))) for a in me6})


@dataclass
class Lowered:
    """A rule as the compiler indexes it: one condition per field (``("none",)`` for a
    check-state rule, which only probes the states), its residual program and codes."""

    src: tuple  # ("all",) | ("set", negate, [(net, len)] v4, [(net, len)] v6)
    dst: tuple
    sport: tuple | None
    dport: tuple | None
    meta: list[tuple[int, int]]  # meta-domain intervals
    prog: list[list[int]]
    flags: int
    act: int
    codes: int = 0


def rule_where(rule: Rule) -> str:
    """How an error message names a rule."""
    return f"rule {rule.number:05d} ({rule.body_text()})"


def _table_slot(ctx: LowerContext, rule: Rule, name: str, want: str, word: int, shown: str) -> int:
    tabs = ctx.tables
    if tabs is None or name not in tabs.slots:
        raise RuleError(rule_where(rule), word or None, shown, f"no table named {name!r}")
    t = tabs.type_of(name)
    if t != want:
        raise RuleError(
            rule_where(rule),
            word or None,
            shown,
            f"table {name!r} is a {t} table, expected a {want} table",
        )
    return tabs.slot(name)


def _lower_addr(rule: Rule, spec: AddrSpec, fld: int, prog: list, ctx: LowerContext) -> tuple:
    if spec.is_any:
        return ("all",)
    items = spec.items
    if len(items) == 1 and items[0].kind == "table":
        it = items[0]
        slot = _table_slot(ctx, rule, it.table, "addr", it.word, str(it))
        prog.append(
            [OP_ADDR_TABLE, int(spec.negate), fld, slot, -1 if it.value is None else it.value, 0]
        )
        return ("all",)
    n4: set[tuple[int, int]] = set()
    n6: set[tuple[int, int]] = set()
    for it in items:
        if it.kind == "net":
            (n4 if it.net.version == 4 else n6).add((int(it.net.network_address), it.net.prefixlen))
        elif it.kind == "me":
            n4.update((a, 32) for a in ctx.me4)
            n6.update((a, 128) for a in ctx.me6)
        elif it.kind == "me6":
            n6.update((a, 128) for a in ctx.me6)
        else:  # pragma: no cover - the parser never builds these
            raise RuleError(rule_where(rule), it.word or None, str(it), "not allowed in a list")
    return ("set", spec.negate, sorted(n4), sorted(n6))


def _icmp_words(types_: Sequence[int]) -> list[int]:
    words = [0, 0, 0, 0]
    for t in types_:
        words[t >> 6] |= 1 << (t & 63)
    return [w - (1 << 64) if w >> 63 else w for w in words]


def lower_rule(rule: Rule, ctx: LowerContext) -> Lowered:
    """Rule -> index conditions per field + residual program (raises RuleError)."""
    act = ACTION_CODES[rule.action]
    flags = RF_LOG if rule.log else 0
    c4, c6 = rule.icmp_codes()
    codes = c4 | (c6 << 8)
    if rule.action == "check-state":
        return Lowered(("none",), ("none",), None, None, [], [], flags | RF_PROBE, act)
    prog: list[list[int]] = []
    src = _lower_addr(rule, rule.src, 0, prog, ctx)
    dst = _lower_addr(rule, rule.dst, 1, prog, ctx)
    dirs = {0, 1}
    fams = {4, 6} if rule.family is None else {rule.family}
    for o in rule.options:
        neg = int(o.negate)
        if o.name in ("in", "out"):
            d = 0 if o.name == "in" else 1
            dirs &= {1 - d} if o.negate else {d}
        elif o.name == "ipversion":
            v = o.args[0]
            fams &= ({4, 6} - {v}) if o.negate else {v}
        elif o.name in IFACE_OPTIONS:
            which = IFACE_OPTIONS.index(o.name)
            which = {0: 2, 1: 0, 2: 1}[which]  # via -> 2, recv -> 0, xmit -> 1
            if o.args[0] == "table":
                slot = _table_slot(ctx, rule, o.args[1], "iface", o.word, str(o))
                prog.append(
                    [OP_IFACE_TABLE, neg, which, slot, -1 if o.args[2] is None else o.args[2], 0]
                )
            elif o.args[0] == "any":
                prog.append([OP_IFACE, neg, which, -1, 0, 0])
            else:
                name = o.args[0]
                if name not in ctx.interfaces:
                    raise RuleError(
                        rule_where(rule), o.word or None, name, f"no interface named {name!r}"
                    )
                prog.append([OP_IFACE, neg, which, ctx.interfaces.index(name), 0, 0])
        elif o.name == "tcpflags":
            prog.append([OP_TCPFLAGS, neg, o.args[0], o.args[1], 0, 0])
        elif o.name == "setup":
            prog.append([OP_SETUP, neg, 0, 0, 0, 0])
        elif o.name == "established":
            prog.append([OP_ESTABLISHED, neg, 0, 0, 0, 0])
        elif o.name in ("icmptypes", "icmp6types"):
            op = OP_ICMP4TYPES if o.name == "icmptypes" else OP_ICMP6TYPES
            prog.append([op, neg, *_icmp_words(o.args)])
        elif o.name == "frag":
            prog.append([OP_FRAG, neg, 0, 0, 0, 0])
        elif o.name == "ipttl":
            prog.append([OP_TTL, neg, len(o.args), 0, 0, 0])
            prog.extend([OP_DATA, 0, lo, hi, 0, 0] for lo, hi in o.args)
        elif o.name == "lookup":
            fld, name, value = o.args
            v = -1 if value is None else value
            if fld in ("src-ip", "dst-ip"):
                slot = _table_slot(ctx, rule, name, "addr", o.word, str(o))
                prog.append([OP_ADDR_TABLE, neg, 0 if fld == "src-ip" else 1, slot, v, 0])
            else:
                slot = _table_slot(ctx, rule, name, "number", o.word, str(o))
                prog.append([OP_PORT_TABLE, neg, 0 if fld == "src-port" else 1, slot, v, 0])
        else:  # pragma: no cover
            raise RuleError(rule_where(rule), o.word or None, o.name, "unsupported option")
    meta = []
    for d in sorted(dirs):
        for f in sorted(fams):
            base = d * 514 + (257 if f == 6 else 0)
            if rule.proto is None:
                meta.append((base, base + 256))
            else:
                meta.append((base + rule.proto, base + rule.proto))
    if prog:
        flags |= RF_CHECK
    if rule.keep_state:
        flags |= RF_KEEP | RF_PROBE
    return Lowered(src, dst, rule.sport, rule.dport, meta, prog, flags, act, codes)
