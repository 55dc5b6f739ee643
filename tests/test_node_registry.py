"""Node declarations against the kernels' source, NODE_NAMES, COUNTERS and the docs.

The kernels' edges are read from their source (ast), independently of the declarations:
starting at the call each node's branch of dispatch.run_nodes makes, every function
reached (in graph/) is scanned for ``enqueue(frames, frame_n, meta, NODE, i)`` targets (the
helpers drop, icmp_error, punt, host_punt, divert are ordinary functions that call
enqueue, so they are followed like any other) and for every counter constant it names
(``C.C_X``, ``C_X``). Literal and constant arguments (``ip6=True``, ``DIR_OUT``) are
carried into the callee, so a branch they rule out is not followed. Targets read from
data rather than named in code are listed in DATA_TARGETS with the data they come from
(the adjacencies' next nodes, a diverted packet's continuation).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from vecroute.fib.adjacency import ADJ_NEXT, AdjKey
from vecroute.fib.layout import (
    A_NEXT4,
    A_NEXT6,
    A_TYPE,
    ADJ_DROP,
    ADJ_GLEAN,
    ADJ_INCOMPLETE,
    ADJ_LOCAL,
    ADJ_PROHIBIT,
    ADJ_REPLY,
    ADJ_REWRITE,
    ADJ_UNREACH,
)
from vecroute.graph import counters as counters_mod
from vecroute.graph.counters import COUNTERS, markdown
from vecroute.graph.registry import CONTROL_PLANE, declarations, module_declarations
from vecroute.packet import node_ids

ROOT = Path(__file__).resolve().parents[1]
GRAPH = ROOT / "src" / "vecroute" / "graph"
PKG = "vecroute.graph"
NODE_IDS = "vecroute.packet.node_ids"  # the node numbering, below the graph (the batch
NODE_IDS_PKG = "vecroute.packet"  # and the adjacencies name nodes too)


def _node_name(attr: str) -> str | None:
    v = getattr(node_ids, attr, None)
    if isinstance(v, int) and attr.isupper() and attr != "N_NODES" and 0 <= v < node_ids.N_NODES:
        return node_ids.NODE_NAMES[v]
    return None


def _counter_name(attr: str) -> str | None:
    v = getattr(counters_mod, attr, None)
    if attr.startswith("C_") and isinstance(v, int) and 0 <= v < len(COUNTERS):
        return COUNTERS[v].name
    return None


class Module:
    """One graph module's functions and what its names refer to."""

    def __init__(self, name: str, tree: ast.Module) -> None:
        self.name = name
        self.funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (module, attribute)
        self.aliases: dict[str, str] = {}  # local name -> graph module (``counters as C``)
        self.consts: dict[str, tuple[str, str]] = {}  # any ``from X import a``: (X, a)
        for st in tree.body:
            if isinstance(st, ast.ImportFrom) and st.module:
                for a in st.names:
                    self.consts[a.asname or a.name] = (st.module, a.name)
            if isinstance(st, ast.ImportFrom) and st.module in (PKG, NODE_IDS_PKG):
                for a in st.names:
                    self.aliases[a.asname or a.name] = a.name
            elif isinstance(st, ast.ImportFrom) and (
                    (st.module or "").startswith(PKG + ".") or st.module == NODE_IDS):
                mod = st.module.rpartition(".")[2]
                for a in st.names:
                    self.imports[a.asname or a.name] = (mod, a.name)

    def ref(self, e: ast.expr) -> tuple[str, str] | None:
        """(module, attribute) a Name / alias.Attribute refers to."""
        if isinstance(e, ast.Name) and e.id in self.imports:
            return self.imports[e.id]
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name):
            mod = self.aliases.get(e.value.id)
            if mod is not None:
                return mod, e.attr
        return None

    def const(self, e: ast.expr) -> int | None:
        """The value of an imported integer constant (``DIR_IN``)."""
        if isinstance(e, ast.Name) and e.id in self.consts:
            mod, attr = self.consts[e.id]
            v = getattr(importlib.import_module(mod), attr, None)
            return v if isinstance(v, int) and not isinstance(v, bool) else None
        return None

    def node(self, e: ast.expr) -> str | None:
        r = self.ref(e)
        return _node_name(r[1]) if r and r[0] == "node_ids" else None

    def counter(self, e: ast.expr) -> str | None:
        r = self.ref(e)
        return _counter_name(r[1]) if r and r[0] == "counters" else None


