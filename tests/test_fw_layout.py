"""The FW tuple is defined once, by role: every producer of its arrays must deliver them
under the field names the kernels read (a swapped pair would still type-check in numba
when the dtypes agree, and classify wrongly)."""

from __future__ import annotations

import numpy as np

from vecroute.firewall.config import parse_firewall_config
from vecroute.firewall.firewall import Firewall
from vecroute.firewall.layout import CLASSIFIER_FIELDS, FW, STATE_FIELDS, TABLE_FIELDS


def test_fw_fields_by_role():
    assert FW._fields == CLASSIFIER_FIELDS + TABLE_FIELDS + STATE_FIELDS
    assert len(set(FW._fields)) == len(FW._fields) == 22


def test_args_deliver_each_field():
    raw = {
        "rules": ["100 deny ip from table(bl) to any", "200 allow tcp from any to any 22"],
        "tables": [{"name": "bl", "type": "addr", "entries": ["192.0.2.0/24"]}],
    }
    fw = Firewall(parse_firewall_config(raw, "t.toml"), interfaces=["eth0"])
    args = fw.args()
    assert len(args) == len(FW._fields)
    t = FW(*args)
    cf = fw.compiled
    for name in CLASSIFIER_FIELDS:
        want = {"cl6_roots": cf.cl6.roots, "cl6_groups": cf.cl6.groups}.get(name)
        assert getattr(t, name) is (want if want is not None else getattr(cf, name)), name
    tabs = fw.tables
    assert t.t4_roots is tabs.l4.roots and t.t4_groups is tabs.l4.groups
    assert t.t6_groups is tabs.l6.groups
    assert t.t_idx is tabs.t_idx and t.nt is tabs.nt
    assert t.if_tab.dtype == np.int64 and t.if_tab.ndim == 2
    assert t.st is fw.st and t.ctl is fw.ctl
