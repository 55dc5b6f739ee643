"""``vecroute stat``: a byte-for-byte clone of Debian's ``ministat`` (20150715).

Benchmark results in this project are compared the way FreeBSD's network people
compare them: with ``ministat``.  Re-implementing it (instead of shelling out)
lets benchmarks call it as a library and adds Welch's test, JSON and PNG output,
while the text stays identical to ministat's so that numbers can be checked
against published ministat runs.  Everything here therefore copies ministat's
arithmetic and its C library behaviour (glibc ``getopt``, ``strtod``, ``strtok``,
``qsort``, ``printf``), quirks included; see docs/stat.md.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from vecroute.measure.student_t import NSTUDENT, STUDENT, STUDENT_PCT

__all__ = [
    "PlotCrash",
    "SYMBOLS",
    "compare",
    "compare_welch",
    "main",
    "render",
    "summarize",
]

#: Plot symbols; index 0 is an empty cell, 1..7 the data sets.  A cell shared by
#: several sets shows the bitwise OR of their indices (ministat does this too).
SYMBOLS = " x+*%#@O"
MAX_DS = 7
DEFAULT_WIDTH = 74
PROG = "vecroute stat"

_OPTSTRING = "AC:c:d:snw:"
_LONGOPTS = {"welch": False, "json": False, "png": True}  # name -> takes an argument
_FGETS_CHUNK = 8191  # ministat reads with fgets(buf, BUFSIZ=8192, f)
_CSPACE = b" \t\n\v\f\r"  # isspace() in the C locale
_USAGE_TAIL = " [-C column] [-c confidence] [-d delimiter(s)] [-Ans] [-w width] [file [file ...]]\n"


class PlotCrash(ValueError):
    """The ASCII plot needs a non-finite coordinate.

    ministat converts such a coordinate to INT_MIN and writes through it, dying
    with SIGSEGV (width 1, NaN/inf data, overflowing sums); we raise instead.
    """


class _Exit(Exception):
    """Internal: stop ``main`` with an exit code (ministat calls exit())."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# ---------------------------------------------------------------------------
# C arithmetic and library emulation


def _isnan(x: float) -> bool:
    return x != x


def _neg_nan() -> float:
    """The x86 "default NaN" (sign bit set) that 0/0, inf-inf and sqrt(-1) give."""
    return math.copysign(math.nan, -1.0)


def _cdiv(a: float, b: float) -> float:
    """IEEE division as C does it: no ZeroDivisionError."""
    if b != 0.0 or _isnan(b):
        return a / b
    if _isnan(a):
        return a
    if a == 0.0:
        return _neg_nan()
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _csqrt(x: float) -> float:
    """sqrt() as libm/SSE does it: a negative argument gives -nan, not an error."""
    if _isnan(x):
        return x
    if x < 0.0:
        return _neg_nan()
    return math.sqrt(x)


def _cint(x: float) -> int:
    """(int) conversion of a double; raise where x86 would give INT_MIN garbage."""
    if not math.isfinite(x) or not -2147483648.0 <= x < 2147483648.0:
        raise PlotCrash("plot coordinate is not a finite int")
    return int(x)


def _int32(v: int) -> int:
    """Store a C long into an int: clamp like strtol, keep the low 32 bits."""
    v = max(-(1 << 63), min((1 << 63) - 1, v))
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def _cfmt(spec: str, x: float) -> str:
    """printf() one double; glibc prints a NaN's sign ("-nan"), Python does not."""
    if _isnan(x) and math.copysign(1.0, x) < 0:
        width = re.match(r"%(\d*)", spec)
        return "-nan".rjust(int(width.group(1) or 0)) if width else "-nan"
    return spec % x


