"""The ``[firewall]`` configuration section: parsed and validated into a FirewallConfig.

::

    [firewall]
    default = "deny"            # or "allow": the action of rule 65535
    rules = ["100 allow tcp from any to me 22 setup keep-state", "..."]
    rules_file = "rules.txt"    # one rule per line, '#' comments; appended after rules
    max_states = 1000000
    adaptive_start = 600000     # above this many states, unanswered states' lifetimes
    adaptive_end = 1200000      # shrink linearly to 0 at this many (pf adaptive.start/end)

    [firewall.lifetimes]        # seconds (ipfw dyn_*_lifetime)
    syn = 20
    established = 300
    fin = 1
    rst = 1
    udp = 10
    other = 30

    [[firewall.tables]]
    name = "bad"
    type = "addr"               # addr | number | iface
    entries = ["192.0.2.0/24", "2001:db8:5::/48 7"]   # "KEY [VALUE]"
    file = "blocklist.txt"      # optional, same line format, '#' comments

Every error is one line naming the file, the key and what is wrong (rules: the word too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vecroute.config_types import MAX_CONFIG_BYTES, ConfigError, FileReadError, read_regular_file
from vecroute.firewall.rules import (
    IFACE_OPTIONS,
    TABLE_NAME_RE,
    Rule,
    RuleError,
    is_blank,
    number_rules,
    parse_rule,
)
from vecroute.firewall.states import DEFAULT_LIFETIMES, LIFETIMES, adaptive_bounds
from vecroute.firewall.tables import (
    MAX_TABLE_FILE,
    MAX_TABLES,
    TABLE_TYPES,
    AddrEntries,
    TableError,
    parse_addr_entries,
    parse_iface_entries,
    parse_number_entries,
)

MAX_STATES_LIMIT = 1 << 26


class FirewallConfigError(ConfigError):
    """A user error in the [firewall] section (one line: file, key, problem)."""


@dataclass
class TableConfig:
    name: str
    type: str
    payloads: list = field(default_factory=list)  # parsed entries, in load order
    sources: list[str] = field(default_factory=list)  # "entries", file paths


@dataclass
class FirewallConfig:
    default_allow: bool = False
    rules: list[Rule] = field(default_factory=list)
    rule_places: list[str] = field(default_factory=list)  # "firewall.rules[3]", "r.txt:12"
    tables: list[TableConfig] = field(default_factory=list)
    max_states: int = 1_000_000
    adaptive_start: int | None = None  # None: 60% of max_states
    adaptive_end: int | None = None  # None: 120% of max_states
    lifetimes: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_LIFETIMES))
    path: str = "<config>"

    def check_interfaces(self, names: list[str]) -> None:
        """Raise FirewallConfigError for a rule naming an interface that does not exist."""
        for r, place in zip(self.rules, self.rule_places, strict=True):
            for o in r.options:
                if (
                    o.name in IFACE_OPTIONS
                    and o.args[0] not in ("table", "any")
                    and o.args[0] not in names
                ):
                    raise FirewallConfigError(
                        f"{self.path}: {place}: word {o.word} {o.args[0]!r}: "
                        f"no interface named {o.args[0]!r}"
                    )


def _table_refs(rule: Rule) -> list[tuple[str, str, int, str]]:
    """(table name, wanted type, word index, shown word) for every table a rule uses."""
    out = []
    for spec in (rule.src, rule.dst):
        for it in spec.items:
            if it.kind == "table":
                out.append((it.table, "addr", it.word, str(it)))
    for o in rule.options:
        if o.name in IFACE_OPTIONS and o.args[0] == "table":
            out.append((o.args[1], "iface", o.word, str(o)))
        elif o.name == "lookup":
            want = "addr" if o.args[0] in ("src-ip", "dst-ip") else "number"
            out.append((o.args[1], want, o.word, str(o)))
    return out


def parse_firewall_config(
    raw: Any, path: str = "<config>", base_dir: str | Path = "."
) -> FirewallConfig:
    """Validate the ``[firewall]`` table of a parsed TOML document (``raw``); files named
    in it are read relative to ``base_dir``. Raises FirewallConfigError."""
    base = Path(base_dir)

    def err(key: str, msg: str) -> FirewallConfigError:
        return FirewallConfigError(f"{path}: firewall.{key}: {msg}")

    if not isinstance(raw, dict):
        raise FirewallConfigError(f"{path}: firewall: expected a table, got {type(raw).__name__}")
    allowed = {"default", "rules", "rules_file", "max_states", "adaptive_start",
               "adaptive_end", "tables", "lifetimes"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise err(unknown[0], f"unknown key (allowed: {', '.join(sorted(allowed))})")
    cfg = FirewallConfig(path=path)

    d = raw.get("default", "deny")
    if d not in ("deny", "allow"):
        raise err("default", f'expected "deny" or "allow", got {d!r}')
    cfg.default_allow = d == "allow"

    ms = raw.get("max_states", 1_000_000)
    if not isinstance(ms, int) or isinstance(ms, bool) or not 1 <= ms <= MAX_STATES_LIMIT:
        raise err("max_states", f"expected an integer 1..{MAX_STATES_LIMIT}, got {ms!r}")
    cfg.max_states = ms
    for key in ("adaptive_start", "adaptive_end"):
        v = raw.get(key)
        if v is not None and (
            not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 2 * MAX_STATES_LIMIT
        ):
            raise err(key, f"expected a number of states 0..{2 * MAX_STATES_LIMIT}, got {v!r}")
    cfg.adaptive_start, cfg.adaptive_end = raw.get("adaptive_start"), raw.get("adaptive_end")
    if cfg.adaptive_end is not None and cfg.adaptive_end <= ms:
        raise err("adaptive_end", f"must be above max_states ({ms}), got {cfg.adaptive_end}")
    a0, a1 = adaptive_bounds(ms, cfg.adaptive_start, cfg.adaptive_end)
    if cfg.adaptive_start is not None and cfg.adaptive_start != a0:
        raise err("adaptive_start", f"must be below adaptive_end ({a1}), got {cfg.adaptive_start}")

    life = raw.get("lifetimes", {})
    if not isinstance(life, dict):
        raise err("lifetimes", "expected a table like { syn = 20, established = 300 }")
    for k, v in life.items():
        if k not in LIFETIMES:
            raise err(f"lifetimes.{k}", f"unknown lifetime (allowed: {', '.join(LIFETIMES)})")
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 86400 * 365:
            raise err(f"lifetimes.{k}", f"expected seconds > 0, got {v!r}")
        cfg.lifetimes[k] = float(v)

    # -- tables
    tv = raw.get("tables", [])
    if not isinstance(tv, list):
        raise err("tables", "expected an array of tables ([[firewall.tables]])")
    names: dict[str, str] = {}
    for n, t in enumerate(tv):
        where = f"tables[{n}]"
        if not isinstance(t, dict):
            raise err(where, "expected a table")
        unknown = sorted(set(t) - {"name", "type", "entries", "file"})
        if unknown:
            raise err(f"{where}.{unknown[0]}", "unknown key (allowed: entries, file, name, type)")
        name = t.get("name")
        if not isinstance(name, str) or not TABLE_NAME_RE.match(name):
            raise err(f"{where}.name",
                      f"{name!r} is not a table name (1-63 ASCII letters, digits, _.-)")
        if name in names:
            raise err(f"{where}.name", f"table {name!r} defined twice")
        if len(names) >= MAX_TABLES:
            raise err(f"{where}", f"at most {MAX_TABLES} tables")
        ty = t.get("type", "addr")
        if ty not in TABLE_TYPES:
            raise err(f"{where}.type", f"expected addr, number or iface, got {ty!r}")
        names[name] = ty
        tc = TableConfig(name, ty)
        entries = t.get("entries", [])
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise err(f"{where}.entries", 'expected an array of "KEY [VALUE]" strings')
        places = [f"{path}: firewall.{where}.entries[{k}]" for k in range(len(entries))]
        try:
            if entries:
                tc.payloads.append(_parse_entries(ty, entries, places))
                tc.sources.append("entries")
            if "file" in t:
                f = t["file"]
                if not isinstance(f, str):
                    raise err(f"{where}.file", f"expected a file name, got {f!r}")
                p = base / f
                try:
                    data = read_regular_file(p, MAX_TABLE_FILE)
                except FileReadError as e:
                    raise err(f"{where}.file", f"cannot read {str(p)!r}: {e}") from None
                # a file's lines are never quoted in an error: it may be any file at all
                if ty == "addr":
                    tc.payloads.append(parse_addr_entries(data, str(p), quote=False))
                else:
                    lines = data.decode("utf-8", errors="replace").split("\n")
                    tc.payloads.append(_parse_entries(ty, lines, None, str(p), quote=False))
                tc.sources.append(str(p))
        except TableError as e:
            msg = str(e)
            if not msg.startswith(path):
                msg = f"{path}: firewall.{where}: {msg}"
            raise FirewallConfigError(msg) from None
        cfg.tables.append(tc)

    # -- rules
    rv = raw.get("rules", [])
    if not isinstance(rv, list) or not all(isinstance(x, str) for x in rv):
        raise err("rules", "expected an array of rule strings")
    texts = [(f"firewall.rules[{k}]", line) for k, line in enumerate(rv)]
    if "rules_file" in raw:
        f = raw["rules_file"]
        if not isinstance(f, str):
            raise err("rules_file", f"expected a file name, got {f!r}")
        p = base / f
        try:
            content = read_regular_file(p, MAX_CONFIG_BYTES).decode()
        except FileReadError as e:
            raise err("rules_file", f"cannot read {str(p)!r}: {e}") from None
        except UnicodeDecodeError as e:  # where, never what: the file may be any file
            raise err("rules_file", f"cannot read {str(p)!r}: not UTF-8 text "
                                    f"(byte {e.start})") from None
        texts += [(f"{p}:{k + 1}", line) for k, line in enumerate(content.split("\n"))]
    from_file = len(rv)  # texts[from_file:] are lines of rules_file
    rules, places = [], []
    try:
        for k, (where, line) in enumerate(texts):
            if is_blank(line):
                continue
            try:
                rules.append(parse_rule(line, where))
            except RuleError as e:
                if k < from_file:
                    raise
                # a line of rules_file: its place and the word's index, not the word
                at = f"word {e.word_index}: " if e.word_index is not None else ""
                raise FirewallConfigError(f"{path}: {e.where}: {at}{e.msg}") from None
            places.append(where)
        rules = number_rules(rules, 0, places)
    except RuleError as e:
        raise FirewallConfigError(f"{path}: {e}") from None
    for r, place in zip(rules, places, strict=True):
        for tname, want, word, shown in _table_refs(r):
            if tname not in names:
                raise FirewallConfigError(
                    f"{path}: {place}: word {word} {shown!r}: no table named {tname!r}"
                )
            if names[tname] != want:
                raise FirewallConfigError(
                    f"{path}: {place}: word {word} {shown!r}: table "
                    f"{tname!r} is a {names[tname]} table, expected "
                    f"{want}"
                )
    cfg.rules = rules
    cfg.rule_places = places
    return cfg


def _parse_entries(
    ty: str, lines: list[str], places: list[str] | None, where: str = "", quote: bool = True
):
    if ty == "addr":
        return parse_addr_entries("\n".join(lines), where, places, quote)
    if ty == "number":
        return parse_number_entries(lines, where, places, quote)
    return parse_iface_entries(lines, where, places, quote)


__all__ = [
    "FirewallConfig",
    "FirewallConfigError",
    "TableConfig",
    "parse_firewall_config",
    "AddrEntries",
]
