"""``vecroute stat`` against the real ``ministat`` (Debian 20150715), byte for byte.

The oracle is the installed binary: every case runs both on the same files and
compares stdout, stderr (with ministat's name replaced by ours) and exit code.
"""

from __future__ import annotations

import ctypes
import io
import json
import math
import os
import pty
import shutil
import statistics
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vecroute.measure import stat
from vecroute.measure.stat import PlotCrash, compare, compare_welch, main, render, summarize
from vecroute.measure.student_t import STUDENT

MINISTAT = shutil.which("ministat")
SIGSEGV_EXIT = 139
ENV = {k: v for k, v in os.environ.items() if k not in ("POSIXLY_CORRECT", "COLUMNS")}


def _need_ministat() -> str:
    if MINISTAT is None:
        pytest.fail(
            "ministat (the oracle for these tests) is not installed: run `make test`, "
            "which apt-get installs it"
        )
    return MINISTAT


@pytest.fixture(autouse=True)
def _ministat_installed() -> None:
    """Fail (never skip) every test here when the oracle is missing."""
    _need_ministat()


def run_ministat(args: list[str], stdin: bytes = b"") -> tuple[str, str, int]:
    exe = _need_ministat()
    p = subprocess.run(
        ["ministat", *args],
        executable=exe,
        input=stdin,
        capture_output=True,
        env=ENV,
        timeout=30,
    )
    err = p.stderr.decode("utf-8", "surrogateescape").replace("ministat", stat.PROG)
    return p.stdout.decode("utf-8", "surrogateescape"), err, p.returncode


def run_ours(args: list[str], stdin: bytes = b"") -> tuple[str, str, int]:
    out, err = io.StringIO(), io.StringIO()
    rc = main(args, io.TextIOWrapper(io.BytesIO(stdin)), out, err)
    return out.getvalue(), err.getvalue(), rc


def assert_same(args: list[str], stdin: bytes = b"") -> tuple[str, str, int]:
    """Run both; equal output, or both "crash" (SIGSEGV there, exit 139 here)."""
    exp = run_ministat(args, stdin)
    got = run_ours(args, stdin)
    if exp[2] == -11:
        assert got[2] == SIGSEGV_EXIT, (args, got)
        assert exp[0] == "" and got[0] == ""
        return got
    assert got == exp, args
    return got


# ---------------------------------------------------------------------------
# Hypothesis: random data sets and option combinations

NUMBERS = st.one_of(
    st.integers(-1000, 1000),
    st.integers(-(10**15), 10**15),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -0.0, 0.1, 1e-300, 5e-324, 1e300, 1.7976931348623157e308, 123456789]),
)


def _text(v: int | float, how: int) -> str:
    if isinstance(v, int):
        return [str(v), f"{v}.", f"+{v}" if v >= 0 else str(v), f"{v}e0"][how]
    return [repr(v), f"{v:.17g}", f"{v:g}", float.hex(v)][how]


SMALL = st.lists(NUMBERS, max_size=2)  # too few points: an error in ministat
DATASET = st.one_of(
    st.lists(NUMBERS, min_size=3, max_size=40),
    st.lists(NUMBERS, min_size=3, max_size=40),
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=3, max_size=40),
    st.builds(lambda v, n: [v] * n, NUMBERS, st.integers(3, 12)),
    st.lists(st.sampled_from([1, 2, 3, 2.5, 100]), min_size=3, max_size=40),
)