def _load() -> dict[str, Module]:
    return {p.stem: Module(p.stem, ast.parse(p.read_text(), str(p))) for p in GRAPH.glob("*.py")}


MODULES = _load()

# Enqueue targets that are data, not code: (module, function) -> the nodes the data can
# name, and where it comes from. Any other target the scan cannot resolve fails the test.
DIVERTED: set[str] = set()  # filled below: the ``then`` of every divert(...) call


def _adjacency_next(env: dict) -> set[str]:
    """adj[a, A_NEXT4 / A_NEXT6]: what fib/adjacency.py's ADJ_NEXT can put there."""
    cols = {False: (0,), True: (1,)}.get(env.get("ip6"), (0, 1))
    return {node_ids.NODE_NAMES[pair[c]] for pair in ADJ_NEXT.values() for c in cols}


DATA_TARGETS = {
    ("lookup", "to_adjacency"): _adjacency_next,
    ("gso_segment", "gso_segment"): lambda env: DIVERTED,  # meta[M_AUX]: the diverter's
}


class Effects:
    def __init__(self) -> None:
        self.next: set[str] = set()
        self.counters: set[str] = set()
        self.unresolved: list[str] = []
        self.seen: set[tuple] = set()


Env = dict[str, object]  # a parameter bound at the call site: a bool literal or node names


def _known(test: ast.expr, env: Env, m: Module) -> bool | None:
    """The value of ``ip6`` / ``not ip6`` / ``direction == DIR_IN`` when the caller passed
    a literal or a constant."""
    if isinstance(test, ast.Name) and isinstance(env.get(test.id), bool):
        return env[test.id]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        v = _known(test.operand, env, m)
        return None if v is None else not v
    if (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq | ast.NotEq) and isinstance(test.left, ast.Name)
            and type(env.get(test.left.id)) is int):
        v = m.const(test.comparators[0])
        if v is not None:
            return (env[test.left.id] == v) == isinstance(test.ops[0], ast.Eq)
    if isinstance(test, ast.BoolOp):  # ``ip6 and …`` is False when ip6 is
        vals = [_known(v, env, m) for v in test.values]
        decisive = isinstance(test.op, ast.Or)
        if decisive in vals:
            return decisive
    return None


def _walk(node: ast.AST, env: Env, m: Module):
    """ast.walk, without the branches a literal argument rules out."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, ast.If | ast.IfExp):
            v = _known(n.test, env, m)
            if v is not None:
                todo.extend(n.body if v else n.orelse) if isinstance(n, ast.If) else (
                    todo.append(n.body if v else n.orelse))
                continue
        todo.extend(ast.iter_child_nodes(n))


def _targets(m: Module, fn: ast.FunctionDef, e: ast.expr, env: Env,
             depth: int = 0, partial: bool = False) -> set[str] | None:
    """The nodes an enqueue target expression can be; None when it is not in the code
    (``partial``: the part that is in the code)."""
    if isinstance(e, ast.IfExp):
        v = _known(e.test, env, m)
        if v is not None:
            return _targets(m, fn, e.body if v else e.orelse, env, depth, partial)
        a = _targets(m, fn, e.body, env, depth, partial)
        b = _targets(m, fn, e.orelse, env, depth, partial)
        return None if a is None or b is None else a | b
    n = m.node(e)
    if n is not None:
        return {n}
    if isinstance(e, ast.Name) and isinstance(env.get(e.id), frozenset):
        return set(env[e.id])
    if isinstance(e, ast.Name) and depth < 4:  # a local variable: what is assigned to it
        vals = [st.value for st in _walk(fn, env, m) if isinstance(st, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == e.id for t in st.targets)]
        out: set[str] = set()
        for v in vals:
            t = _targets(m, fn, v, env, depth + 1, partial)
            if t is None:
                return None
            out |= t
        return out if out or partial else None
    return set() if partial else None


def _resolve_call(m: Module, call: ast.Call) -> tuple[str, str] | None:
    f = call.func
    if isinstance(f, ast.Name):
        if f.id in m.funcs:
            return m.name, f.id
        r = m.imports.get(f.id)
        while r and r[0] in MODULES:  # follow re-exports (arp_input takes punt from local)
            if r[1] in MODULES[r[0]].funcs:
                return r
            r = MODULES[r[0]].imports.get(r[1])
    return None


def _bind(m: Module, fn: ast.FunctionDef, call: ast.Call, callee: ast.FunctionDef,
          env: Env) -> Env:
    """The callee's parameters the call passes literals or node ids for."""
    out: Env = {}
    for p, a in zip(callee.args.args, call.args, strict=False):
        if isinstance(a, ast.Constant) and isinstance(a.value, bool):
            out[p.arg] = a.value
        elif isinstance(a, ast.Name) and a.id in env:
            out[p.arg] = env[a.id]
        elif (t := _targets(m, fn, a, env)) is not None:
            out[p.arg] = frozenset(t)
        elif (v := m.const(a)) is not None:
            out[p.arg] = v
    return out


