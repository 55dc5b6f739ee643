"""Dependencies point down: packet -> fib/firewall/srv6 -> graph -> io -> control -> cli.

Every import in src/vecroute, at module level or inside a function, is checked against
the layer of the module it names: a lower layer never imports a higher one, and no module
imports another's private (underscore) names. The configuration's types
(``config_types``) are at the bottom, so every layer can take a ``Config``; the TOML
parser that fills them is the control plane's (``control/config.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "vecroute"

LAYER = {
    "config_types": 0,
    "packet": 0,
    "measure": 1,  # stat, gen, bench: packets only
    "fib": 1,
    "firewall": 1,
    "srv6": 1,
    "graph": 2,
    "io": 3,
    "control": 4,
    "warmup": 4,  # compiles the data path for `vecroute run` and `make test`
    "lab": 5,
    "cli": 6,
}


def _part(module: str) -> str | None:
    """The top-level part of vecroute a dotted module name is in (None: the package)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "vecroute" and len(parts) > 1 else None


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every vecroute import in a file, nested ones included."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        assert not (isinstance(n, ast.ImportFrom) and n.level), (
            f"{path.name}:{n.lineno}: a relative import (name the module: the layers are "
            "checked by name)")
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("vecroute"):
            mod = n.module
            for a in n.names:  # `from vecroute.graph import state`: the module is the name
                sub = f"{mod}.{a.name}"
                if mod.count(".") == 0 or (SRC / Path(*sub.split(".")[1:])).with_suffix(
                        ".py").exists():
                    out.append((n.lineno, sub, []))
                else:
                    out.append((n.lineno, mod, [a.name]))
        elif isinstance(n, ast.Import):
            out += [(n.lineno, a.name, []) for a in n.names if a.name.startswith("vecroute")]
    return out


FILES = sorted(SRC.rglob("*.py"))


def test_every_part_has_a_layer() -> None:
    parts = {p.relative_to(SRC).parts[0].removesuffix(".py") for p in FILES} - {"__init__"}
    assert parts == set(LAYER), "a new part of vecroute: give it a layer here"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down(path: Path) -> None:
    me = path.relative_to(SRC).parts[0].removesuffix(".py")
    if me == "__init__":
        return
    for line, mod, names in _imports(path):
        part = _part(mod)
        if part is None:  # the package itself (its __init__ sets up numba's cache)
            continue
        assert LAYER[part] <= LAYER[me], (
            f"{path.relative_to(SRC)}:{line}: {me} (layer {LAYER[me]}) imports {mod} "
            f"(layer {LAYER[part]})")
        private = [n for n in names if n.startswith("_")]
        assert not private, f"{path.relative_to(SRC)}:{line}: private names of {mod}: {private}"


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    """The scan finds an upward import inside a function, and a private name."""
    f = tmp_path / "x.py"
    f.write_text("def f():\n    from vecroute.control.config import load_config\n"
                 "from vecroute.graph.state import _tables_default\n"
                 "from vecroute.graph import state\n")
    got = _imports(f)
    assert (2, "vecroute.control.config", ["load_config"]) in got
    assert (3, "vecroute.graph.state", ["_tables_default"]) in got
    assert (4, "vecroute.graph.state", []) in got
    assert LAYER[_part(got[0][1])] > LAYER["fib"]