def _chance(draw: st.DrawFn, percent: float) -> bool:
    """A biased coin; hypothesis favours boundary integers, so use the middle."""
    return 3000 <= draw(st.integers(0, 9999)) < 3000 + percent * 100


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[list[str]], list[str], dict[str, object]]:
    """(file lines, option list, layout) with options placed like a user might."""
    nfiles = draw(st.integers(1, 7))
    delim = draw(st.sampled_from([None, None, ",", ";", ":,", "|", " \t,"]))
    column = draw(st.sampled_from([None, None, 1, 2, 3]))
    col = column or 1
    joiners = list(delim) if delim else [" ", "\t", "  "]
    files = []
    for _ in range(nfiles):
        values = draw(SMALL if _chance(draw, 3) else DATASET)
        lines = []
        for v in values:
            tok = _text(v, draw(st.integers(0, 3)))
            cells = [draw(st.sampled_from(["7", "-3.5", "x", "1e9", "#c"])) for _ in range(col - 1)]
            cells.append(tok)
            cells += [draw(st.sampled_from(["9", "y"]))] * draw(st.integers(0, 2))
            j = draw(st.sampled_from(joiners))
            line = j.join(cells)
            line = draw(st.sampled_from(["", " ", "\t", j])) + line
            line += draw(st.sampled_from(["", "", " ", "\r", " \t"]))
            lines.append(line)
        extra = draw(
            st.lists(
                st.sampled_from(
                    ["", "# comment", "   ", "#"]
                    + ([] if delim else ["\t# x", "12 # only the first column counts"])
                ),
                max_size=3,
            )
        )
        for e in extra:
            lines.insert(draw(st.integers(0, len(lines))), e)
        if _chance(draw, 2):  # now and then: invalid data
            bad = draw(st.sampled_from(["abc", "1x", "1,5", "0x", "--1", "1e", "nan(", "1 e5"]))
            lines.insert(draw(st.integers(0, len(lines))), bad)
        files.append(lines)

    opts: list[list[str]] = []
    flags = draw(st.sets(st.sampled_from("Ans")))
    if flags:
        cluster = "".join(sorted(flags))
        if draw(st.booleans()):
            opts.append(["-" + cluster])
        else:
            opts += [["-" + f] for f in sorted(flags)]
    confs = [None, None, "80", "90", "95", "98", "99", "99.5", "99.50", "9.5e1"]
    conf = draw(st.sampled_from(["97", "abc"] if _chance(draw, 4) else confs))
    width = draw(st.sampled_from([None, None, 0, 2, 3, 5, 10, 20, 40, 73, 74, 100, 132, 200]))
    for letter, val in (("c", conf), ("w", width), ("C", column), ("d", delim)):
        if val is None:
            continue
        opts.append([f"-{letter}{val}"] if draw(st.booleans()) else [f"-{letter}", str(val)])
    opts = draw(st.permutations(opts))
    split = draw(st.integers(0, len(opts)))  # GNU getopt permutes: options may follow files
    return (
        files,
        [a for o in opts[:split] for a in o],
        {"after": [a for o in opts[split:] for a in o]},
    )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenario())
def test_hypothesis_matches_ministat(case: tuple[list[list[str]], list[str], dict]) -> None:
    files, before, layout = case
    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for i, lines in enumerate(files):
            p = Path(tmp, f"set{i}")
            p.write_text("".join(line + "\n" for line in lines))
            names.append(str(p))
        assert_same(before + names[:1] + layout["after"] + names[1:])


NONFINITE = st.lists(
    st.one_of(
        st.sampled_from(["nan", "-nan", "NaN(1)", "inf", "-Infinity", "1e999", "-0"]),
        st.integers(-5, 5).map(str),
    ),
    min_size=3,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(NONFINITE, min_size=1, max_size=4), st.sampled_from(["-n", "-A", "-As"]))
def test_hypothesis_nonfinite(sets: list[list[str]], flag: str) -> None:
    """NaN/inf data: glibc's merge-sort order and the sign of each NaN."""
    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for i, tokens in enumerate(sets):
            p = Path(tmp, f"nf{i}")
            p.write_text("".join(t + "\n" for t in tokens))
            names.append(str(p))
        assert_same([flag, *names])
        assert_same(names)  # the plot: ministat mostly segfaults here


