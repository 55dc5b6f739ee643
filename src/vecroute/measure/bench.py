"""`vecroute bench`: run the seed experiments side by side and report them honestly.

An experiment is a small file in the repository's ``bench/experiments/`` that defines
``EXPERIMENT = Experiment(...)``: its variants (the first is the baseline) each produce one
sample per call. The runner interleaves repetitions (A B C A B C …) so that a noisy,
shared machine hurts every variant alike, compares each variant with the baseline using
the ministat arithmetic of ``vecroute stat`` (Student's t, 95%), and writes a Markdown
report, the ministat text and a PNG plot per experiment.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vecroute.measure import stat


class BenchError(ValueError):
    """Unknown experiment, missing bench/ directory, bad options (one line)."""


@dataclass
class Variant:
    name: str
    sample: Callable[[], float]  # one measurement, in the experiment's unit


@dataclass
class Experiment:
    name: str
    title: str
    unit: str  # e.g. "Mpps"
    seed: str  # which seed report it mirrors
    setup: Callable[[], list[Variant]]  # heavy preparation, once; returns the variants
    notes: Callable[[dict[str, list[float]]], str] | None = None  # extra Markdown
    teardown: Callable[[], None] | None = None


@dataclass
class Report:
    experiment: Experiment
    samples: dict[str, list[float]]
    ministat: str
    markdown: str
    png: str | None = None
    summary: list[dict[str, Any]] = field(default_factory=list)


def repo_root() -> Path:
    """The checkout that holds bench/experiments (experiments are scripts, not package)."""
    for start in (Path.cwd(), Path(__file__).resolve().parents[3]):
        for d in (start, *start.parents):
            if (d / "bench" / "experiments").is_dir():
                return d
    raise BenchError("bench/experiments not found: run vecroute bench from a vecroute checkout")


def experiments() -> dict[str, Experiment]:
    root = repo_root()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import bench.experiments as pkg

    found = {}
    for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"bench.experiments.{m.name}")
        exp = getattr(mod, "EXPERIMENT", None)
        if isinstance(exp, Experiment):
            found[exp.name] = exp
    return found


def summarize_samples(samples: dict[str, list[float]]) -> list[dict[str, Any]]:
    names = list(samples)
    base = samples[names[0]]
    bmed = stat.summarize(base)["median"] if len(base) >= 3 else None
    rows = []
    for name in names:
        v = samples[name]
        row: dict[str, Any] = {"variant": name, "n": len(v)}
        if len(v) >= 3:
            s = stat.summarize(v)
            row.update(
                median=s["median"], mean=s["avg"], stddev=s["stddev"], min=s["min"], max=s["max"]
            )
            if bmed:
                row["ratio"] = s["median"] / bmed
            if name != names[0] and len(base) >= 3:
                c = stat.compare(base, v)
                row["difference_pct"] = c["percent"]
                row["plus_minus_pct"] = c["percent_plus_minus"]
                row["significant"] = bool(c["significant"])
        rows.append(row)
    return rows


def _md_table(rows: list[dict[str, Any]], unit: str) -> str:
    out = [
        f"| variant | n | median {unit} | mean | stddev | ratio to baseline | "
        f"difference (95%, Student's t) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "median" not in r:
            out.append(f"| {r['variant']} | {r['n']} | – | – | – | – | – |")
            continue
        diff = "baseline"
        if "difference_pct" in r:
            diff = (
                f"{r['difference_pct']:+.2f}% ± {r['plus_minus_pct']:.2f}%"
                if r["significant"]
                else "no difference proven"
            )
        out.append(
            f"| {r['variant']} | {r['n']} | {r['median']:.4g} | {r['mean']:.4g} | "
            f"{r['stddev']:.3g} | {r.get('ratio', float('nan')):.3f} | {diff} |"
        )
    return "\n".join(out)


def run(
    exp: Experiment,
    repeat: int,
    out_dir: Path | None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Run one experiment: setup once, then ``repeat`` interleaved rounds of all variants."""
    if repeat < 3:
        raise BenchError("--repeat must be >= 3 (ministat needs three points)")
    variants = exp.setup()
    samples: dict[str, list[float]] = {v.name: [] for v in variants}
    try:
        for r in range(repeat):
            for v in variants:
                if progress:
                    progress(f"{exp.name}: round {r + 1}/{repeat}: {v.name}")
                samples[v.name].append(float(v.sample()))
    finally:
        if exp.teardown:
            exp.teardown()
    ministat = stat.render([(n, s) for n, s in samples.items()], width=74)
    rows = summarize_samples(samples)
    md = [
        f"## {exp.title}",
        "",
        f"Seed: {exp.seed}",
        "",
        f"{repeat} interleaved repetitions per variant; unit: {exp.unit}.",
        "",
        _md_table(rows, exp.unit),
        "",
        "```",
        ministat.rstrip(),
        "```",
        "",
    ]
    if exp.notes:
        md += [exp.notes(samples), ""]
    png = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        png = str(out_dir / f"{exp.name}.png")
        stat.plot_png(png, list(samples.items()))
        md.insert(-1, f"![{exp.name}]({exp.name}.png)\n")
        (out_dir / f"{exp.name}.md").write_text("\n".join(md))
        (out_dir / f"{exp.name}.json").write_text(
            json.dumps(
                {"experiment": exp.name, "unit": exp.unit, "samples": samples, "summary": rows},
                indent=2,
            )
            + "\n"
        )
    return Report(exp, samples, ministat, "\n".join(md), png, rows)


def machine() -> str:
    """One line describing the machine (benchmarks are meaningless without it)."""
    import os
    import platform

    import numba
    import numpy

    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, Python "
        f"{platform.python_version()}, numpy {numpy.__version__}, numba {numba.__version__}"
    )


def update_markdown(path: Path, reports: list[Report]) -> None:
    """Replace (or append) each experiment's section in a Markdown file, between
    ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` markers."""
    import datetime

    text = path.read_text() if path.exists() else "# Benchmarks\n"
    for r in reports:
        begin, end = f"<!-- bench:{r.experiment.name} -->", f"<!-- /bench:{r.experiment.name} -->"
        when = datetime.date.today().isoformat()
        body = (
            f"{begin}\n{r.markdown.rstrip()}\n\nMachine: {machine()}; {when}; command: "
            f"`vecroute bench run {r.experiment.name} --repeat "
            f"{len(next(iter(r.samples.values())))} --update {path.name}`\n{end}"
        )
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            text = head + body + rest.split(end, 1)[1]
        else:
            text = text.rstrip() + "\n\n" + body + "\n"
    path.write_text(text)


def run_many(
    names: Sequence[str],
    repeat: int,
    out_dir: Path | None,
    progress: Callable[[str], None] | None = None,
) -> list[Report]:
    known = experiments()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BenchError(f"unknown experiment {unknown[0]!r}; known: {', '.join(known)}")
    return [run(known[n], repeat, out_dir, progress) for n in names]
