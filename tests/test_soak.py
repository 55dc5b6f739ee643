"""The soak's short form (bench/soak.py): two workers under mixed traffic while routes
churn, the config reloads, firewall rules change, hostile control clients and NS/ARP
floods run, and a worker is killed halfway. `python -m bench.soak --seconds 3600` is the
long form."""

from __future__ import annotations

import os

import pytest

from bench import soak

pytestmark = pytest.mark.netns

SECONDS = 25.0


def test_soak_short(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the soak needs root (network namespaces), as CI has")
    rep = soak.run(SECONDS, tmp_path)
    assert rep.errors == [], rep.errors
    assert rep.router_alive and rep.exit_status == 0
    # the worker killed halfway: exit 1 within a bound, ports given back, started again
    assert rep.worker_killed and rep.kill_exit_status == 1 and rep.kill_exit_s < 10
    assert rep.ports_restored_after_kill
    assert rep.rounds >= 5 and rep.reloads >= 2 and rep.flood_frames >= 5000
    assert rep.udp_received >= 0.9 * rep.udp_sent > 0, (rep.udp_received, rep.udp_sent)
    assert rep.corrupted == 0 and rep.scapy_checked > 20
    assert rep.max_gap_s < soak.MAX_GAP_S, rep.max_gap_s
    assert rep.neighbor_entries_max <= rep.neighbor_limit
    assert rep.rss_max_mb - rep.rss_start_mb < 150, (rep.rss_start_mb, rep.rss_max_mb)
    assert rep.accounting_ok, rep.accounting
    assert rep.ports_restored, rep.port_diff