# ---------------------------------------------------------------------------
# Fixed cases: errors, option syntax, quirks


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    data = {
        "a": "1\n2\n3\n",
        "b": "10 # ten\n12\n# skipped\n\n11.5\n13\n",
        "c": "5,1\n6,2\n7,3\n8,4\n",
        "two": "1\n2\n",
        "bad": "1\n2\nthree\n4\n",
        "zero": "0\n0\n0\n",
        "one": "1\n1\n1\n",
        "tenth": "0.1\n0.1\n0.1\n",
        "nan": "nan\n-nan\n1\n",
        "nan2": "1\nNaN\n3\n4\n",
        "inf": "1\ninf\n3\n",
        "big": "1e308\n1e308\n1e308\n",
        "hex": "0x10\n0x1p-2\n-0X.8P1\n  7\n",
        "crlf": "1\r\n2\r\n3\r\n",
        "long": "1\n" + "2" * 9000 + "\n3\n4\n",
        "nul": "1\n2\x003\n3\n4\n",
    }
    out = {}
    for name, text in data.items():
        p = tmp_path / name
        p.write_bytes(text.encode())
        out[name] = str(p)
    (tmp_path / "dir").mkdir()
    out["dir"] = str(tmp_path / "dir")
    out["missing"] = str(tmp_path / "missing")
    return out


CASES = [
    ["a", "b"],
    ["-s", "-w", "30", "a", "b", "c"],
    ["-n", "a", "b"],
    ["-A", "a", "b"],
    ["-An", "a", "b"],
    ["-c80", "a", "b"],
    ["-c", "99.5", "a", "b"],
    ["-c", "80", "-c", "97", "a", "b"],  # a rejected -c keeps the earlier level
    ["-c", "0x50", "a", "b"],  # strtod() reads hex
    ["-c", "97", "a"],
    ["-c", "abc", "a"],
    ["-c", "", "a"],
    ["-C", "2", "-d", ",", "c", "c"],
    ["-C0", "a"],
    ["-C", "x", "a"],
    ["-C", "", "a"],
    ["-C", "4294967297", "a"],  # strtol() then int truncation: column 1
    ["-w", "-1", "a"],
    ["-w", "x", "a"],
    ["-w", "", "a", "b"],  # empty width parses as 0
    ["-w", "0", "a", "b"],
    ["-w1", "a", "b"],  # ministat segfaults here
    ["-w", "2", "-s", "a", "b"],
    ["-d", "", "a"],
    ["-q", "a"],
    ["-w"],
    ["-nw"],
    ["--jsn", "a"],  # unknown long options fail as ministat fails on "--"
    ["-x", "--welch"],
    ["a", "-n", "b"],  # GNU getopt permutation
    ["--", "-n"],
    ["a", "--", "b", "-n"],
    ["missing"],
    ["a", "missing"],
    ["two"],
    ["a", "two"],
    ["bad"],
    ["a", "bad"],
    ["dir"],
    ["a"] * 8,
    ["a"] * 7,
    ["-A", "zero", "one"],  # inf% +/- -nan%
    ["-A", "tenth", "tenth"],  # one-pass variance goes negative: -nan
    ["-n", "nan", "nan2"],  # glibc merge sort order with NaN
    ["-A", "nan", "nan2"],
    ["nan2"],  # segfault in the plot
    ["-n", "inf", "big"],
    ["big"],
    ["-n", "hex"],
    ["-n", "crlf"],
    ["-n", "long"],  # fgets() with an 8 KiB buffer splits the line
    ["-n", "nul"],
    ["-s", "b", "a", "hex"],
    ["", "a"],
]


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a) or "-")
def test_fixed_cases(args: list[str], files: dict[str, str]) -> None:
    assert_same([files.get(a, a) for a in args])


def test_stdin(files: dict[str, str]) -> None:
    data = b"3\n1\n2\n5\n"
    assert_same([], data)
    assert_same(["-"], data)
    assert_same(["-", files["a"]], data)
    assert_same(["-", "-"], data)  # ministat fclose()s stdin: the 2nd read is empty
    assert_same([], b"1\n2\n")


