"""What each graph node declares about itself: its name, its next nodes, its counters.

Every node module states, at its top, one ``NODES`` tuple of :class:`NodeDecl` (VPP's
``VLIB_REGISTER_NODE``: name, next nodes, error strings in one place). The kernels keep
using the integer ids of ``node_ids`` and ``counters`` (numba freezes module constants);
the declarations name the same nodes and counters by their strings, so that a reader sees
a node's edges without reading its kernel, and tests/test_node_registry.py can check the
kernel's source against them (every enqueue target and counter used is declared, every
declared one is used) and the declarations against ``NODE_NAMES`` and ``COUNTERS``.

Counters stay defined once, in ``counters.COUNTERS`` (name, home node, kind, description);
a declaration only lists the names its node may raise.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple


class NodeDecl(NamedTuple):
    name: str
    next: tuple[str, ...] = ()  # nodes this node may enqueue a packet to
    counters: tuple[str, ...] = ()  # counters its kernel may raise
    # counters of this node that code outside the graph raises on its behalf, with the
    # module that does (the punt ring's policer counts what the punt node handed over)
    raised_by: tuple[tuple[str, str], ...] = ()


# The modules holding graph nodes, each with a NODES tuple.
NODE_MODULES: tuple[str, ...] = (
    "ethernet_input",
    "arp_input",
    "ip4_input",
    "ip6_input",
    "firewall",
    "local",
    "ip_reass",
    "lookup",
    "gso_segment",
    "srv6_localsid",
    "srv6_encap",
    "icmp_error",
    "tcp_reset",
    "rewrite",
    "ip4_frag",
    "neighbor_request",
    "output",
)

# Not a graph node, but the home of counters the control plane raises for the workers.
CONTROL_PLANE = NodeDecl(
    name="control-plane",
    raised_by=(
        ("inject-queue-full", "vecroute.control.metrics"),
        ("inject-queue-full", "vecroute.control.router"),
    ),
)


def module_declarations() -> dict[str, tuple[NodeDecl, ...]]:
    """``NODES`` of every node module, by module name (graph/<name>.py)."""
    return {m: importlib.import_module(f"vecroute.graph.{m}").NODES for m in NODE_MODULES}


def declarations() -> dict[str, NodeDecl]:
    """Every declaration by node name, the control plane's included."""
    out = {d.name: d for decls in module_declarations().values() for d in decls}
    out[CONTROL_PLANE.name] = CONTROL_PLANE
    return out
