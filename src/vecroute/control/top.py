"""`vecroute top`: a live view of a running router, through its control socket only.

Every refresh asks the router for ``show interfaces``, ``show errors``, ``show runtime`` and
``show workers`` (``--json`` data) and turns two such samples into rates: the growth of each
counter divided by the time measured between the two replies. The router keeps only
totals; as VPP's ``show runtime`` after ``clear runtime``, the per-interval figures (clocks
per packet, vectors per call) are ratios of the two totals' growths.

The rate arithmetic is pure functions of two samples (:func:`rates` and the ``*_rows``
builders), kept apart from the terminal: :class:`Top` holds the samples and renders a
frame, :func:`run` is the loop (rich ``Live`` on the alternate screen, keys read in cbreak
mode with ``select`` so that reading them never holds the refresh up).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.layout import Layout
from rich.table import Table
from rich.text import Text

from vecroute.control.server import request

VIEWS = ("interfaces", "drops", "runtime", "workers")
KEYS = {"i": "interfaces", "d": "drops", "r": "runtime", "w": "workers",
        "1": "interfaces", "2": "drops", "3": "runtime", "4": "workers"}
COMMANDS = {"interfaces": ["show", "interfaces"], "drops": ["show", "errors"],
            "runtime": ["show", "runtime"], "workers": ["show", "workers"]}
ROW_KEY = {"interfaces": "name", "drops": "counter", "runtime": "node", "workers": "worker"}
REQUEST_TIMEOUT = 2.0  # seconds per control request: a hung router must not freeze the view


class TopError(Exception):
    """The router could not be asked (one line: unreachable, refused, a bad reply)."""


# -- the arithmetic: pure functions of two samples ---------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One view's rows as the router sent them, by key, and when the reply arrived."""

    t: float  # time.monotonic() seconds
    rows: dict[Any, dict[str, Any]]


def sample(view: str, rows: list[dict[str, Any]], t: float) -> Sample:
    return Sample(t, {r[ROW_KEY[view]]: r for r in rows})


def growth(new: int, old: int) -> int:
    """How much a counter grew. One smaller than before was reset (``clear counters``, a
    restarted router) and has counted from zero since: its growth is its value, never
    negative (Prometheus' ``rate()`` reads resets the same way)."""
    return new - old if new >= old else new


def rates(
    prev: Sample | None, cur: Sample, fields: tuple[str, ...], missing_is_zero: bool = False
) -> dict[Any, dict[str, float] | None]:
    """Per row of ``cur``: each field's growth per second since ``prev``.

    None for a row without a baseline: the first sample, no time elapsed (or the clock
    went back), or a row that ``prev`` lacks -- unless ``missing_is_zero`` (views that
    leave zero rows out: ``show errors``, ``show runtime``), then it counted from zero."""
    out: dict[Any, dict[str, float] | None] = {}
    dt = cur.t - prev.t if prev is not None else 0.0
    for key, row in cur.rows.items():
        old = prev.rows.get(key) if prev is not None else None
        if dt <= 0 or (old is None and not missing_is_zero):
            out[key] = None
            continue
        out[key] = {f: growth(int(row[f]), int(old[f]) if old else 0) / dt for f in fields}
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _get(r: dict[str, float] | None, f: str) -> float | None:
    return None if r is None else r[f]


def _rank(value: float | None) -> float:
    """Sort key: highest rate first, rows without one last."""
    return -value if value is not None else 1.0


def interface_rows(prev: Sample | None, cur: Sample) -> list[dict[str, Any]]:
    """Per interface, in the router's order: packet and bit rates each way, drops and
    punts per second, and the totals."""
    fields = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drops", "punts")
    rs = rates(prev, cur, fields)
    out = []
    for name, row in cur.rows.items():
        r = rs[name]
        out.append({
            "name": name,
            "rx_pps": _get(r, "rx_packets"),
            "rx_bps": None if r is None else r["rx_bytes"] * 8,
            "tx_pps": _get(r, "tx_packets"),
            "tx_bps": None if r is None else r["tx_bytes"] * 8,
            "drops_ps": _get(r, "drops"),
            "punts_ps": _get(r, "punts"),
            "rx_packets": row["rx_packets"],
            "tx_packets": row["tx_packets"],
            "drops": row["drops"],
        })
    return out