def test_posixly_correct(files: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLY_CORRECT", "1")
    exe = _need_ministat()
    args = [files["a"], "-n", files["b"]]
    p = subprocess.run(["ministat", *args], executable=exe, capture_output=True, env=os.environ)
    got = run_ours(args)
    assert (got[0], got[2]) == (p.stdout.decode(), p.returncode)


def _tty_ministat(args: list[str], cols: int, columns_env: str | None) -> str:
    import fcntl
    import termios

    exe = _need_ministat()
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    env = dict(ENV)
    if columns_env is not None:
        env["COLUMNS"] = columns_env
    p = subprocess.Popen(["ministat", *args], executable=exe, stdout=slave, env=env)
    p.wait(timeout=30)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return b"".join(chunks).decode().replace("\r\n", "\n")


class _FakeTty(io.StringIO):
    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd


@pytest.mark.parametrize("cols,columns_env", [(60, None), (100, "50"), (90, "")])
def test_terminal_width(
    files: dict[str, str], monkeypatch: pytest.MonkeyPatch, cols: int, columns_env: str | None
) -> None:
    """On a tty the width is $COLUMNS, else the window's columns - 2."""
    import fcntl
    import termios

    args = [files["a"], files["b"]]
    expected = _tty_ministat(args, cols, columns_env)
    master, slave = pty.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
        monkeypatch.delenv("COLUMNS", raising=False)
        if columns_env is not None:
            monkeypatch.setenv("COLUMNS", columns_env)
        out = _FakeTty(slave)
        assert main(args, stdout=out, stderr=io.StringIO()) == 0
    finally:
        os.close(master)
        os.close(slave)
    assert out.getvalue() == expected


# ---------------------------------------------------------------------------
# The seed comparison: FreeBSD forwarding, r285050 vs r285051

R285050 = [397733, 398854, 398735, 405788, 406951]
R285051 = [478095, 481141, 480315, 481080, 482079]
SEED_LINES = (
    "Difference at 95.0% confidence\n"
    "\t78929.8 +/- 4779.72\n"
    "\t19.6532% +/- 1.19013%\n"
    "\t(Student's t, pooled s = 3277.27)\n"
)


def test_seed_comparison(tmp_path: Path) -> None:
    """5+5 samples within the published min/max that reproduce ministat's line.

    The published samples are lost; these were solved for (sums, then the sum of
    squares) so that ministat prints exactly the published difference line.
    """
    assert (min(R285050), max(R285050)) == (397733, 406951)
    assert (min(R285051), max(R285051)) == (478095, 482079)
    before, after = tmp_path / "r285050", tmp_path / "r285051"
    before.write_text("".join(f"{v}\n" for v in R285050))
    after.write_text("".join(f"{v}\n" for v in R285051))
    out, err, rc = assert_same([str(before), str(after)])
    assert rc == 0 and err == ""
    assert out.endswith(SEED_LINES)
    text = render([("r285050", R285050), ("r285051", R285051)])
    assert text.endswith(SEED_LINES)
    c = compare(R285050, R285051)
    assert c["significant"]
    keys = ("difference", "plus_minus", "percent", "percent_plus_minus", "pooled_s")
    assert " ".join(f"{c[k]:g}" for k in keys) == "78929.8 4779.72 19.6532 1.19013 3277.27"


# ---------------------------------------------------------------------------
# Python API and the extensions


def test_summarize_and_render_match_cli(files: dict[str, str]) -> None:
    s = summarize([3, 1, 2, 10])
    assert s == {"n": 4, "min": 1.0, "max": 10.0, "median": 3.0, "avg": 4.0, "stddev": s["stddev"]}
    assert s["median"] == 3.0  # upper middle value, as ministat
    with pytest.raises(ValueError):
        summarize([1, 2])
    a, b = [1.0, 2.0, 3.0], [10.0, 12.0, 11.5, 13.0]
    out, _, _ = run_ours(["-s", "-w", "50", files["a"], files["b"]])
    assert render([(files["a"], a), (files["b"], b)], width=50, separate=True) == out
    out, _, _ = run_ours(["-A", "-c", "80", files["a"], files["b"]])
    assert render([(files["a"], a), (files["b"], b)], confidence=80, no_plot=True) == out
    with pytest.raises(ValueError):
        render([("x", a)], confidence=97)
    with pytest.raises(PlotCrash):
        render([("x", [1, 2, 3]), ("y", [1, 2, math.nan])])


def test_student_table_shape() -> None:
    assert len(STUDENT) == 101 and all(len(r) == 6 for r in STUDENT)
    assert STUDENT[0] == (1.282, 1.645, 1.960, 2.326, 2.576, 3.090)
    assert STUDENT[8][2] == 2.306


def test_welch(files: dict[str, str]) -> None:
    # Equal n and equal variances: Welch's df is the pooled df and t agrees.
    base, other = [1.0, 2.0, 3.0, 4.0], [11.0, 12.0, 13.0, 14.0]
    w, s = compare_welch(base, other), compare(base, other)
    assert w["df"] == pytest.approx(6.0)
    assert w["plus_minus"] == pytest.approx(s["plus_minus"])
    # Unequal variances: df from Welch-Satterthwaite.
    base, other = [1.0, 1.1, 0.9, 1.0, 1.05], [5.0, 9.0, 1.0, 12.0]
    w = compare_welch(base, other)
    v1, v2 = statistics.variance(other) / 4, statistics.variance(base) / 5
    assert w["df"] == pytest.approx((v1 + v2) ** 2 / (v1**2 / 3 + v2**2 / 4), rel=1e-9)
    # --welch keeps ministat's text and appends its own block after each comparison.
    plain, _, _ = run_ours([files["a"], files["b"]])
    out, err, rc = run_ours(["--welch", files["a"], files["b"]])
    assert rc == 0 and err == ""
    assert out.startswith(plain)
    assert out[len(plain) :].startswith("Difference at 95.0% confidence (Welch's t)\n")
    out, _, _ = run_ours(["-An", "--welch", files["a"], files["b"]])
    assert "Welch" not in out


def test_json(files: dict[str, str]) -> None:
    out, err, rc = run_ours(["-c95", "--json", "--welch", files["a"], files["b"]])
    assert rc == 0 and err == ""
    doc = json.loads(out)
    assert doc["confidence"] == 95.0
    assert [d["n"] for d in doc["datasets"]] == [3, 4]
    assert doc["datasets"][1]["values"] == [10.0, 11.5, 12.0, 13.0]
    (c,) = doc["comparisons"]
    assert c["significant"] is True and "welch" in c
    assert c == {**compare([1, 2, 3], [10, 12, 11.5, 13]), **c}
    out, _, _ = run_ours(["--json", files["nan"]])
    assert json.loads(out)["datasets"][0]["avg"] is None


def test_png(files: dict[str, str], tmp_path: Path) -> None:
    png = tmp_path / "out.png"
    expected = run_ministat([files["a"], files["b"]])
    got = run_ours(["--png", str(png), files["a"], files["b"]])
    assert got == expected  # the text is untouched
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    got = run_ours([f"--png={tmp_path / 'no' / 'such.png'}", files["a"]])
    assert got[2] == 1 and "Cannot write" in got[1]
    got = run_ours([files["a"], "--png"])
    assert got[2] == 2 and "requires an argument" in got[1]


_libc = ctypes.CDLL(None)


def _c_printf(fmt: bytes, x: float) -> str:
    buf = ctypes.create_string_buffer(512)
    _libc.snprintf(buf, 512, fmt, ctypes.c_double(x))
    return buf.value.decode()


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False))
def test_printf_g_matches_glibc(x: float) -> None:
    for spec in ("%g", "%13.8g", "%.1f"):
        assert stat._cfmt(spec, x) == _c_printf(spec.encode(), x)