def _scan(mod: str, func: str, eff: Effects, env: Env | None = None) -> None:
    env = env or {}
    key = (mod, func, tuple(sorted(env.items(), key=lambda kv: kv[0])))
    if key in eff.seen:
        return
    eff.seen.add(key)
    m = MODULES[mod]
    fn = m.funcs[func]
    for e in _walk(fn, env, m):
        c = m.counter(e) if isinstance(e, ast.Name | ast.Attribute) else None
        if c is not None:
            eff.counters.add(c)
        if not isinstance(e, ast.Call):
            continue
        target = _resolve_call(m, e)
        if target is None:
            continue
        if target == ("frames", "enqueue"):
            t = _targets(m, fn, e.args[3], env)
            if t is None:
                data = DATA_TARGETS.get((mod, func))
                if data is None:
                    eff.unresolved.append(f"{mod}.{func} line {e.lineno}")
                else:  # the data's nodes, and the ones the code puts in their place
                    eff.next |= data(env) | _targets(m, fn, e.args[3], env, partial=True)
            else:
                eff.next |= t
        else:
            callee = MODULES[target[0]].funcs[target[1]]
            _scan(*target, eff, _bind(m, fn, e, callee, env))


def _collect_diverted() -> None:
    """Where gso-segment's segments can go: every divert(..., then) and every node a
    function that enqueues to gso-segment itself stores in M_AUX (host_punt)."""
    for m in MODULES.values():
        for fn in m.funcs.values():
            direct_gso = False
            for e in ast.walk(fn):
                if isinstance(e, ast.Call) and _resolve_call(m, e) == ("gso_segment", "divert"):
                    t = _targets(m, fn, e.args[4], {})
                    assert t is not None, f"divert target not in the code: {m.name} {e.lineno}"
                    DIVERTED.update(t)
                if (isinstance(e, ast.Call) and _resolve_call(m, e) == ("frames", "enqueue")
                        and m.node(e.args[3]) == "gso-segment"):
                    direct_gso = True
            if not direct_gso:
                continue
            for e in ast.walk(fn):
                if (isinstance(e, ast.Assign) and isinstance(e.targets[0], ast.Subscript)
                        and "M_AUX" in ast.unparse(e.targets[0])):
                    n = m.node(e.value)
                    if n is not None:
                        DIVERTED.add(n)


_collect_diverted()


Root = tuple[str, str, Env]  # (module, function, its bound arguments)


def _dispatch() -> tuple[dict[str, list[Root]], list[Root]]:
    """From run_nodes in dispatch.py: the calls each node's branch makes (``if node ==
    N.X``; the final ``else`` is the one node left), and the dispatcher's other calls into
    graph modules (reass_expire, the trace hooks)."""
    d = MODULES["dispatch"]
    fn = d.funcs["run_nodes"]
    roots: dict[str, list[Root]] = {}
    in_chain: set[int] = set()

    def calls(body: list[ast.stmt]) -> list[Root]:
        out = []
        for st in body:
            for c in ast.walk(st):
                if isinstance(c, ast.Call) and (t := _resolve_call(d, c)) is not None:
                    in_chain.add(id(c))
                    out.append((*t, _bind(d, fn, c, MODULES[t[0]].funcs[t[1]], {})))
        return out

    chain = next(st for st in ast.walk(fn) if isinstance(st, ast.If)
                 and isinstance(st.test, ast.Compare) and d.node(st.test.comparators[0]))
    while True:
        roots[d.node(chain.test.comparators[0])] = calls(chain.body)
        if len(chain.orelse) == 1 and isinstance(chain.orelse[0], ast.If):
            chain = chain.orelse[0]
            continue
        left = set(node_ids.NODE_NAMES) - set(roots)
        assert len(left) == 1, f"the dispatcher's final else runs {left}"
        roots[left.pop()] = calls(chain.orelse)
        break
    other = [(*t, {}) for c in ast.walk(fn) if isinstance(c, ast.Call) and id(c) not in in_chain
             and (t := _resolve_call(d, c)) is not None]
    return roots, other


