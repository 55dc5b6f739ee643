"""A/B of the classifier split (issue 13): the kernels before (22 arrays passed one by one,
class rows through ``ctl``) and after (the ``FW`` tuple passed whole, ``_nrt=False``
entry points), in one process on the same compiled rule sets and keys, interleaved.

    python -m bench.fw_split_ab [--repeat R] [--packets N] [--old-commit C]

The old kernel module is taken from git (``git show C:src/vecroute/firewall/classifier.py``,
default d1eb863, the commit before the split) into a temporary directory and imported
under another name; both are driven the way the graph drives them (vectors of 256 key rows
from compiled code, bench.firewall's driver). Rule sets: bench.firewall's 10K no-match
rules and one table rule over 1M no-match entries (keys: UDP from 192.0.2.0/24 to random
destinations outside the rules' prefixes), and the ClassBench 10k sets (its keys). Every
repetition runs every case with both kernels, in alternating order; the verdicts and rule
indices of both must be equal. Unit: M classifications per CPU-second.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from numba import njit

from bench.common import CpuShare, eprint, machine_line, pin_to_one_cpu, summary
from bench.firewall import CLASSBENCH, NOW_NS, SEED, VECTOR, firewall, nomatch_rules, table_text
from vecroute.firewall.classbench import gen_keys, load_classbench, to_rules
from vecroute.firewall.classify import fw_batch
from vecroute.firewall.keys import make_key

REPO = Path(__file__).resolve().parent.parent


def old_module(commit: str, tmp: Path):
    """The pre-split classifier module, importable beside the current package."""
    text = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:src/vecroute/firewall/classifier.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # the split freed FC_ROWS in states.py (the old kernels' scratch slots)
    tables = "from vecroute.firewall.tables import ("
    text = text.replace("    FC_ROWS,\n", "").replace(tables, "FC_ROWS = 24\n" + tables)
    path = tmp / "fw_classifier_old.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("fw_classifier_old", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fw_classifier_old"] = mod
    spec.loader.exec_module(mod)
    return mod


def drivers(old):
    old_batch = old._batch

    @njit(_nrt=False)
    def drive_old(
        c4, cl6_roots, cl6_groups, cmap, bm, ag, grp, glist, gpos, rinfo, prog, probes, cnt,
        t4_roots, t4_groups, t6_roots, t6_groups, t_idx, nt, if_tab, st, ctl, keys, total, v, r, a,
    ):  # fmt: skip
        n = keys.shape[0]
        done = 0
        pos = 0
        while done < total:
            if pos + VECTOR > n:
                pos = 0
            old_batch(
                c4, cl6_roots, cl6_groups, cmap, bm, ag, grp, glist, gpos, rinfo, prog, probes,
                cnt, t4_roots, t4_groups, t6_roots, t6_groups, t_idx, nt, if_tab, st, ctl,
                keys[pos : pos + VECTOR], VECTOR, 0, NOW_NS, v, r, a,
            )  # fmt: skip
            pos += VECTOR
            done += VECTOR

    @njit(_nrt=False)
    def drive_new(fw, keys, total, v, r, a):
        n = keys.shape[0]
        done = 0
        pos = 0
        while done < total:
            if pos + VECTOR > n:
                pos = 0
            fw_batch(fw, keys[pos : pos + VECTOR], VECTOR, 0, NOW_NS, v, r, a)
            pos += VECTOR
            done += VECTOR

    return drive_old, drive_new


def nomatch_keys(n: int, rng: np.random.Generator) -> np.ndarray:
    """UDP from 192.0.2.0/24 to destinations in 64.0.0.0/3 (none in 10/8, 172.16/12)."""
    src = (192 << 24) | (2 << 8) | rng.integers(1, 255, n)
    dst = (64 << 24) + rng.integers(0, 1 << 29, n)
    return np.stack(
        [
            make_key(int(s), int(d), 17, int(p), 53)
            for s, d, p in zip(src, dst, rng.integers(1024, 65536, n), strict=True)
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--packets", type=int, default=1 << 19)
    ap.add_argument("--old-commit", default="d1eb863")
    args = ap.parse_args(argv)
    cpu = pin_to_one_cpu(None)
    eprint(f"pinned to CPU {cpu}; {machine_line()}")
    rng = np.random.default_rng(SEED)
    tmp = Path(tempfile.mkdtemp(prefix="fwab"))
    drive_old, drive_new = drivers(old_module(args.old_commit, tmp))
    cases = []
    keys = nomatch_keys(1 << 14, rng)
    cases.append(("10K no-match rules", firewall(nomatch_rules(10_000, rng)), keys))
    bl = tmp / "bl.txt"
    bl.write_text(table_text(1_000_000, rng))
    fw = firewall(["100 deny ip from table(bl) to any"], tables=[{"name": "bl", "type": "addr"}])
    fw.tables.add_file("bl", bl)
    cases.append(("table of 1M no-match entries", fw, keys))
    for name in ("acl1_10k", "fw1_10k", "ipc1_10k"):
        cb = load_classbench(CLASSBENCH / name)
        keys = gen_keys(cb, 100_000, seed=SEED)
        cases.append((f"ClassBench {name}", firewall(to_rules(cb), "deny"), keys))
    v = np.zeros(VECTOR, np.int32)
    r, a = v.copy(), v.copy()
    out = {(c[0], k): [] for c in cases for k in ("old", "new")}
    share = CpuShare()

    def run(kind: str, c, total: int) -> np.ndarray:
        _, f, ks = c
        ks = np.ascontiguousarray(ks)
        c0 = time.process_time()
        with share:
            if kind == "old":
                drive_old(*f.args(), ks, total, v, r, a)
            else:
                drive_new(f.dataplane(), ks, total, v, r, a)
        out[(c[0], kind)].append(total / (time.process_time() - c0) / 1e6)
        return np.stack([v.copy(), r.copy()])

    eprint("compile and check")
    for c in cases:
        got = {k: run(k, c, VECTOR) for k in ("old", "new")}
        if not np.array_equal(got["old"], got["new"]):
            raise RuntimeError(f"{c[0]}: the old and the new kernels disagree")
    for x in out.values():
        x.clear()
    for rep in range(args.repeat):
        order = ("old", "new") if rep % 2 == 0 else ("new", "old")
        for c in cases:
            for k in order:
                run(k, c, args.packets)
        eprint(f"  repetition {rep + 1}/{args.repeat}")
    sh = summary(share.shares)
    print(machine_line())
    print(
        f"{args.repeat} repetitions, interleaved, {args.packets} classifications each; CPU "
        f"share median {sh['median']:.2f} (min {sh['min']:.2f}); median [min .. max]"
    )
    print(f"{'case':32} {'old M/CPU-s':>20} {'new M/CPU-s':>20} {'new/old':>16}")
    for c in cases:
        o, n = out[(c[0], "old")], out[(c[0], "new")]
        so, sn = summary(o), summary(n)
        ratio = summary([y / x for x, y in zip(o, n, strict=True)])
        print(
            f"{c[0]:32} {so['median']:>7.2f} [{so['min']:.2f}..{so['max']:.2f}] "
            f"{sn['median']:>7.2f} [{sn['min']:.2f}..{sn['max']:.2f}] "
            f"{ratio['median']:>6.3f} [{ratio['min']:.2f}..{ratio['max']:.2f}]"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
