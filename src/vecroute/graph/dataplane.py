"""A data plane built from a configuration: the one place that assembles it.

``vecroute run``, ``vecroute replay``, ``vecroute check``, the warm-up, the tests and the
benchmarks all build their forwarding tables and firewall here, so they forward the same
way. The tables (``DataPlane.tables()``) are what the control plane swaps into workers;
each worker or graph adds its own runtime (DataPlaneState.with_runtime).
"""

from __future__ import annotations

from dataclasses import dataclass

from vecroute.config_types import Config
from vecroute.fib.fib import Fib
from vecroute.firewall.firewall import Firewall, firewall_from_config
from vecroute.graph.dispatch import Graph
from vecroute.graph.state import OPT_FIB_GEN, DataPlaneState, icmp_bucket
from vecroute.packet.batch import PacketBatch


def fib_state(fib: Fib) -> DataPlaneState:
    """A DataPlaneState over the FIB's current arrays (cheap: the big arrays are shared),
    with a fresh runtime."""
    ifc, if_mac, if_ip6 = fib.interface_arrays()
    host_keys, host_vals = fib.lpm[6].host_table()
    st = DataPlaneState(
        ifc=ifc,
        if_mac=if_mac,
        if_ip6=if_ip6,
        fib4_roots=fib.lpm[4].roots,
        fib4_groups=fib.lpm[4].groups,
        fib6_roots=fib.lpm[6].roots,
        fib6_groups=fib.lpm[6].groups,
        fib6_host_keys=host_keys,
        fib6_host_vals=host_vals,
        lb=fib.lbs.lb,
        lb_buckets=fib.lbs.lb_buckets,
        adj=fib.adjs.adj,
        adj_rw=fib.adjs.adj_rw,
        adj_last_req=fib.adjs.adj_last_req,
        icmp_tb=icmp_bucket(*fib.icmp_rate),
        sr_sid=fib.srv6.sr_sid,
        sr_pol=fib.srv6.sr_pol,
        sr_bucket=fib.srv6.sr_bucket,
        sr_list=fib.srv6.sr_list,
        sr_hdr=fib.srv6.sr_hdr,
        sr_cache=fib.srv6.sr_cache,
    )
    st.opts[OPT_FIB_GEN] = fib.generation
    return st


@dataclass
class DataPlane:
    cfg: Config
    fib: Fib
    firewall: Firewall | None

    def tables(self) -> DataPlaneState:
        """The FIB's current arrays (with a fresh runtime)."""
        return fib_state(self.fib)

    def new_firewall(self) -> Firewall | None:
        """Another firewall from the same configuration (each worker has its own)."""
        return firewall_from_config(self.cfg)

    def graph(self, batch: PacketBatch) -> Graph:
        """A graph over these tables and this firewall, for one batch buffer."""
        return Graph(fib_state(self.fib), batch, self.firewall)


def build_dataplane(cfg: Config, macs: dict[str, bytes] | None = None) -> DataPlane:
    """The FIB (routes, neighbours, SRv6) and the firewall ``cfg`` asks for; raises
    RouteError / ConfigError with one line when they cannot be built. ``macs``: the
    interfaces' real MAC addresses (live ports), else those in the config."""
    fib = Fib.from_config(cfg, macs)
    return DataPlane(cfg, fib, firewall_from_config(cfg))