ROOTS, DISPATCHER_CALLS = _dispatch()


def effects(roots: list[Root]) -> Effects:
    eff = Effects()
    for mod, func, env in roots:
        _scan(mod, func, eff, env)
    return eff


DECLS = declarations()
NODE_MODULE_OF = {d.name: m for m, ds in module_declarations().items() for d in ds}


# ---- the tests ----

def test_every_node_declared_once() -> None:
    decls = [d.name for ds in module_declarations().values() for d in ds]
    assert sorted(decls) == sorted(node_ids.NODE_NAMES), "declarations vs NODE_NAMES"
    assert len(decls) == len(set(decls))


@pytest.mark.parametrize("node", node_ids.NODE_NAMES)
def test_node_runs_its_own_module(node: str) -> None:
    """The dispatcher's branch for a node calls the module that declares it."""
    assert {m for m, _, _ in ROOTS[node]} == {NODE_MODULE_OF[node]}


@pytest.mark.parametrize("node", node_ids.NODE_NAMES)
def test_next_nodes_match_the_kernel(node: str) -> None:
    eff = effects(ROOTS[node])
    assert not eff.unresolved, f"enqueue targets not in the code: {eff.unresolved}"
    declared = set(DECLS[node].next)
    assert eff.next - declared == set(), f"{node}: enqueues to undeclared nodes"
    assert declared - eff.next == set(), f"{node}: declares next nodes it never uses"


@pytest.mark.parametrize("node", node_ids.NODE_NAMES)
def test_counters_match_the_kernel(node: str) -> None:
    eff = effects(ROOTS[node])
    declared = set(DECLS[node].counters)
    assert eff.counters - declared == set(), f"{node}: raises undeclared counters"
    assert declared - eff.counters == set(), f"{node}: declares counters it never raises"


def test_dispatcher_calls_outside_nodes_stay_within_their_module() -> None:
    """reass_expire (run once per batch, before the nodes) acts for the reassembly nodes:
    what it sends and counts is declared by its module's nodes. The fused common path
    (graph/fast_path.py) acts for the nodes its ``ACTS_FOR`` names: what it sends and counts
    is declared by one of them. Other calls send nothing."""
    assert any(f == "reass_expire" for _, f, _ in DISPATCHER_CALLS)
    assert any(f == "fused_pass" for _, f, _ in DISPATCHER_CALLS)
    for mod, func, env in DISPATCHER_CALLS:
        eff = effects([(mod, func, env)])
        decls = module_declarations().get(mod, ())
        acts_for = getattr(importlib.import_module(f"vecroute.graph.{mod}"), "ACTS_FOR", ())
        decls = (*decls, *(DECLS[n] for n in acts_for))
        assert eff.next <= {n for d in decls for n in d.next}, (mod, func)
        assert eff.counters <= {c for d in decls for c in d.counters}, (mod, func)


def test_counters_raised_elsewhere_are_named_there() -> None:
    for d in declarations().values():
        for name, module in d.raised_by:
            src = (ROOT / "src" / Path(*module.split("."))).with_suffix(".py").read_text()
            const = next(k for k in dir(counters_mod) if _counter_name(k) == name)
            assert const in src, f"{name}: {module} does not raise it"


def test_every_counter_has_a_declared_home_node() -> None:
    decls = declarations()
    raisers: dict[str, set[str]] = {}
    for d in decls.values():
        for c in (*d.counters, *(n for n, _ in d.raised_by)):
            assert c in {x.name for x in COUNTERS}, f"{d.name} declares unknown counter {c}"
            raisers.setdefault(c, set()).add(d.name)
    for c in COUNTERS:
        # the home node (its label in show errors and the metrics) need not raise it: a
        # reason set by one node may be counted where the packet ends (host-punt at punt)
        assert c.node in decls, f"{c.name}: its node {c.node} does not exist"
        assert c.name in raisers, f"{c.name}: no node declares it"
    assert CONTROL_PLANE.name not in node_ids.NODE_NAMES


def test_counters_doc_is_generated() -> None:
    assert (ROOT / "docs" / "counters.md").read_text() == markdown()


