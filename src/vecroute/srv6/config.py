"""The [srv6] configuration section -> local SIDs, policies and steering on a FIB.

Errors are one line naming the file and key (``srv6.policies[1].segments``)."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

from vecroute.config_types import ConfigError, TableReader
from vecroute.srv6.layout import FLOW_LABELS
from vecroute.srv6.tables import BEHAVIORS, MODES, LocalSid, Policy, Srv6Error

if TYPE_CHECKING:
    from vecroute.fib.fib import Fib


def _v6(r: TableReader, key: str, text: Any) -> ipaddress.IPv6Address:
    # IPv6Address(5) would quietly be ::5; "fe80::1%eth0" (a scope) is no SRv6 address
    if not isinstance(text, str) or "%" in text:
        raise r.err(key, f"{text!r} is not an IPv6 address")
    try:
        return ipaddress.IPv6Address(text)
    except (ValueError, TypeError):
        raise r.err(key, f"{text!r} is not an IPv6 address") from None


def _segments(r: TableReader, key: str, v: Any) -> list[ipaddress.IPv6Address]:
    if not isinstance(v, list) or not v:
        raise r.err(key, "expected a non-empty list of IPv6 segments")
    return [_v6(r, key, s) for s in v]


def _flow_label(r: TableReader, default: str | None) -> str | None:
    """``flow_label``: how H.Encaps sets the outer flow label (srv6/layout.py FLOW_LABELS)."""
    v = r.get("flow_label", str, default)
    if "flow_label" in r.table and v not in FLOW_LABELS:
        raise r.err("flow_label", f"{v!r}: expected one of {' '.join(FLOW_LABELS)}")
    return v


def apply_srv6_config(fib: Fib, section: Any, path: str) -> None:
    """Validate [srv6] and install it; raises ConfigError (one line)."""
    top = TableReader(path, "srv6", section,
                      {"encap_source", "flow_label", "localsids", "policies", "steering"})
    for key in ("localsids", "policies", "steering"):  # `localsids = 5` is no list to walk
        if not isinstance(section.get(key, []), list):
            raise top.err(key, f"expected an array of tables ([[srv6.{key}]]), got "
                               f"{type(section[key]).__name__}")
    if "encap_source" in section:
        fib.srv6.encap_source = _v6(top, "encap_source", section["encap_source"])
    fib.srv6.flow_label = _flow_label(top, fib.srv6.flow_label)
    for n, t in enumerate(section.get("localsids", [])):
        r = TableReader(path, f"srv6.localsids[{n}]", t, {"sid", "behavior", "nh", "table",
                                                      "flavor", "fib_table"})
        text = r.get("sid", str, required=True)
        try:
            if "%" in text:
                raise ValueError
            sid = ipaddress.IPv6Network(text if "/" in text else f"{text}/128", strict=False)
        except ValueError:
            raise r.err("sid", f"{text!r} is not an IPv6 SID or locator prefix") from None
        beh = r.get("behavior", str, required=True)
        if beh not in BEHAVIORS:
            raise r.err("behavior", f"{beh!r}: expected one of {' '.join(BEHAVIORS)}")
        nh = None
        if "nh" in t:
            try:
                if not isinstance(t["nh"], str) or "%" in t["nh"]:  # ip_address(5): 0.0.0.5
                    raise TypeError
                nh = ipaddress.ip_address(t["nh"])
            except (ValueError, TypeError):
                raise r.err("nh", f"{t['nh']!r} is not an IP address") from None
        ls = LocalSid(sid, beh, nh, r.int_range("table", 0, 0, 2**32 - 1),
                      r.get("flavor", str, None), r.int_range("fib_table", 0, 0, 2**32 - 1))
        try:
            fib.srv6.add_localsid(ls)
        except (Srv6Error, ValueError) as e:
            msg = str(e)
            key = ("flavor" if "flavor" in msg else "nh" if "next hop" in msg or " nh " in msg
                   else "sid" if "already" in msg else "behavior")
            raise r.err(key, msg) from None
    for n, t in enumerate(section.get("policies", [])):
        r = TableReader(path, f"srv6.policies[{n}]", t, {"bsid", "mode", "segments",
                                                     "segment_lists", "source", "table",
                                                     "flow_label"})
        bsid = _v6(r, "bsid", r.get("bsid", str, required=True))
        mode = r.get("mode", str, "encap")
        if mode not in MODES:
            raise r.err("mode", f"{mode!r}: expected encap or encap.red")
        if ("segments" in t) == ("segment_lists" in t):
            raise r.err("segments", "give either segments or segment_lists")
        if "segments" in t:
            lists = [(_segments(r, "segments", t["segments"]), 1)]
        else:
            lists = []
            for m, sl in enumerate(r.get("segment_lists", list)):
                rr = TableReader(path, f"srv6.policies[{n}].segment_lists[{m}]", sl,
                             {"segments", "weight"})
                lists.append((_segments(rr, "segments", sl.get("segments")),
                              rr.int_range("weight", 1, 1, 64)))
        src = _v6(r, "source", t["source"]) if "source" in t else None
        table, flow = r.int_range("table", 0, 0, 2**32 - 1), _flow_label(r, None)
        try:  # (a ConfigError is a ValueError: the keys are read outside)
            fib.srv6.add_policy(Policy(bsid, lists, mode, src, table, flow_label=flow))
        except (Srv6Error, ValueError) as e:
            raise r.err("bsid" if "already" in str(e) else "segments", str(e)) from None
    for n, t in enumerate(section.get("steering", [])):
        r = TableReader(path, f"srv6.steering[{n}]", t, {"prefix", "bsid", "table"})
        try:
            text = r.get("prefix", str, required=True)
            if "%" in text:
                raise ValueError
            prefix = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise r.err("prefix", f"{t['prefix']!r} is not a prefix") from None
        bsid = _v6(r, "bsid", r.get("bsid", str, required=True))
        try:
            fib.srv6.steer(prefix, bsid, r.int_range("table", 0, 0, 2**32 - 1))
        except (Srv6Error, ValueError) as e:
            raise r.err("prefix" if "already" in str(e) else "bsid", str(e)) from None


__all__ = ["apply_srv6_config", "ConfigError"]
