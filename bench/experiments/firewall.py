"""firewall: forwarding with the firewall in the graph vs without (the DragonFly ipfw seed).

The seed: ipfw kept 7 % of the forwarding rate with 10K rules; a table lookup instead of a
rule list keeps almost all of it. Variants (a quick set of ``python -m bench.firewall``):
the whole in-memory path (``PacketBatch.load`` + ``Graph.run``, vector 256, 64-byte
IPv4/UDP frames, the full Internet table) with no firewall, with 10K rules the traffic
does not match, and with one rule ``deny ip from table(bl) to any`` over a 1M-entry table
the traffic does not match; ``default = "allow"``, fw-in and fw-out on every packet, every
sample checked to have forwarded every frame. Unit: Mpps per CPU-second of the process.
Targets (the issue): the 1M table >= 90 % of no firewall, 10K rules >= 50 %.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from vecroute.measure.bench import BenchError, Experiment, Variant

PACKETS = 1 << 18
_state: dict = {}


def _setup() -> list[Variant]:
    from bench import firewall as B
    from bench.common import DEFAULT_TABLE

    if not DEFAULT_TABLE.exists():
        raise BenchError("the full-table data file ../shared/data is missing")
    rng = np.random.default_rng(B.SEED)
    path, frames = B.forwarding_path(PACKETS, rng, DEFAULT_TABLE)
    tmp = Path(tempfile.mkdtemp(prefix="fwexp"))
    bl = tmp / "bl.txt"
    bl.write_text(B.table_text(1_000_000, rng))
    fw_rules = B.firewall(B.nomatch_rules(10_000, rng))
    fw_table = B.firewall(
        ["100 deny ip from table(bl) to any"], tables=[{"name": "bl", "type": "addr"}]
    )
    fw_table.tables.add_file("bl", bl)
    shutil.rmtree(tmp, ignore_errors=True)
    cases = [
        B.FwdCase("no-firewall", None, None),
        B.FwdCase("10k-nomatch-rules", fw_rules, None),
        B.FwdCase("table-1m-entries", fw_table, None),
    ]
    for c in cases:  # compile / warm and check
        B.check_forwarded(c, B.run_case(path, c, frames), frames.n)
    _state.update(path=path, frames=frames, cases=cases)

    def sample(c) -> float:
        B.check_forwarded(c, B.run_case(path, c, frames), frames.n)
        return frames.n / c.cpu[-1] / 1e6

    return [Variant(c.name, lambda c=c: sample(c)) for c in cases]


def _notes(samples: dict[str, list[float]]) -> str:
    base = float(np.median(samples["no-firewall"]))
    targets = {"10k-nomatch-rules": 50.0, "table-1m-entries": 90.0}
    lines = [
        "Percent of the no-firewall rate (medians), with the issue's targets; the whole "
        "matrix (100 / 1K rules, smaller tables, the `in` idiom, ClassBench): "
        "`python -m bench.firewall`.",
        "",
        "| variant | median Mpps / CPU-s | % of no firewall | target |",
        "|---|---|---|---|",
    ]
    for name, s in samples.items():
        med = float(np.median(s))
        pct = 100.0 * med / base
        t = targets.get(name)
        v = "" if t is None else f">= {t:.0f} %: {'met' if pct >= t else 'MISSED'}"
        lines.append(f"| {name} | {med:.3f} | {pct:.1f} % | {v} |")
    return "\n".join(lines)


def _teardown() -> None:
    path = _state.get("path")
    if path is not None:
        path.graph.attach_firewall(None)
    _state.clear()


EXPERIMENT = Experiment(
    name="firewall",
    title="Forwarding with the firewall in the graph: no firewall, 10K no-match rules, "
    "a 1M-entry table",
    unit="Mpps per CPU-second",
    seed="DragonFly ipfw: 10K rules kept 7 % of the forwarding rate; tables keep most of it",
    setup=_setup,
    notes=_notes,
    teardown=_teardown,
)
