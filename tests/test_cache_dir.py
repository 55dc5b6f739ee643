"""Where numba's compile cache goes (issue 12, finding 7).

numba loads a cache index with pickle: whoever can put a file in the cache directory runs
code as the router. The cache therefore only goes where nobody else can write: never a
directory another user made or may write, never a predictable name under /tmp.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import vecroute
from vecroute import cache_candidates, choose_cache_dir, private_dir

SRC = Path(vecroute.__file__).resolve().parents[1]
NOBODY = 65534


@pytest.fixture
def root_only():
    if os.geteuid() != 0:
        pytest.fail("these tests plant directories owned by other users: run them as root")


def planted(base: Path, owner: int, mode: int) -> Path:
    base.mkdir(exist_ok=True)
    d = base / "planted"
    d.mkdir(mode=0o700)
    (d / "evil.nbi").write_bytes(b"not a pickle you want to load")
    os.chown(d, owner, owner)
    os.chmod(d, mode)
    return d


def test_a_new_directory_is_made_private(tmp_path):
    d = tmp_path / "cache"
    assert private_dir(d)
    st = os.lstat(d)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
    assert stat.S_IMODE(st.st_mode) == 0o700


def test_our_own_0755_directory_is_kept_and_closed(tmp_path):
    d = tmp_path / "cache"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    assert private_dir(d) and stat.S_IMODE(os.lstat(d).st_mode) == 0o700


@pytest.mark.parametrize("owner,mode", [(NOBODY, 0o700), (0, 0o777), (0, 0o1777), (0, 0o720)])
def test_a_planted_directory_is_refused(tmp_path, root_only, owner, mode):
    assert not private_dir(planted(tmp_path, owner, mode))


def test_a_symlink_is_refused(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert not private_dir(tmp_path / "link")


def test_a_parent_others_may_write_is_refused(tmp_path, root_only):
    (tmp_path / "open").mkdir()
    os.chmod(tmp_path / "open", 0o777)  # not sticky: anyone may rename our directory away
    assert not private_dir(tmp_path / "open" / "cache")
    os.chmod(tmp_path / "open", 0o1777)  # sticky (like /tmp): only the name's owner may
    assert private_dir(tmp_path / "open" / "cache")


def test_planted_candidates_are_skipped_then_a_fresh_private_directory(tmp_path, root_only):
    a = planted(tmp_path / "a", NOBODY, 0o700)
    b = planted(tmp_path / "b", 0, 0o777)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    os.chmod(pkg, 0o777)  # a package directory others may write: no cache beside it
    got = choose_cache_dir(pkg, [a, b])
    assert got not in (a, b) and got is not None
    st = os.lstat(got)
    assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert list(got.iterdir()) == []
    good = tmp_path / "home" / ".cache" / "vecroute" / "numba"
    assert choose_cache_dir(pkg, [a, good]) == good  # parents made on the way, 0700
    assert stat.S_IMODE(os.lstat(tmp_path / "home" / ".cache").st_mode) == 0o700


def test_candidates_never_name_tmp():
    env = {"HOME": "/home/alice", "XDG_RUNTIME_DIR": "/run/user/1000"}
    assert cache_candidates(env) == [Path("/home/alice/.cache/vecroute/numba"),
                                     Path("/run/user/1000/vecroute-numba")]
    assert cache_candidates({"XDG_CACHE_HOME": "relative"}) == []
    assert all("/tmp" not in str(p) for p in cache_candidates({}))


def test_unprivileged_user_never_gets_a_planted_tmp_directory(root_only):
    """The reported attack: the package directory is not writable (a root-owned install
    imported by another user), HOME is not writable either, and someone else made
    /tmp/vecroute-numba-<uid> beforehand (mode 0777, full of pickles). vecroute used to
    point NUMBA_CACHE_DIR there."""
    uid = NOBODY - 1  # (an older vecroute run as nobody may have left /tmp/...-65534)
    trap = Path(f"/tmp/vecroute-numba-{uid}")
    if trap.exists() or trap.is_symlink():
        pytest.fail(f"{trap} exists already: remove it (it is what an attacker would plant)")
    trap.mkdir()
    try:
        os.chmod(trap, 0o777)
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(SRC), "HOME": "/nonexistent"}
        code = "import os, vecroute; print(os.environ.get('NUMBA_CACHE_DIR'))"
        p = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
             sys.executable, "-c", code],
            capture_output=True, text=True, env=env, timeout=60, cwd="/",
        )
        assert p.returncode == 0, p.stderr
        got = Path(p.stdout.strip())
        assert got != trap and not str(got).startswith(str(trap)), p.stdout
        assert "compiling into" in p.stderr and "this run only" in p.stderr  # said, once
        assert not got.exists()  # a fresh directory of that run, removed at its exit
    finally:
        for f in trap.iterdir():
            f.unlink()
        trap.rmdir()


def test_a_home_we_may_not_even_look_into(root_only):
    """HOME=/root inherited by a process running as nobody: stat() of /root/.cache is
    EACCES (Path.exists() raises it), which must mean "not this one", not a traceback."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(SRC), "HOME": "/root"}
    code = "import os, vecroute; print(os.environ.get('NUMBA_CACHE_DIR'))"
    p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                        sys.executable, "-c", code],
                       capture_output=True, text=True, env=env, timeout=60, cwd="/")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert not p.stdout.startswith("/root"), p.stdout
