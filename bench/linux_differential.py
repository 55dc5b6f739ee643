"""A large differential run against the Linux kernel as the reference router; a report.

    python -m bench.linux_differential [--examples N] [--seed S] [--no-handpicked]
                                       [--cli] [--out DIR] [--json]
    python -m bench.linux_differential --update-docs

``--update-docs`` rewrites the table in docs/linux-differences.md from
linux_reference.EXPECTED (after editing a row) and exits; no root needed.

Needs root (network namespaces, veth), iproute2 and the test extras (scapy, hypothesis).
Builds the Linux router of tests/linux_corpus.CONFIG in a namespace
(tests/linux_reference.LinuxRouter), sends it the hand-picked cases plus N hypothesis
examples one at a time, replays the same inputs through vecroute (in process through
vecroute.io.replay.Replayer, or ``--cli``: the ``vecroute replay`` command), and prints
every difference: unexpected ones first, grouped by what the two routers did, then the
expected ones by their row of linux_reference.EXPECTED. ``--out DIR`` also writes
``DIR/unexpected-<rx>.pcap`` (the differing inputs, one file per receiving interface,
ready for ``vecroute replay``) and ``DIR/report.txt``. Exit status 1 when anything
unexpected was found.

A different ``--seed`` gives a different corpus (the test suite's is derandomized).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from linux_corpus import CONFIG, generate, handpicked  # noqa: E402
from linux_reference import (  # noqa: E402
    EXPECTED,
    Diff,
    LinuxRouter,
    classify,
    compare,
    render_expected_table,
    vecroute_run,
    vecroute_run_cli,
    write_pcap,
)


def _shape(d: Diff) -> str:
    """What the two routers did, without addresses: groups differences of one kind."""

    def kinds(s: tuple[str, ...]) -> str:
        return "+".join(sorted({" ".join(x.split()[:3]) if " icmp" in x else
                                " ".join(x.split()[:2]) for x in s}))

    return f"linux {kinds(d.linux)} / vecroute {kinds(d.vecroute)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=2000, help="hypothesis examples (2000)")
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: "
                    "derandomized, the test suite's corpus extended)")
    ap.add_argument("--no-handpicked", action="store_true")
    ap.add_argument("--cli", action="store_true", help="run `vecroute replay` as a command")
    ap.add_argument("--out", type=Path, default=None, help="write report.txt and pcaps here")
    ap.add_argument("--json", action="store_true", help="print the differences as JSON")
    ap.add_argument("--update-docs", action="store_true",
                    help="rewrite the table in docs/linux-differences.md from EXPECTED")
    a = ap.parse_args(argv)
    if a.update_docs:
        return _update_docs()

    cases = [] if a.no_handpicked else handpicked()
    t0 = time.perf_counter()
    cases += generate(a.examples, a.seed)
    t_gen = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="vecroute-linux-diff-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        with LinuxRouter(CONFIG) as lr:
            lin = lr.run(cases)
            lost, waits = lr.lost_markers, lr.no_route_waits
        t_linux = time.perf_counter() - t0
        t0 = time.perf_counter()
        if a.cli:
            cfg_path = work / "config.toml"
            cfg_path.write_text(_toml(CONFIG))
            vec = vecroute_run_cli(cfg_path, cases, work / "replay")
        else:
            vec = vecroute_run(CONFIG, cases, work / "replay")
        t_vec = time.perf_counter() - t0
    diffs = compare(CONFIG, cases, lin, vec)
    bad = [d for d in diffs if classify(d) is None]
    by_row: dict[str, list[Diff]] = defaultdict(list)
    for d in diffs:
        row = classify(d)
        if row is not None:
            by_row[row.key].append(d)
    if a.json:
        print(json.dumps({
            "inputs": len(cases), "differences": len(diffs), "unexpected": [
                {"label": d.case.label, "rx": d.case.rx, "frame": d.case.frame.hex(),
                 "linux": d.linux, "vecroute": d.vecroute} for d in bad],
            "expected": {k: len(v) for k, v in by_row.items()},
        }, indent=1))
        return 1 if bad else 0
    lines = [
        f"inputs: {len(cases)} ({'no ' if a.no_handpicked else ''}hand-picked + {a.examples} "
        f"generated, seed {a.seed if a.seed is not None else 'derandomized'}); "
        f"generated in {t_gen:.1f} s, Linux {t_linux:.1f} s ({waits} waits for Linux's "
        f"per-source no-route limiter, {lost} lost markers), vecroute "
        f"{'replay CLI' if a.cli else 'replay'} {t_vec:.1f} s",
        f"differences: {len(diffs)}, unexpected: {len(bad)}, expected: "
        f"{len(diffs) - len(bad)}",
        "",
    ]
    groups: dict[str, list[Diff]] = defaultdict(list)
    for d in bad:
        groups[_shape(d)].append(d)
    if bad:
        lines.append("UNEXPECTED (grouped by what each router did; up to 5 inputs per group)")
    for shape, ds in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  [{len(ds)}] {shape}")
        for d in ds[:5]:
            lines.append(f"    {d.line()}")
    if by_row:
        lines.append("")
        lines.append("EXPECTED (docs/linux-differences.md)")
    for key, ds in sorted(by_row.items()):
        lines.append(f"  [{len(ds)}] {key}: e.g. {ds[0].case.describe()}")
    unused = [e.key for e in EXPECTED if e.key not in by_row]
    if unused:
        lines.append(f"  rows that explained nothing in this run: {', '.join(unused)}")
    report = "\n".join(lines)
    print(report)
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "report.txt").write_text(report + "\n")
        per_rx: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
        for n, d in enumerate(bad):
            per_rx[d.case.rx].append((10**9 + n * 10**6, d.case.frame))
        for rx, frames in per_rx.items():
            write_pcap(a.out / f"unexpected-{rx}.pcap", frames)
    return 1 if bad else 0


def _update_docs() -> int:
    doc = Path(__file__).resolve().parents[1] / "docs" / "linux-differences.md"
    text = doc.read_text()
    begin, end = "<!-- expected:begin -->\n", "<!-- expected:end -->"
    if begin not in text or end not in text:
        print(f"{doc}: no {begin.strip()} ... {end} block", file=sys.stderr)
        return 2
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(head + begin + render_expected_table() + end + tail)
    print(f"{doc}: table rewritten ({len(EXPECTED)} rows)")
    return 0


def _toml(cfg: dict) -> str:
    """The corpus config as TOML (enough of the format for its keys)."""

    def val(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return str(v)

    out = []
    for key, v in cfg.items():
        if isinstance(v, list):
            for item in v:
                out.append(f"[[{key}]]")
                out += [f"{k} = {val(x)}" for k, x in item.items()]
        else:
            out.append(f"[{key}]")
            out += [f"{k} = {val(x)}" for k, x in v.items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