def test_scan_catches_an_undeclared_target_and_counter() -> None:
    """The scan itself: a node whose source gains an enqueue and a counter is seen."""
    src = (GRAPH / "ethernet_input.py").read_text()
    src += (
        "\n\ndef _extra(frames, frame_n, meta, dp, i):\n"
        "    dp.counters[C.C_GSO_BAD] += 1\n"
        "    enqueue(frames, frame_n, meta, IP4_FRAG, i)\n"
    )
    tree = ast.parse(src)
    tree.body.insert(0, ast.parse("from vecroute.packet.node_ids import IP4_FRAG").body[0])
    old = MODULES["ethernet_input"]
    MODULES["ethernet_input"] = Module("ethernet_input", tree)
    try:
        fn = MODULES["ethernet_input"].funcs["ethernet_input"]
        fn.body.append(ast.parse("_extra(frames, frame_n, meta, dp, 0)").body[0])
        eff = effects(ROOTS["ethernet-input"])
    finally:
        MODULES["ethernet_input"] = old
    assert "ip4-frag" in eff.next and "gso-bad" in eff.counters
    assert "ip4-frag" not in effects(ROOTS["ethernet-input"]).next


# ---- the adjacency's next node ----

def _rows_agree(adjs) -> int:
    """Every live adjacency row's A_NEXT4 / A_NEXT6 is what its kind implies."""
    for a, key in enumerate(adjs.keys):
        if key is None:
            continue
        kind = int(adjs.adj[a, A_TYPE])
        assert (int(adjs.adj[a, A_NEXT4]), int(adjs.adj[a, A_NEXT6])) == ADJ_NEXT[kind], (
            adjs.describe(a))
    return len(adjs)


def test_adjacency_next_follows_its_kind() -> None:
    """Through creation, resolution, unresolution and freeing of next-hop adjacencies."""
    import ipaddress

    from vecroute.fib.fib import Fib, Interface

    fib = Fib()
    fib.add_interface(Interface("eth0", bytes.fromhex("020000000001"), 1500, 0,
                                [ipaddress.ip_interface("192.0.2.1/24"),
                                 ipaddress.ip_interface("2001:db8::1/64")]))
    fib.add_route("198.51.100.0/24", [ipaddress.ip_address("192.0.2.2")])
    fib.add_route("2001:db8:1::/48", [ipaddress.ip_address("2001:db8::2")])
    fib.add_route("203.0.113.0/25", blackhole=True)
    fib.add_route("203.0.113.128/26", reject="unreachable")
    fib.add_route("203.0.113.192/26", reject="prohibit")
    kinds = {int(fib.adjs.adj[a, A_TYPE]) for a, k in enumerate(fib.adjs.keys) if k}
    assert {ADJ_INCOMPLETE, ADJ_GLEAN, ADJ_LOCAL, ADJ_DROP, ADJ_UNREACH, ADJ_PROHIBIT,
            ADJ_REPLY} <= kinds
    _rows_agree(fib.adjs)
    fib.add_neighbor("192.0.2.2", bytes.fromhex("020000000002"), "eth0")
    fib.add_neighbor("2001:db8::2", bytes.fromhex("020000000003"), "eth0")
    a = fib.adjs.index[AdjKey(ADJ_INCOMPLETE, 0, 4, int(ipaddress.ip_address("192.0.2.2")))]
    assert fib.adjs.adj[a, A_TYPE] == ADJ_REWRITE
    assert fib.adjs.adj[a, A_NEXT4] == node_ids.IP4_REWRITE
    _rows_agree(fib.adjs)
    fib.del_neighbor("192.0.2.2", "eth0")
    assert fib.adjs.adj[a, A_TYPE] == ADJ_INCOMPLETE
    _rows_agree(fib.adjs)
    fib.del_route("198.51.100.0/24")  # its next hop's adjacency is freed
    _rows_agree(fib.adjs)
    assert fib.adjs.adj[a, A_NEXT4] == node_ids.ERROR_DROP  # a free row: a blackhole


def test_only_the_adjacency_table_writes_kinds() -> None:
    """A_TYPE and A_NEXT* change together only in AdjacencyTable._set_kind: no other
    source file assigns them (neighbour resolution goes through set_rewrite)."""
    writers = []
    for p in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AugAssign) else [])
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Subscript) and any(
                            isinstance(x, ast.Name) and x.id in ("A_TYPE", "A_NEXT4", "A_NEXT6")
                            for x in ast.walk(sub.slice)):
                        writers.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert writers and all(w.startswith("src/vecroute/fib/adjacency.py") for w in writers), writers
