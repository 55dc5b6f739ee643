"""A data plane built from a configuration: the one place that assembles it.

``vecroute run``, ``vecroute replay``, ``vecroute check``, the warm-up, the tests and the
benchmarks all build their forwarding tables and firewall here, so they forward the same
way. The tables (``DataPlane.tables()``) are what the control plane swaps into workers;
each worker or graph adds its own runtime (DataPlaneState.with_runtime).
"""

from __future__ import annotations

from dataclasses import dataclass

from vecroute.control.config import Config
from vecroute.fib.fib import Fib
from vecroute.firewall.firewall import Firewall, firewall_from_config
from vecroute.graph.dispatch import Graph
from vecroute.graph.state import DataPlaneState
from vecroute.packet.batch import PacketBatch


@dataclass
class DataPlane:
    cfg: Config
    fib: Fib
    firewall: Firewall | None

    def tables(self) -> DataPlaneState:
        """The FIB's current arrays (with a fresh runtime)."""
        return self.fib.state()

    def new_firewall(self) -> Firewall | None:
        """Another firewall from the same configuration (each worker has its own)."""
        return firewall_from_config(self.cfg)

    def graph(self, batch: PacketBatch) -> Graph:
        """A graph over these tables and this firewall, for one batch buffer."""
        return Graph(self.fib.state(), batch, self.firewall)


def build_dataplane(cfg: Config, macs: dict[str, bytes] | None = None) -> DataPlane:
    """The FIB (routes, neighbours, SRv6) and the firewall ``cfg`` asks for; raises
    RouteError / ConfigError with one line when they cannot be built. ``macs``: the
    interfaces' real MAC addresses (live ports), else those in the config."""
    fib = Fib.from_config(cfg, macs)
    return DataPlane(cfg, fib, firewall_from_config(cfg))
