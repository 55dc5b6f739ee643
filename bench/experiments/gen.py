"""gen: `vecroute gen` vs trafgen on the same veth pair (the pktgen seed's tool).

Both send the same 64-byte UDP frame for a fixed time from one namespace, pinned to the
same CPU; the rate is what the peer end of the veth received per second. The issue's
check: vecroute gen >= 0.8x trafgen. Needs root and trafgen (Debian netsniff-ng).
"""

from __future__ import annotations

import os
import shutil
import sys

from bench.af_packet_rate import FRAME, if_counter, trafgen_conf
from vecroute.measure.bench import BenchError, Experiment, Variant

SECONDS = 3.0
_state: dict = {}


def _setup() -> list[Variant]:
    if os.geteuid() != 0:
        raise BenchError("the gen experiment needs root (network namespaces)")
    if shutil.which("trafgen") is None:
        raise BenchError("trafgen is missing: apt-get install netsniff-ng")
    from vecroute.io.netns import Lab

    lab = Lab("vbg")
    a_ns, b_ns = lab.netns("a"), lab.netns("b")
    a, b = lab.veth(a_ns, b_ns, disable_ipv6=(True, True))
    conf = f"/tmp/vecroute-gen-bench-{os.getpid()}.cfg"
    with open(conf, "w") as f:
        f.write(trafgen_conf(FRAME))
    _state.update(lab=lab, conf=conf)

    def received(argv: list[str]) -> float:
        # both tools send for SECONDS once started (interpreter start-up is not counted)
        rx0 = if_counter(lab, b_ns, b, "rx.packets")
        lab.run(a_ns, ["taskset", "-c", "1", *argv], check=False, timeout=SECONDS + 60)
        return (if_counter(lab, b_ns, b, "rx.packets") - rx0) / SECONDS / 1e6

    def trafgen() -> float:
        return received(["timeout", "-s", "INT", str(SECONDS), "trafgen", "-o", a, "-i", conf,
                         "-P", "1", "-C", "-Q"])

    def vecroute_gen() -> float:
        return received([sys.executable, "-m", "vecroute.cli", "gen", a, "--src", "192.0.2.1",
                         "--dst", "198.51.100.1", "--dst-mac", "02:00:00:00:00:0b",
                         "--size", "64", "--duration", str(SECONDS)])

    vecroute_gen()  # load the kernels once outside the measurement
    return [Variant("trafgen", trafgen), Variant("vecroute-gen", vecroute_gen)]


def _teardown() -> None:
    if "lab" in _state:
        _state.pop("lab").close()
        os.unlink(_state.pop("conf"))


def _notes(samples: dict[str, list[float]]) -> str:
    import statistics

    r = statistics.median(samples["vecroute-gen"]) / statistics.median(samples["trafgen"])
    verdict = "meets" if r >= 0.8 else "MISSES"
    return (f"vecroute gen / trafgen (medians): {r:.2f}x — {verdict} the >= 0.8x target. "
            f"Rates are frames received by the veth peer per second (Mpps), {SECONDS:g} s runs, "
            f"sender pinned to CPU 1.")


EXPERIMENT = Experiment(
    name="gen",
    title="Packet generator: vecroute gen vs trafgen, 64-byte UDP on veth",
    unit="Mpps",
    seed="Linux pktgen results, e.g. '680427pps 5443Mb/sec (5443416000bps) errors: 0'",
    setup=_setup,
    notes=_notes,
    teardown=_teardown,
)