def drop_rows(prev: Sample | None, cur: Sample) -> list[dict[str, Any]]:
    """Per non-zero counter (drop reasons and events): its rate, highest first."""
    rs = rates(prev, cur, ("count",), missing_is_zero=True)
    out = [
        {"counter": k, "node": row["node"], "kind": row["kind"],
         "rate": _get(rs[k], "count"), "count": row["count"],
         "description": row["description"]}
        for k, row in cur.rows.items()
    ]
    out.sort(key=lambda x: (_rank(x["rate"]), -x["count"], x["counter"]))
    return out


def ns_per_clock(cur: Sample) -> float | None:
    """The router's clock period, from its own per-packet figures (the row with the
    most clocks per packet loses the least to their rounding)."""
    best = max(cur.rows.values(), key=lambda r: r.get("clocks_per_packet", 0), default=None)
    if not best or not best.get("clocks_per_packet"):
        return None
    return best["ns_per_packet"] / best["clocks_per_packet"]


def runtime_rows(prev: Sample | None, cur: Sample) -> list[dict[str, Any]]:
    """Per graph node over the last interval: calls and vectors (packets) per second,
    vectors per call and clocks (ns) per packet, busiest first. A node idle in the
    interval has rates 0 and no per-packet figures."""
    rs = rates(prev, cur, ("calls", "vectors", "clocks"), missing_is_zero=True)
    period = ns_per_clock(cur)
    out = []
    for node, row in cur.rows.items():
        r = rs[node]
        cpp = _ratio(_get(r, "clocks"), _get(r, "vectors"))
        out.append({
            "node": node,
            "calls_ps": _get(r, "calls"),
            "vectors_ps": _get(r, "vectors"),
            "vectors_per_call": _ratio(_get(r, "vectors"), _get(r, "calls")),
            "clocks_per_packet": cpp,
            "ns_per_packet": cpp * period if cpp is not None and period else None,
            "vectors": row["vectors"],
        })
    out.sort(key=lambda x: (_rank(x["vectors_ps"]), -x["vectors"], x["node"]))
    return out


def worker_rows(prev: Sample | None, cur: Sample) -> list[dict[str, Any]]:
    """Per data-plane worker: packets, batches, poll sleeps and punts per second (and
    packets per batch), busiest first; liveness, heartbeat age and queue depths as is."""
    rs = rates(prev, cur, ("packets", "batches", "sleeps", "punted"))
    out = []
    for w, row in cur.rows.items():
        r = rs[w]
        out.append({
            "worker": w,
            "alive": row["alive"],
            "packets_ps": _get(r, "packets"),
            "batches_ps": _get(r, "batches"),
            "packets_per_batch": _ratio(_get(r, "packets"), _get(r, "batches")),
            "sleeps_ps": _get(r, "sleeps"),
            "punted_ps": _get(r, "punted"),
            "heartbeat_age_ms": row["heartbeat_age_ms"],
            "punt_queue": row["punt_queue"],
            "inject_queue": row["inject_queue"],
            "error": row["error"],
        })
    out.sort(key=lambda x: (_rank(x["packets_ps"]), x["worker"]))
    return out


BUILDERS: dict[str, Callable[[Sample | None, Sample], list[dict[str, Any]]]] = {
    "interfaces": interface_rows, "drops": drop_rows, "runtime": runtime_rows,
    "workers": worker_rows,
}

_SI = ("", "k", "M", "G", "T")


def si(x: float | None) -> str:
    """A rate for a narrow column: one decimal, SI prefix (12.3k, 1.5M); '-' for none."""
    if x is None:
        return "-"
    unit = 0
    while abs(x) >= 999.95 and unit < len(_SI) - 1:
        x /= 1000
        unit += 1
    return f"{x:.1f}{_SI[unit]}"


def parse_si(text: str) -> float | None:
    """The number :func:`si` wrote (for scripts reading a frame, and the tests)."""
    if text == "-":
        return None
    unit = _SI.index(text[-1]) if text[-1] in _SI[1:] else 0
    return float(text[: -1] if unit else text) * 1000**unit


