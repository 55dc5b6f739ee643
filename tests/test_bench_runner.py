"""`vecroute bench`: interleaved rounds, ministat comparison, reports, Markdown update."""

import itertools
import json
import subprocess
import sys

import pytest

from vecroute.measure import stat
from vecroute.measure.bench import BenchError, Experiment, Variant, run, update_markdown


def _exp(order: list[str]) -> Experiment:
    a = itertools.cycle([10.0, 11.0, 9.0, 10.5, 9.5])
    b = itertools.cycle([20.0, 21.0, 19.0, 20.5, 19.5])

    def sample(name, it):
        def f():
            order.append(name)
            return next(it)

        return f

    return Experiment(
        name="toy",
        title="Toy experiment",
        unit="Mpps",
        seed="none",
        setup=lambda: [Variant("base", sample("base", a)), Variant("fast", sample("fast", b))],
    )


def test_rounds_are_interleaved_and_compared_with_ministat(tmp_path):
    order: list[str] = []
    rep = run(_exp(order), 5, tmp_path)
    assert order == ["base", "fast"] * 5  # A B A B ..., never A A A B B B
    assert rep.samples["fast"] == [20.0, 21.0, 19.0, 20.5, 19.5]
    # the ministat text is exactly what vecroute stat prints for the same data sets
    assert rep.ministat == stat.render(
        [("base", rep.samples["base"]), ("fast", rep.samples["fast"])], width=74
    )
    row = rep.summary[1]
    assert row["significant"] and row["ratio"] == pytest.approx(2.0)
    assert (tmp_path / "toy.png").stat().st_size > 1000
    data = json.loads((tmp_path / "toy.json").read_text())
    assert data["samples"]["base"][0] == 10.0
    assert "Difference at 95.0% confidence" in (tmp_path / "toy.md").read_text()


def test_too_few_rounds_is_an_error(tmp_path):
    with pytest.raises(BenchError, match="repeat"):
        run(_exp([]), 2, tmp_path)


def test_update_markdown_replaces_only_its_section(tmp_path):
    md = tmp_path / "B.md"
    md.write_text("# Benchmarks\n\nhand-written intro\n")
    rep = run(_exp([]), 3, None)
    update_markdown(md, [rep])
    update_markdown(md, [rep])
    text = md.read_text()
    assert text.count("<!-- bench:toy -->") == 1 and "hand-written intro" in text
    assert "Machine:" in text and "vecroute bench run toy" in text


def test_cli_lists_the_experiments():
    out = subprocess.run(
        [sys.executable, "-m", "vecroute.cli", "bench", "list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = {line.split()[0] for line in out.splitlines()}
    assert {"checksum", "forwarding", "gen"} <= names
    bad = subprocess.run(
        [sys.executable, "-m", "vecroute.cli", "bench", "run", "nope"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "unknown experiment" in bad.stderr
