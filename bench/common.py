"""Helpers shared by the benchmark scripts: machine description, pinning, RSS, statistics.

Benchmarks here follow docs/BENCHMARKS.md: variants are measured side by side in one run,
interleaved (A B A B ...), repeated, and reported as median with min/max, together with
the machine that produced them.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TABLE = REPO_ROOT.parent / "shared" / "data" / "bgp-full-table-prefixes.txt.gz"


# -- the machine --------------------------------------------------------------------------


def _cpuinfo_field(name: str) -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except ImportError:
        return None
    v = getattr(mod, "__version__", None)
    if v is None:
        try:
            from importlib.metadata import version

            v = version(module)
        except Exception:  # noqa: BLE001 - a missing version is not an error
            v = "?"
    return str(v)


def _caches() -> dict[str, str]:
    """Cache sizes of CPU 0 from sysfs, e.g. {"L1d": "32K", "L2": "1024K", "L3": "32768K"}."""
    out: dict[str, str] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for idx in sorted(base.glob("index*")):
            level = (idx / "level").read_text().strip()
            kind = (idx / "type").read_text().strip()
            size = (idx / "size").read_text().strip()
            name = f"L{level}" + ("d" if kind == "Data" else "i" if kind == "Instruction" else "")
            out[name] = size
    except OSError:
        pass
    return out


def machine_info() -> dict[str, Any]:
    """CPU model, cores, kernel, Python and library versions (for docs/BENCHMARKS.md)."""
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = []
    mhz = _cpuinfo_field("cpu MHz")
    return {
        "cpu_model": _cpuinfo_field("model name") or platform.processor() or "unknown",
        "cpu_mhz": float(mhz) if mhz else None,
        "cpu_family_model": f"{_cpuinfo_field('cpu family')}/{_cpuinfo_field('model')}",
        "caches": _caches(),
        "cpus_online": os.cpu_count(),
        "cpus_allowed": affinity,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "llvmlite": _version("llvmlite"),
        "pytricia": _version("pytricia"),
    }


def machine_line(info: dict[str, Any] | None = None) -> str:
    """One line for the head of a benchmark's text output."""
    m = info or machine_info()
    return (
        f"{m['cpu_model']}, {m['cpus_online']} CPUs (allowed {m['cpus_allowed']}), "
        f"Linux {m['kernel']} {m['machine']}, Python {m['python']}, numpy {m['numpy']}, "
        f"numba {m['numba']}"
    )


# -- the process ----------------------------------------------------------------------------


def pin_to_one_cpu(cpu: int | None = None) -> int | None:
    """Pin this process to one CPU (default: the last allowed one); returns it or None."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
        target = allowed[-1] if cpu is None else cpu
        os.sched_setaffinity(0, {target})
        return target
    except (AttributeError, OSError, IndexError):
        return None


def rss_bytes() -> int:
    """Resident set size of this process (VmRSS), 0 where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def steal_ticks() -> int:
    """Hypervisor steal time of the whole machine, in clock ticks (/proc/stat), 0 if absent."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
        return int(parts[8]) if parts[0] == "cpu" and len(parts) > 8 else 0
    except (OSError, ValueError):
        return 0


class CpuShare:
    """How much of a wall-clock interval this process actually ran: process CPU time / wall
    time (1.0 = it had the core to itself; less = other jobs or the hypervisor took it)."""

    def __init__(self) -> None:
        self.shares: list[float] = []

    def __enter__(self) -> CpuShare:
        self._w = time.perf_counter()
        self._c = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._w
        if wall > 0:
            self.shares.append((time.process_time() - self._c) / wall)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call, perf_counter clock."""
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


# -- statistics -----------------------------------------------------------------------------


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and the raw values (in measurement order) of a repeated measurement."""
    v = [float(x) for x in values]
    if not v:
        return {"n": 0, "median": None, "min": None, "max": None, "values": []}
    return {
        "n": len(v),
        "median": statistics.median(v),
        "min": min(v),
        "max": max(v),
        "values": v,
    }


def fmt_summary(s: dict[str, Any], unit: str = "", digits: int = 2) -> str:
    """'12.34 [11.90 .. 12.80] unit' (median [min .. max])."""
    if not s["n"]:
        return "n/a"
    f = f"{{:.{digits}f}}"
    return f"{f.format(s['median'])} [{f.format(s['min'])} .. {f.format(s['max'])}]" + (
        f" {unit}" if unit else ""
    )


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def eprint(*args: Any) -> None:
    """Progress messages go to stderr so that --json output stays clean."""
    print(*args, file=sys.stderr, flush=True)