_STRTOD_RE = re.compile(
    rb"[ \t\n\v\f\r]*([+-]?)(?:"
    rb"(0[xX](?:[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)"
    rb"|((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    rb"|([iI][nN][fF](?:[iI][nN][iI][tT][yY])?)"
    rb"|([nN][aA][nN](?:\([0-9A-Za-z_]*\))?)"
    rb")"
)
_STRTOL_RE = re.compile(rb"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def _strtod(s: bytes) -> tuple[float, int]:
    """C-locale strtod(): the value and how many bytes it consumed (0 = none)."""
    m = _STRTOD_RE.match(s)
    if m is None:
        return 0.0, 0
    sign = -1.0 if m.group(1) == b"-" else 1.0
    if m.group(2):
        try:
            v = float.fromhex(m.group(2).decode())
        except OverflowError:
            v = math.inf
    elif m.group(3):
        v = float(m.group(3))
    elif m.group(4):
        v = math.inf
    else:
        v = math.nan
    return math.copysign(v, sign), m.end()


def _strtol(s: bytes) -> tuple[int, int]:
    """strtol(s, &end, 10) stored into an int: the value and bytes consumed."""
    m = _STRTOL_RE.match(s)
    if m is None:
        return 0, 0
    return _int32(int(m.group(1))), m.end()


def _full_strtod(arg: str) -> float | None:
    """strtod() on an option argument; None unless it consumed all of it."""
    raw = os.fsencode(arg)
    v, used = _strtod(raw)
    return v if used == len(raw) else None


def _full_strtol(arg: str) -> int | None:
    raw = os.fsencode(arg)
    v, used = _strtol(raw)
    return v if used == len(raw) else None


def _dbl_cmp(a: float, b: float) -> int:
    return -1 if a < b else (1 if a > b else 0)


def _msort(a: list[float]) -> list[float]:
    """glibc 2.36 qsort() (a top-down merge sort); only NaN makes it matter."""
    n = len(a)
    if n <= 1:
        return a
    n1 = n // 2
    b1, b2 = _msort(a[:n1]), _msort(a[n1:])
    out: list[float] = []
    i = j = 0
    while i < len(b1) and j < len(b2):
        if _dbl_cmp(b1[i], b2[j]) <= 0:
            out.append(b1[i])
            i += 1
        else:
            out.append(b2[j])
            j += 1
    out.extend(b1[i:])
    out.extend(b2[j:])
    return out


def _qsort(values: Sequence[float]) -> list[float]:
    if any(_isnan(v) for v in values):
        return _msort(list(values))
    return sorted(values)  # stable, like glibc's merge sort, so -0.0/0.0 agree


# ---------------------------------------------------------------------------
# Data sets and statistics (ministat's Min/Max/Median/Avg/Var/Stddev)


@dataclass
class _Dataset:
    name: str
    points: list[float] = field(default_factory=list)  # sorted, once complete
    sy: float = 0.0
    syy: float = 0.0

    def add(self, a: float) -> None:
        # ds->sy += a; ds->syy += a * a;  With two NaNs SSE keeps the
        # destination operand: sy for the first sum, a*a for the second.
        self.points.append(a)
        self.sy = self.sy if _isnan(self.sy) else self.sy + a
        sq = a * a
        self.syy = sq if _isnan(sq) else sq + self.syy

    @property
    def n(self) -> int:
        return len(self.points)

    def min(self) -> float:
        return self.points[0]

    def max(self) -> float:
        return self.points[-1]

    def median(self) -> float:
        return self.points[self.n // 2]  # upper middle value for even n

    def avg(self) -> float:
        return self.sy / self.n

    def var(self) -> float:
        # (syy - sy * sy / n) / (n - 1.0): the one-pass formula, rounding and all
        q = self.sy * self.sy / self.n
        top = self.syy if _isnan(self.syy) else self.syy - q
        return _cdiv(top, self.n - 1.0)

    def stddev(self) -> float:
        return _csqrt(self.var())


def _make_dataset(name: str, values: Sequence[float]) -> _Dataset:
    ds = _Dataset(name)
    for v in values:
        ds.add(float(v))
    ds.points = _qsort(ds.points)
    return ds


def _conf_index(confidence: float) -> int:
    for i, pct in enumerate(STUDENT_PCT):
        if confidence == pct:
            return i
    raise ValueError(
        f"no support for confidence level {confidence!r}; use one of "
        + ", ".join(f"{p:g}" for p in STUDENT_PCT)
    )


def _t_for(df: int, ci: int) -> float:
    return STUDENT[0][ci] if df > NSTUDENT else STUDENT[df][ci]


def _relative(ds: _Dataset, rs: _Dataset, ci: int) -> dict[str, Any]:
    """ministat's Relative(): pooled-variance Student's t of ds against rs."""
    df = ds.n + rs.n - 2
    t = _t_for(df, ci)
    spool = (ds.n - 1) * ds.var() + (rs.n - 1) * rs.var()
    spool = spool / float(df)
    spool = _csqrt(spool)
    s = spool * math.sqrt(1.0 / ds.n + 1.0 / rs.n)
    d = ds.avg() - rs.avg()
    e = t * s
    return {
        "confidence": STUDENT_PCT[ci],
        "difference": d,
        "plus_minus": e,
        "percent": _cdiv(d * 100, rs.avg()),
        "percent_plus_minus": _cdiv(e * 100, rs.avg()),
        "pooled_s": spool,
        "t": t,
        "df": df,
        "significant": bool(abs(d) > e),
    }


def _welch(ds: _Dataset, rs: _Dataset, ci: int) -> dict[str, Any]:
    """Welch's unequal-variance t-test with Welch-Satterthwaite df.

    The t value comes from ministat's table at floor(df) so both tests share
    the same (3-decimal) precision.
    """
    v1 = _cdiv(ds.var(), float(ds.n))
    v2 = _cdiv(rs.var(), float(rs.n))
    se = _csqrt(v1 + v2)
    den = v1 * v1 / (ds.n - 1) + v2 * v2 / (rs.n - 1)
    if den > 0.0:
        df = (v1 + v2) * (v1 + v2) / den
    else:
        df = float(ds.n + rs.n - 2)  # no variance at all: nothing to correct
    dfi = max(1, math.floor(df)) if math.isfinite(df) else NSTUDENT + 1
    t = _t_for(dfi, ci)
    d = ds.avg() - rs.avg()
    e = t * se
    return {
        "confidence": STUDENT_PCT[ci],
        "difference": d,
        "plus_minus": e,
        "percent": _cdiv(d * 100, rs.avg()),
        "percent_plus_minus": _cdiv(e * 100, rs.avg()),
        "se": se,
        "t": t,
        "df": df,
        "significant": bool(abs(d) > e),
    }


# ---------------------------------------------------------------------------
# Text output


def _vitals_head() -> str:
    return "    N           Min           Max        Median           Avg        Stddev\n"


def _vitals(ds: _Dataset, flag: int) -> str:
    cells = [ds.min(), ds.max(), ds.median(), ds.avg(), ds.stddev()]
    return f"{SYMBOLS[flag]} {ds.n:3d} " + " ".join(_cfmt("%13.8g", v) for v in cells) + "\n"


def _relative_text(r: dict[str, Any]) -> str:
    pct = f"{r['confidence']:.1f}"
    if not r["significant"]:
        return f"No difference proven at {pct}% confidence\n"
    return (
        f"Difference at {pct}% confidence\n"
        f"\t{_cfmt('%g', r['difference'])} +/- {_cfmt('%g', r['plus_minus'])}\n"
        f"\t{_cfmt('%g', r['percent'])}% +/- {_cfmt('%g', r['percent_plus_minus'])}%\n"
        f"\t(Student's t, pooled s = {_cfmt('%g', r['pooled_s'])})\n"
    )


def _welch_text(r: dict[str, Any]) -> str:
    pct = f"{r['confidence']:.1f}"
    df = _cfmt("%g", r["df"])
    if not r["significant"]:
        return f"No difference proven at {pct}% confidence (Welch's t, df = {df})\n"
    return (
        f"Difference at {pct}% confidence (Welch's t)\n"
        f"\t{_cfmt('%g', r['difference'])} +/- {_cfmt('%g', r['plus_minus'])}\n"
        f"\t{_cfmt('%g', r['percent'])}% +/- {_cfmt('%g', r['percent_plus_minus'])}%\n"
        f"\t(Welch's t, df = {df}, s = {_cfmt('%g', r['se'])})\n"
    )


class _Plot:
    """ministat's struct plot with SetupPlot/AdjPlot/DimPlot/PlotSet/DumpPlot."""

    def __init__(self, width: int, separate: bool, num_datasets: int) -> None:
        self.width = width
        self.height = 0
        self.data = bytearray()
        self.data_null = True  # pl->data == NULL
        self.bar: list[bytearray | None] | None = None
        self.separate = separate
        self.num = num_datasets
        self.min = 999e99
        self.max = -999e99
        self.span = 0.0
        self.dx = 0.0
        self.x0 = 0.0

    def adj(self, a: float) -> None:
        if a < self.min:
            self.min = a
        if a > self.max:
            self.max = a
        self.span = self.max - self.min
        self.dx = _cdiv(self.span, self.width - 1.0)
        self.x0 = self.min - 0.5 * self.dx

    def dim(self, ds: _Dataset) -> None:
        self.adj(ds.min())
        self.adj(ds.max())
        self.adj(ds.avg() - ds.stddev())
        self.adj(ds.avg() + ds.stddev())

    def _x(self, v: float) -> int:
        return _cint(_cdiv(v - self.x0, self.dx))

    def plot_set(self, ds: _Dataset, val: int) -> None:
        if self.span == 0:
            return
        w = self.width
        bar = val - 1 if self.separate else 0
        if self.bar is None:
            self.bar = [None] * self.num
        row = self.bar[bar]
        if row is None:
            row = self.bar[bar] = bytearray(max(w, 0))
        xs = [self._x(p) for p in ds.points]
        m, i, j = 1, -1, 0
        for x in xs:
            if x == i:
                j += 1
                m = max(m, j)
            else:
                j, i = 1, x
        m += 1
        if m > self.height:
            # realloc + memset of the new rows only: rows that a smaller set
            # hid (height shrinks below) are wiped when it grows again.
            # With width 0 glibc's realloc(p, 0) frees p and returns NULL,
            # so the writes below crash ministat on the second growth.
            self.data_null = not self.data_null if w * m == 0 else False
            if len(self.data) < w * m:
                self.data.extend(bytes(w * m - len(self.data)))
            self.data[self.height * w : m * w] = bytes((m - self.height) * w)
        self.height = m
        if self.data_null:
            raise PlotCrash("ministat writes through a NULL plot buffer here")
        i = -1
        for x in xs:
            if x == i:
                j += 1
            else:
                j, i = 1, x
            if 0 <= x < w:  # C would scribble out of bounds (width 0 only)
                self.data[j * w + x] |= val

        def put(x: int, c: int) -> None:
            if 0 <= x < w:
                row[x] = c

        sd = ds.stddev()
        if not _isnan(sd):
            x = self._x(ds.avg() - sd)
            m = self._x(ds.avg() + sd)
            put(m, ord("|"))
            put(x, ord("|"))
            for i in range(x + 1, m):
                if 0 <= i < w and row[i] == 0:
                    row[i] = ord("_")
        put(self._x(ds.median()), ord("M"))
        put(self._x(ds.avg()), ord("A"))

    def dump(self) -> str:
        if self.span == 0:
            return "[no plot, span is zero width]\n"
        w = self.width
        edge = "+" + "-" * w + "+\n"
        out = [edge]
        for i in range(1, self.height):
            base = (self.height - i) * w
            out.append("|" + "".join(SYMBOLS[k] for k in self.data[base : base + w]) + "|\n")
        for row in self.bar or []:
            if row is not None:
                out.append("|" + row.decode("latin-1").replace("\0", " ") + "|\n")
        out.append(edge)
        return "".join(out)


def _render(
    dss: list[_Dataset],
    ci: int,
    width: int,
    *,
    separate: bool,
    no_plot: bool,
    stats_only: bool,
    welch: bool,
) -> str:
    out = [f"{SYMBOLS[i + 1]} {ds.name}\n" for i, ds in enumerate(dss)]
    if not stats_only and not no_plot:
        plot = _Plot(width, separate, len(dss))
        for ds in dss:
            plot.dim(ds)
        for i, ds in enumerate(dss):
            plot.plot_set(ds, i + 1)
        out.append(plot.dump())
    out.append(_vitals_head())
    out.append(_vitals(dss[0], 1))
    for i in range(1, len(dss)):
        out.append(_vitals(dss[i], i + 1))
        if not stats_only:
            out.append(_relative_text(_relative(dss[i], dss[0], ci)))
            if welch:
                out.append(_welch_text(_welch(dss[i], dss[0], ci)))
    return "".join(out)


# ---------------------------------------------------------------------------
# Public Python API


def summarize(values: Sequence[float]) -> dict[str, float | int]:
    """N, Min, Max, Median, Avg and Stddev exactly as ministat computes them.

    Raises ValueError for fewer than 3 values, which ministat refuses too.
    """
    if len(values) < 3:
        raise ValueError("a data set must contain at least 3 data points")
    ds = _make_dataset("", values)
    return {
        "n": ds.n,
        "min": ds.min(),
        "max": ds.max(),
        "median": ds.median(),
        "avg": ds.avg(),
        "stddev": ds.stddev(),
    }


def compare(
    base: Sequence[float], other: Sequence[float], confidence: float = 95.0
) -> dict[str, Any]:
    """ministat's Student's t comparison of ``other`` against ``base``.

    Keys: difference (avg(other) - avg(base)), plus_minus, percent,
    percent_plus_minus (relative to avg(base)), pooled_s, t, df, confidence
    and significant (ministat prints "Difference at ..." exactly when true).
    """
    if len(base) < 3 or len(other) < 3:
        raise ValueError("a data set must contain at least 3 data points")
    ci = _conf_index(confidence)
    return _relative(_make_dataset("", other), _make_dataset("", base), ci)


def compare_welch(
    base: Sequence[float], other: Sequence[float], confidence: float = 95.0
) -> dict[str, Any]:
    """Welch's t comparison (what ``--welch`` prints); ``se`` replaces pooled_s."""
    if len(base) < 3 or len(other) < 3:
        raise ValueError("a data set must contain at least 3 data points")
    ci = _conf_index(confidence)
    return _welch(_make_dataset("", other), _make_dataset("", base), ci)


def render(
    datasets: Sequence[tuple[str, Sequence[float]]],
    confidence: float = 95.0,
    width: int = DEFAULT_WIDTH,
    *,
    separate: bool = False,
    no_plot: bool = False,
    stats_only: bool = False,
    welch: bool = False,
) -> str:
    """The exact text ministat prints for in-memory data sets.

    ``name`` is what the legend shows.  ``separate``/``no_plot``/``stats_only``
    are ``-s``/``-A``/``-n``.  Raises ValueError for what ministat rejects and
    PlotCrash where ministat would crash drawing the plot.
    """
    if not 1 <= len(datasets) <= MAX_DS:
        raise ValueError(f"between 1 and {MAX_DS} data sets are supported")
    if width < 0:
        raise ValueError("width must not be negative")
    ci = _conf_index(confidence)
    dss = []
    for name, values in datasets:
        if len(values) < 3:
            raise ValueError(f"Dataset {name} must contain at least 3 data points")
        dss.append(_make_dataset(name, values))
    return _render(
        dss, ci, width, separate=separate, no_plot=no_plot, stats_only=stats_only, welch=welch
    )


# ---------------------------------------------------------------------------
# Command line


def _getopt(
    args: list[str], prog: str, err: TextIO
) -> Iterator[tuple[str, str | None] | list[str]]:
    """glibc getopt(argc, argv, "AC:c:d:snw:") with GNU argument permutation.

    Yields (option, argument) pairs one at a time, so that the caller can reject
    an option before later ones are looked at (as ministat does), then the list
    of operands last.  Errors yield ("?", None) after glibc's message.  Our long
    options are recognised only when spelled exactly; anything else starting
    with "--" goes through the short-option path, as ministat would see it.
    """
    posix = "POSIXLY_CORRECT" in os.environ
    operands: list[str] = []
    idx = 0
    while idx < len(args):
        a = args[idx]
        idx += 1
        if a == "--":
            operands.extend(args[idx:])
            break
        if not a.startswith("-") or a == "-":
            if posix:
                operands.extend(args[idx - 1 :])
                break
            operands.append(a)
            continue
        if a.startswith("--"):
            name, eq, val = a[2:].partition("=")
            if name in _LONGOPTS:
                if _LONGOPTS[name]:
                    if not eq:
                        if idx >= len(args):
                            err.write(f"{prog}: option '--{name}' requires an argument\n")
                            yield ("?", None)
                            continue
                        val = args[idx]
                        idx += 1
                    yield ("--" + name, val)
                elif eq:
                    err.write(f"{prog}: option '--{name}' doesn't allow an argument\n")
                    yield ("?", None)
                else:
                    yield ("--" + name, None)
                continue
        k = 1
        while k < len(a):
            c = a[k]
            k += 1
            pos = _OPTSTRING.find(c)
            if pos < 0 or c in ":;":
                err.write(f"{prog}: invalid option -- '{c}'\n")
                yield ("?", None)
                continue
            if _OPTSTRING[pos + 1 : pos + 2] != ":":
                yield (c, None)
                continue
            if k < len(a):
                optarg = a[k:]
            elif idx < len(args):
                optarg = args[idx]
                idx += 1
            else:
                err.write(f"{prog}: option requires an argument -- '{c}'\n")
                yield ("?", None)
                break
            yield (c, optarg)
            break
    yield operands


def _atoi(s: str) -> int:
    v, _ = _strtol(os.fsencode(s))
    return v


def _read_bytes(f: TextIO) -> bytes:
    buf = getattr(f, "buffer", None)
    if buf is not None:
        return buf.read()
    return f.read().encode("utf-8", "surrogateescape")


class _Cli:
    """State of one ministat run (its globals and exit paths)."""

    def __init__(self, prog: str, stdin: TextIO, err: TextIO) -> None:
        self.prog = prog
        self.stdin = stdin
        self.stdin_used = False
        self.err = err

    def usage(self, whine: str) -> None:
        e = self.err
        e.write(f"{whine}\n")
        e.write(f"Usage: {self.prog}{_USAGE_TAIL}")
        e.write("\tconfidence = {" + ", ".join(f"{p:g}%" for p in STUDENT_PCT) + "}\n")
        e.write("\t-A : print statistics only. suppress the graph.\n")
        e.write("\t-C : column number to extract (starts and defaults to 1)\n")
        e.write('\t-d : delimiter(s) string, default to " \\t"\n')
        e.write("\t-n : print summary statistics only, no graph/test\n")
        e.write("\t-s : print avg/median/stddev bars on separate lines\n")
        e.write("\t-w : width of graph/test output (default 74 or terminal width)\n")
        raise _Exit(2)

    def read_set(self, name: str, column: int, delim: bytes) -> _Dataset:
        """ministat's ReadSet() (Debian: trailing isspace() stripped per line)."""
        if name == "-":
            shown = "<stdin>"
            # ministat fclose()s stdin after reading it: a second "-" is empty.
            data = b"" if self.stdin_used else _read_bytes(self.stdin)
            self.stdin_used = True
        else:
            shown = name
            try:
                with open(name, "rb") as f:
                    data = f.read()
            except IsADirectoryError:
                data = b""  # fopen() works, fgets() fails: no data points
            except OSError as exc:
                self.err.write(f"{self.prog}: Cannot open {name}: {exc.strerror}\n")
                raise _Exit(1) from None
        table = bytes.maketrans(delim, delim[:1] * len(delim))
        sep = delim[:1]
        ds = _Dataset(shown)
        pos, line, size = 0, 0, len(data)
        while pos < size:
            nl = data.find(b"\n", pos, pos + _FGETS_CHUNK)
            end = nl + 1 if nl >= 0 else min(pos + _FGETS_CHUNK, size)
            buf = data[pos:end]
            pos = end
            line += 1
            nul = buf.find(b"\0")
            if nul >= 0:
                buf = buf[:nul]
            buf = buf.rstrip(_CSPACE)
            tok = None
            for i, t in enumerate((t for t in buf.translate(table).split(sep) if t), 1):
                if t[:1] == b"#":
                    break
                if i == column:
                    tok = t
                    break
            if tok is None:
                continue
            d, used = _strtod(tok)
            if used != len(tok):
                self.err.write(f"{self.prog}: Invalid data on line {line} in {shown}\n")
                raise _Exit(2)
            ds.add(d)
        if ds.n < 3:
            self.err.write(f"Dataset {shown} must contain at least 3 data points\n")
            raise _Exit(2)
        ds.points = _qsort(ds.points)
        return ds


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_jsonable(v) for v in x]
    return x


def _json_report(dss: list[_Dataset], ci: int, stats_only: bool, welch: bool) -> str:
    sets = []
    for i, ds in enumerate(dss):
        sets.append(
            {
                "symbol": SYMBOLS[i + 1],
                "name": ds.name,
                "n": ds.n,
                "min": ds.min(),
                "max": ds.max(),
                "median": ds.median(),
                "avg": ds.avg(),
                "stddev": ds.stddev(),
                "values": list(ds.points),
            }
        )
    comps = []
    if not stats_only:
        for ds in dss[1:]:
            c: dict[str, Any] = {"base": dss[0].name, "other": ds.name}
            c.update(_relative(ds, dss[0], ci))
            if welch:
                c["welch"] = _welch(ds, dss[0], ci)
            comps.append(c)
    doc = {"confidence": STUDENT_PCT[ci], "datasets": sets, "comparisons": comps}
    return json.dumps(_jsonable(doc), indent=2, allow_nan=False) + "\n"


def _write_png(path: str, dss: list[_Dataset], ci: int) -> None:
    """Strip + box plot per data set with its mean and the CI of that mean."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    colors = ["C0", "C1", "C2", "C3", "C4", "C5", "C6"]
    fig = Figure(figsize=(8, 1.2 + 0.8 * len(dss)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    labels = []
    for k, ds in enumerate(dss):
        y = len(dss) - k
        pts = [p for p in ds.points if math.isfinite(p)]
        labels.append(f"{SYMBOLS[k + 1]} {ds.name}")
        if not pts:
            continue
        box = {"positions": [y], "widths": 0.5, "showfliers": False, "manage_ticks": False}
        try:
            ax.boxplot([pts], orientation="horizontal", **box)
        except TypeError:  # matplotlib < 3.10
            ax.boxplot([pts], vert=False, **box)
        jitter = [((i * 0.618034) % 1.0 - 0.5) * 0.3 for i in range(len(pts))]
        ax.scatter(pts, [y + j for j in jitter], s=12, color=colors[k], alpha=0.7, zorder=3)
        avg, sd = ds.avg(), ds.stddev()
        if math.isfinite(avg) and math.isfinite(sd):
            half = _t_for(ds.n - 1, ci) * sd / math.sqrt(ds.n)
            ax.errorbar(
                [avg], [y], xerr=[[half], [half]], fmt="D", color="black", capsize=6, zorder=4
            )
    ax.set_yticks(range(len(dss), 0, -1), labels)
    ax.set_ylim(0.4, len(dss) + 0.6)
    ax.set_title(f"mean and {STUDENT_PCT[ci]:g}% confidence interval of the mean")
    ax.grid(axis="x", alpha=0.3)
    fig.savefig(path, dpi=100)


def plot_png(path: str, datasets: Sequence[tuple[str, Sequence[float]]],
             confidence: float = 95.0) -> None:
    """The ``--png`` plot for in-memory data sets (used by ``vecroute bench`` reports)."""
    _write_png(path, [_make_dataset(n, v) for n, v in datasets], _conf_index(confidence))


def main(
    argv: list[str],
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    *,
    prog: str = PROG,
) -> int:
    """Run ``vecroute stat`` (ministat's command line) and return its exit code.

    ``argv`` excludes the program name.  ``prog`` is printed where ministat
    prints its own name (its argv[0] and the hard-wired "Usage: ministat").
    """
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    try:
        text = _run(list(argv), stdin, stdout, stderr, prog)
    except _Exit as exc:
        stderr.flush()
        return exc.code
    stdout.write(text)
    stdout.flush()
    return 0


def _run(argv: list[str], stdin: TextIO, stdout: TextIO, stderr: TextIO, prog: str) -> str:
    cli = _Cli(prog, stdin, stderr)
    termwidth = DEFAULT_WIDTH
    isatty = getattr(stdout, "isatty", None)
    if isatty is not None and isatty():
        cols = os.environ.get("COLUMNS")
        if cols:
            termwidth = _atoi(cols)
        else:
            try:
                size = os.get_terminal_size(stdout.fileno())
                if size.columns > 0:
                    termwidth = size.columns - 2
            except (OSError, ValueError, AttributeError):
                pass
    ci = -1
    column = 1
    delim = b" \t"
    flag_s = flag_n = suppress_plot = False
    want_json = want_welch = False
    png: str | None = None
    operands: list[str] = []
    for item in _getopt(argv, prog, stderr):
        if isinstance(item, list):
            operands = item
            break
        opt, arg = item
        if opt == "A":
            suppress_plot = True
        elif opt == "C":
            col = _full_strtol(arg or "")
            if col is None:
                cli.usage("Invalid column number.")
            column = col or 0
            if column <= 0:
                cli.usage("Column number should be positive.")
        elif opt == "c":
            a = _full_strtod(arg or "")
            if a is None:
                cli.usage("Not a floating point number")
            for i, pct in enumerate(STUDENT_PCT):
                if a == pct:
                    ci = i  # a later unsupported -c keeps an earlier valid one
            if ci == -1:
                cli.usage("No support for confidence level")
        elif opt == "d":
            if not arg:
                cli.usage("Can't use empty delimiter string")
            delim = os.fsencode(arg or "")
        elif opt == "n":
            flag_n = True
        elif opt == "s":
            flag_s = True
        elif opt == "w":
            w = _full_strtol(arg or "")
            if w is None:
                cli.usage("Invalid width, not a number.")
            termwidth = w or 0
            if termwidth < 0:
                cli.usage("Unable to move beyond left margin.")
        elif opt == "--json":
            want_json = True
        elif opt == "--welch":
            want_welch = True
        elif opt == "--png":
            png = arg
        else:
            cli.usage("Unknown option")
    if ci == -1:
        ci = 2
    if not operands:
        operands = ["-"]
    elif len(operands) > MAX_DS:
        cli.usage("Too many datasets.")
    dss = [cli.read_set(name, column, delim) for name in operands]
    if want_json:
        text = _json_report(dss, ci, flag_n, want_welch)
    else:
        try:
            text = _render(
                dss,
                ci,
                termwidth,
                separate=flag_s,
                no_plot=suppress_plot,
                stats_only=flag_n,
                welch=want_welch,
            )
        except PlotCrash:
            stderr.write(
                f"{prog}: cannot draw the plot: a coordinate is not finite "
                "(ministat dies with SIGSEGV here); try -A, -n or a width of 2 or more\n"
            )
            raise _Exit(139) from None
    if png is not None:
        try:
            _write_png(png, dss, ci)
        except OSError as exc:
            stderr.write(f"{prog}: Cannot write {png}: {exc.strerror}\n")
            raise _Exit(1) from None
    return text


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