def _fixed(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


# (header, row field, formatter) per view; None formats with str()
COLUMNS: dict[str, list[tuple[str, str, Callable[[Any], str] | None]]] = {
    "interfaces": [
        ("interface", "name", None), ("rx pps", "rx_pps", si), ("rx bit/s", "rx_bps", si),
        ("tx pps", "tx_pps", si), ("tx bit/s", "tx_bps", si), ("drops/s", "drops_ps", si),
        ("punts/s", "punts_ps", si), ("rx pkts", "rx_packets", None),
        ("tx pkts", "tx_packets", None), ("drops", "drops", None),
    ],
    "drops": [
        ("counter", "counter", None), ("node", "node", None), ("kind", "kind", None),
        ("rate/s", "rate", si), ("count", "count", None), ("description", "description", None),
    ],
    "runtime": [
        ("node", "node", None), ("calls/s", "calls_ps", si), ("vectors/s", "vectors_ps", si),
        ("vec/call", "vectors_per_call", _fixed), ("clocks/pkt", "clocks_per_packet", _fixed),
        ("ns/pkt", "ns_per_packet", _fixed), ("vectors", "vectors", None),
    ],
    "workers": [
        ("worker", "worker", None), ("alive", "alive", lambda a: "yes" if a else "NO"),
        ("pkts/s", "packets_ps", si), ("batches/s", "batches_ps", si),
        ("pkts/batch", "packets_per_batch", _fixed), ("sleeps/s", "sleeps_ps", si),
        ("punted/s", "punted_ps", si), ("heartbeat ms", "heartbeat_age_ms", None),
        ("punt q", "punt_queue", None), ("inject q", "inject_queue", None),
        ("error", "error", None),
    ],
}
LEFT = {"name", "counter", "node", "kind", "description", "error"}


def table(view: str, rows: list[dict[str, Any]], limit: int | None = None) -> Table:
    """A view's rows as a rich table (numbers right-aligned), at most ``limit`` rows."""
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for i, (head, f, _) in enumerate(COLUMNS[view]):
        key_width = max((len(str(r[f])) for r in rows), default=0) if i == 0 else None
        t.add_column(head, justify="left" if f in LEFT else "right", min_width=key_width,
                     no_wrap=f != "description", overflow="ellipsis")
    for row in rows[:limit]:
        dropping = row.get("kind") == "drop" and row.get("rate")
        t.add_row(*[(fmt or str)(row[f]) for _, f, fmt in COLUMNS[view]],
                  style="red" if dropping else None)
    return t


# -- the state between refreshes and one frame ------------------------------------------------


Ask = Callable[[list[str]], dict]


@dataclass
class Top:
    """The samples of the last two refreshes, the view shown and what went wrong."""

    path: str
    view: str = "interfaces"
    interval: float = 1.0
    ask: Ask | None = None  # one ctl request -> the reply dict (default: the socket)
    prev: dict[str, Sample] = field(default_factory=dict)
    cur: dict[str, Sample] = field(default_factory=dict)
    error: str = ""  # why the last refresh failed ("" when it worked)
    note: str = ""  # the last action's result (counters cleared)

    def _request(self, argv: list[str]) -> dict:
        try:
            reply = (self.ask or (lambda a: request(self.path, a, REQUEST_TIMEOUT)))(argv)
        except (OSError, ValueError) as e:  # refused, no socket, timeout, a torn reply
            why = getattr(e, "strerror", None) or str(e) or type(e).__name__
            raise TopError(f"cannot reach the router at {self.path}: {why}") from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            err = reply.get("error") if isinstance(reply, dict) else None
            raise TopError(f"{' '.join(argv)}: {err or 'bad reply'}")
        return reply

    def refresh(self) -> None:
        """Ask for every view (so switching views shows rates at once). On failure keep
        the error and forget the samples: a router that comes back starts afresh, not
        with a rate averaged over the outage."""
        try:
            snaps = {}
            for view, argv in COMMANDS.items():
                data = self._request(argv).get("data")
                if not isinstance(data, list):
                    raise TopError(f"{' '.join(argv)}: bad reply")
                snaps[view] = sample(view, data, time.monotonic())
        except TopError as e:
            self.error, self.prev, self.cur = str(e), {}, {}
            return
        self.error, self.prev, self.cur = "", self.cur, snaps

    def clear(self) -> None:
        """``clear counters``, then a refresh at once: the next rates start from ~0
        (the growth from the old totals reads as a reset, never as negative)."""
        try:
            self._request(["clear", "counters"])
            self.note = f"counters cleared at {time.strftime('%H:%M:%S')}"
        except TopError as e:
            self.note = f"clear failed: {e}"
        self.refresh()

    def rows(self) -> list[dict[str, Any]]:
        cur = self.cur.get(self.view)
        return [] if cur is None else BUILDERS[self.view](self.prev.get(self.view), cur)

    def header(self) -> Text:
        t = Text(f"vecroute top  {self.path}  {time.strftime('%H:%M:%S')}  "
                 f"every {self.interval:g} s  view: {self.view}", style="bold")
        if self.error:
            t.append(f"\n{self.error} (retrying every {self.interval:g} s)", style="bold red")
        elif not self.prev:
            t.append("\nrates from the next refresh on", style="dim")
        elif self.note:
            t.append(f"\n{self.note}", style="green")
        return t

    def footer(self) -> Text:
        t = Text()
        for key, view in zip("idrw", VIEWS, strict=True):
            t.append(f" {key} ", style="reverse" if view == self.view else "bold")
            t.append(f" {view}  ")
        t.append(" c ", style="bold")
        t.append(" clear counters  ")
        t.append(" q ", style="bold")
        t.append(" quit")
        return t

    def body(self, limit: int | None = None) -> RenderableType:
        if self.error:
            return Text("no data: the router does not answer", style="dim")
        return table(self.view, self.rows(), limit)

    def frame(self, height: int | None = None) -> RenderableType:
        """One screen: header, the view's table (cut to fit ``height`` lines when given:
        the busiest rows), key help as the footer."""
        if height is None:
            return Group(self.header(), Text(), self.body(), Text(), self.footer())
        layout = Layout()
        layout.split_column(Layout(self.header(), size=3), Layout(self.body(max(1, height - 6))),
                            Layout(self.footer(), size=1))
        return layout


# -- the terminal -------------------------------------------------------------------------------


@contextlib.contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Keys arrive one at a time without echo (Ctrl-C still raises SIGINT); the terminal's
    settings come back however the body ends."""
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def _keys(fd: int | None, timeout: float) -> str:
    """The keys typed within ``timeout`` seconds (returns at the first), or ''."""
    if fd is None:
        time.sleep(max(0.0, timeout))
        return ""
    ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
    return os.read(fd, 64).decode(errors="replace") if ready else ""


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks: terminal restored


def run(path: str, interval: float = 1.0, view: str = "interfaces", once: bool = False,
        console: Console | None = None) -> int:
    """The ``vecroute top`` command; returns the exit status.

    ``once`` (or a stdout that is no terminal: ``top -b``'s batch mode) prints plain
    frames instead: one after two samples ``interval`` apart, then exits -- 0, or 2 with
    one line on stderr when the router cannot be asked -- or, without ``once``, one frame
    per interval until interrupted. Interactive, an unreachable router is shown in the
    view and asked again every interval."""
    con = console or Console()
    if not con.is_terminal:  # a pipe or a file: wide enough for every column
        con = Console(file=con.file, width=max(con.width, 132))
    top = Top(path, view, interval)
    try:
        if once:
            top.refresh()
            if not top.error:
                time.sleep(interval)
                top.refresh()
            if top.error:
                print(f"vecroute: {top.error}", file=sys.stderr)
                return 2
            con.print(top.frame())
            return 0
        if not con.is_terminal:
            while True:
                top.refresh()
                con.print(top.frame())
                con.file.flush()
                time.sleep(interval)
        return _interactive(top, con)
    except KeyboardInterrupt:
        return 0


def _interactive(top: Top, con: Console) -> int:
    from rich.live import Live

    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    with cbreak(fd) if fd is not None else contextlib.nullcontext(), \
            Live(console=con, screen=True, auto_refresh=False) as live:
        while True:
            top.refresh()
            deadline = time.monotonic() + top.interval
            while True:
                live.update(top.frame(con.size.height), refresh=True)
                keys = _keys(fd, deadline - time.monotonic())
                if not keys and time.monotonic() >= deadline:
                    break
                for k in keys.lower():
                    if k == "q":
                        return 0
                    if k in KEYS:
                        top.view = KEYS[k]
                    elif k == "c":
                        top.clear()
                        deadline = time.monotonic() + top.interval
