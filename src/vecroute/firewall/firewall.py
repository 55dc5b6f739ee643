"""The firewall of one worker: rules, tables, states and counters behind one small API.

::

    fw = Firewall(parse_firewall_config(raw, path, base_dir), interfaces=names,
                  me4=router_ip4s, me6=router_ip6s, vector_size=256)
    args = fw.args()            # flat arrays for the graph (FW field order), re-read them
                                # whenever fw.generation changed
    fw.maintain()               # between batches: grows the state table when needed
    fw.add("500 deny ip from 203.0.113.0/24 to any")   # incremental, build aside + swap
    fw.delete(500)
    fw.table_add("bad", ["198.51.100.7", "2001:db8:9::/48 3"])
    print(fw.show())            # `ipfw show`
    print(fw.command(["table", "bad", "list"]))   # the text `ctl fw ...` commands

Every change builds new arrays aside (or writes single entries in place) and swaps the
reference; ``generation`` increases with every change the data path must pick up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from vecroute.firewall.classify import classify_keys
from vecroute.firewall.compiler import CompiledFirewall, compile_rules, index_mapping
from vecroute.firewall.config import FirewallConfig, FirewallConfigError
from vecroute.firewall.incremental import delete_rule_at, insert_rule
from vecroute.firewall.layout import DIR_IN, FW
from vecroute.firewall.rules import (
    AUTO_STEP,
    DEFAULT_NUMBER,
    MAX_NUMBER,
    Rule,
    RuleError,
    is_number,
    number_rules,
    parse_rule,
)
from vecroute.firewall.show import list_states, render_show, render_states
from vecroute.firewall.states import (
    FC_COLS,
    FC_COUNT,
    FC_NAMES,
    grow_states,
    new_ctl,
    new_table,
    remap_state_rules,
)
from vecroute.firewall.tables import TABLE_TYPES, FwTables, TableError

REBUILD_EVERY = 256  # incremental updates before the next update compiles from scratch


class Firewall:
    """Rules + tables + dynamic states of one worker, and the arrays the data path uses."""

    def __init__(
        self,
        config: FirewallConfig | None = None,
        interfaces: Sequence[str] = (),
        me4: Sequence = (),
        me6: Sequence = (),
        vector_size: int = 256,
    ) -> None:
        cfg = config or FirewallConfig()
        self.config = cfg
        self.interfaces = list(interfaces)
        self.vector_size = vector_size  # packets per fw_batch call: the states' headroom
        self.me4 = list(me4)
        self.me6 = list(me6)
        self.default_allow = cfg.default_allow
        self.tables = FwTables(self.interfaces)
        for t in cfg.tables:
            self.tables.create(t.name, t.type)
            for payload in t.payloads:
                self.tables.add_parsed(t.name, payload)
        self.st = new_table()
        self._grow_above = self._grow_threshold()
        self.ctl = new_ctl(
            cfg.max_states,
            cfg.lifetimes,
            adaptive_start=cfg.adaptive_start,
            adaptive_end=cfg.adaptive_end,
        )
        self._next_uid = 0
        uids = self._uids(len(cfg.rules))
        self.compiled: CompiledFirewall = compile_rules(
            cfg.rules, self.default_allow, self.tables, self.interfaces, self.me4, self.me6, uids
        )
        self._generation = 0

    def _uids(self, n: int) -> list[int]:
        u = list(range(self._next_uid, self._next_uid + n))
        self._next_uid += n
        return u

    # -- the data path's view -------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """Increases with every change of the arrays returned by :meth:`args`."""
        return self._generation + self.tables.generation

    def args(self) -> tuple:
        """The arrays in ``FW`` field order (pass them flat into compiled code): the
        classifier's, the tables', then the states (``layout.STATE_FIELDS``)."""
        return (*self.compiled.arrays(), *self.tables.arrays(), self.st, self.ctl)

    def dataplane(self) -> FW:
        return FW(*self.args())

    def _grow_threshold(self) -> int:
        """The most states the table holds before :meth:`maintain` asks ``grow_states``:
        its own test (the load past 1/2, or the next vector's inserts past 3/4) solved for
        the count once per table, so that the common case is one comparison. Never above
        that test's bound: the compiled loops return for growth (``states_need_growth``)
        and would re-enter for ever if maintain did not grow. Whatever replaces ``st``
        or ``vector_size`` sets it again."""
        cap = self.st.shape[0]
        return min(cap // 2, cap * 3 // 4 - self.vector_size)

    def maintain(self) -> bool:
        """Between batches: grow the state table when it passed half full, or the next
        vector's inserts could pass 3/4 (``grow_states``). True if the
        arrays changed (re-read :meth:`args`). ``Graph.run`` calls it every batch: the
        common case (no growth) is one comparison (it was 0.47 us of Python a batch)."""
        if self.ctl[FC_COUNT] <= self._grow_above:
            return False
        st = grow_states(self.st, self.ctl, self.vector_size)
        if st is self.st:  # past the threshold, so at the size max_states allows: it
            self._grow_above = np.iinfo(np.int64).max  # cannot grow again
            return False
        self.st = st
        self._grow_above = self._grow_threshold()
        self._generation += 1
        return True

    def classify(self, keys: np.ndarray, direction: int = DIR_IN, now: int = 0, vector: int = 256):
        """Classify a key matrix in vectors of ``vector`` rows with :meth:`maintain` between
        them, like the graph does (tests and tools; the graph calls ``fw_batch`` itself)."""
        keys = np.ascontiguousarray(keys, np.int64).reshape(-1, keys.shape[-1])
        vector = vector or self.vector_size
        parts = []
        for a in range(0, keys.shape[0], vector):
            self.maintain()
            parts.append(classify_keys(self.args(), keys[a : a + vector], direction, now))
        if not parts:
            e = np.zeros(0, np.int32)
            return e, e.copy(), e.copy()
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))

    @property
    def rules(self) -> list[Rule]:
        """All rules in evaluation order, the default rule last."""
        return list(self.compiled.rules)

    def rule_at(self, index: int) -> Rule:
        return self.compiled.rules[index]

    # -- rule changes ---------------------------------------------------------------------------

    def _swap(self, new: CompiledFirewall, mapping: np.ndarray) -> None:
        remap_state_rules(self.st, mapping)
        self.compiled = new
        self._generation += 1

    def _recompile(self, rules: list[Rule], uids: list[int]) -> None:
        new = compile_rules(
            rules,
            self.default_allow,
            self.tables,
            self.interfaces,
            self.me4,
            self.me6,
            uids,
            previous=self.compiled,
        )
        self._swap(new, index_mapping(self.compiled, new))

    def add(self, rule: str | Rule, where: str = "<ctl>") -> Rule:
        """Add one rule (text or Rule); without a number it gets the highest + 100.
        A bad rule raises RuleError and changes nothing."""
        r = parse_rule(rule, where) if isinstance(rule, str) else rule
        if r.number == 0:
            highest = max((x.number for x in self.compiled.rules[:-1]), default=0)
            n = highest + AUTO_STEP
            if n > MAX_NUMBER:
                raise RuleError(where, None, None, f"no automatic rule number left ({n})")
            r = replace(r, number=n)
        uid = self._uids(1)[0]
        cf = self.compiled
        if cf.updates >= REBUILD_EVERY:
            rules = cf.rules[:-1] + [r]
            uids = [int(u) for u in cf.uids[:-1]] + [uid]
            self._recompile(rules, uids)
            return r
        new, p = insert_rule(cf, r, uid, self.tables, self.interfaces, self.me4, self.me6)
        mapping = np.arange(len(cf.rules), dtype=np.int64)
        mapping[p:] += 1
        self._swap(new, mapping)
        return r

    def delete(self, number: int) -> int:
        """Delete every rule with this number; returns how many there were."""
        if number == DEFAULT_NUMBER:
            raise RuleError("<ctl>", None, None, "the default rule cannot be deleted")
        cf = self.compiled
        idx = [i for i, r in enumerate(cf.rules[:-1]) if r.number == number]
        if not idx:
            return 0
        new = cf
        for p in reversed(idx):
            new = delete_rule_at(new, p)
        gone = set(idx)
        mapping = np.full(len(cf.rules), -1, np.int64)
        k = 0
        for i in range(len(cf.rules)):
            if i not in gone:
                mapping[i] = k
                k += 1
        self._swap(new, mapping)
        return len(idx)

    def replace(self, rules: Sequence[str | Rule], where: str = "<ctl>") -> None:
        """Replace the whole rule set (parsed first: a bad rule changes nothing)."""
        parsed = [
            parse_rule(x, f"{where}[{k}]") if isinstance(x, str) else x for k, x in enumerate(rules)
        ]
        parsed = number_rules(parsed)
        self._recompile(parsed, self._uids(len(parsed)))

    def rebuild(self) -> None:
        """Compile from scratch (same rules): compacts classes left by incremental updates."""
        cf = self.compiled
        self._recompile(cf.rules[:-1], [int(u) for u in cf.uids[:-1]])

    def set_default(self, allow: bool) -> None:
        self.default_allow = allow
        self.rebuild()

    def set_addresses(self, me4: Sequence, me6: Sequence) -> None:
        """The router's addresses changed: ``me``/``me6`` are expanded again."""
        self.me4, self.me6 = list(me4), list(me6)
        self.rebuild()

    def set_interfaces(self, interfaces: Sequence[str]) -> None:
        self.interfaces = list(interfaces)
        self.tables.set_interfaces(self.interfaces)
        self.rebuild()

    def zero(self, number: int | None = None) -> None:
        """Reset the counters of one rule number (all rules when None)."""
        cnt = self.compiled.cnt
        if number is None:
            cnt[:] = 0
        else:
            for i, r in enumerate(self.compiled.rules):
                if r.number == number:
                    cnt[i] = 0

    # -- tables -----------------------------------------------------------------------------------

    def table_create(self, name: str, type_: str) -> None:
        self.tables.create(name, type_)

    def table_add(self, name: str, entries: Sequence[str]) -> int:
        return self.tables.add(name, entries)

    def table_delete(self, name: str, keys: Sequence[str]) -> int:
        return self.tables.delete(name, keys)

    def table_flush(self, name: str) -> int:
        return self.tables.flush(name)

    def table_list(self, name: str) -> list[tuple[str, int]]:
        return self.tables.listing(name)

    def table_swap(self, a: str, b: str) -> None:
        self.tables.swap(a, b)

    # -- introspection ------------------------------------------------------------------------

    def show(self, with_time: bool = False) -> str:
        """``ipfw show``: counters and rules (``-t``: with the last-match time)."""
        return render_show(self.compiled.rules, self.compiled.cnt, with_time)

    def states(self, now: int) -> list[dict]:
        return list_states(self.st, self.compiled.rules, now)

    def show_states(self, now: int) -> str:
        return render_states(self.states(now))

    def counters(self) -> dict[str, int]:
        out = {name: int(self.ctl[col]) for col, name in FC_NAMES.items()}
        out["max-states"] = int(self.config.max_states)
        return out

    # -- text commands (`vecroute ctl fw ...`) ------------------------------------------------

    def command(self, argv: Sequence[str], now: int = 0) -> str:
        """Run one ``ctl fw`` command and return its text output. Raises ValueError
        (RuleError, TableError) with a one-line message on bad input.

        show [-t] | states | counters | add RULE... | delete NUMBER | zero [NUMBER] |
        table NAME create TYPE | table NAME add KEY [VALUE] [, KEY [VALUE] ...] |
        table NAME delete KEY... | table NAME flush | table NAME list |
        table NAME swap OTHER | tables
        """
        if not argv:
            raise ValueError(
                "fw: expected show, states, counters, add, delete, zero, table, tables"
            )
        cmd, rest = argv[0], list(argv[1:])
        if cmd == "show":
            return self.show(with_time="-t" in rest)
        if cmd == "states":
            return self.show_states(now)
        if cmd == "counters":
            return "".join(f"{k}: {v}\n" for k, v in self.counters().items())
        if cmd == "add":
            r = self.add(" ".join(rest))
            return f"{r}\n"
        if cmd == "delete":
            if len(rest) != 1 or not _rule_number(rest[0]):
                raise ValueError(_number_error("delete", rest))
            n = self.delete(int(rest[0]))
            if not n:
                raise ValueError(f"fw delete: no rule {int(rest[0]):05d}")
            return ""
        if cmd == "zero":
            if len(rest) > 1 or (rest and not _rule_number(rest[0])):
                raise ValueError(_number_error("zero", rest))
            self.zero(int(rest[0]) if rest else None)
            return ""
        if cmd == "tables":
            return "".join(
                f"{n} {self.tables.type_of(n)} {self.tables.count(n)}\n"
                for n in self.tables.names()
            )
        if cmd == "table":
            if len(rest) < 2:
                raise ValueError("fw table: expected NAME add|delete|flush|list|swap|create")
            name, op, args = rest[0], rest[1], rest[2:]
            if op == "create":
                if len(args) != 1 or args[0] not in TABLE_TYPES:
                    raise ValueError("fw table NAME create: expected addr, number or iface")
                self.table_create(name, args[0])
                return ""
            if op == "add":
                entries = _entries(args)
                if not entries:
                    raise TableError("fw table add: expected KEY [VALUE]")
                self.table_add(name, entries)
                return ""
            if op == "delete":
                n = self.table_delete(name, _entries(args))
                return f"{n} deleted\n"
            if op == "flush":
                self.table_flush(name)
                return ""
            if op == "list":
                return "".join(f"{k} {v}\n" for k, v in self.table_list(name))
            if op == "swap":
                if len(args) != 1:
                    raise ValueError("fw table NAME swap: expected the other table's name")
                self.table_swap(name, args[0])
                return ""
            raise ValueError(f"fw table: unknown operation {op!r}")
        raise ValueError(f"fw: unknown command {cmd!r}")


_READ_ONLY = {"show", "states", "counters", "tables"}


def command_changes(argv: Sequence[str]) -> bool:
    """Whether a ``ctl fw`` command changes the firewall (and must reach every worker)."""
    if not argv or argv[0] in _READ_ONLY:
        return False
    return not (argv[0] == "table" and len(argv) > 2 and argv[2] == "list")


def firewall_from_config(cfg) -> Firewall | None:
    """The firewall a router config asks for (``cfg.firewall``), None without [firewall]:
    interfaces in config order, ``me``/``me6`` = the interfaces' addresses."""
    if cfg.firewall is None:
        return None
    addrs = [a.ip for itf in cfg.interfaces for a in itf.addresses]
    try:
        return Firewall(
            cfg.firewall,
            [itf.name for itf in cfg.interfaces],
            [a for a in addrs if a.version == 4],
            [a for a in addrs if a.version == 6],
            cfg.router.vector_size,
        )
    except (RuleError, TableError) as e:  # e.g. a rule naming a table that does not exist
        raise FirewallConfigError(str(e)) from None


def _number_error(cmd: str, rest: list[str]) -> str:
    """One line: what ``fw delete|zero`` wanted, and the word it got (quoted short)."""
    got = "nothing" if not rest else (
        f"{' '.join(rest)[:40]!r}" if len(rest) > 1 else f"{rest[0][:40]!r}")
    return f"fw {cmd}: expected a rule number 1..{DEFAULT_NUMBER}, got {got}"


def _rule_number(w: str) -> bool:
    """1..65535 in ASCII digits (str.isdigit() also accepts "²", which int() refuses)."""
    return is_number(w) and len(w) <= 5 and 1 <= int(w) <= DEFAULT_NUMBER


def _entries(args: list[str]) -> list[str]:
    """``KEY [VALUE] [, KEY [VALUE] ...]`` -> one "KEY [VALUE]" line per entry."""
    return [p.strip() for p in " ".join(args).split(",") if p.strip()]


__all__ = ["Firewall", "FC_COLS", "command_changes", "firewall_from_config"]
