"""vecroute: a userspace IPv4/IPv6 vector router and the tools to measure it."""

import os
import stat
from pathlib import Path


def private_dir(path: Path, uid: int | None = None) -> bool:
    """Whether ``path`` is (or, created now with mode 0700, becomes) a directory that no
    other user can write into, nor replace: numba loads its cache index with pickle, so
    whoever can plant a file in the cache directory runs code as the router (root).

    The leaf must be a real directory (not a symlink) owned by ``uid`` that nobody else
    may write; every directory above it must be one nobody else can use to swap it
    (see _parents_ok)."""
    uid = os.geteuid() if uid is None else uid
    leaf = Path(os.path.abspath(path))
    try:
        if not _parents_ok(leaf, uid):
            return False
        try:
            os.mkdir(leaf, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(leaf)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
            return False  # not ours, or someone else may have written into it already
        if st.st_mode & 0o077:  # ours and only ours to write (an older vecroute made it
            os.chmod(leaf, 0o700)  # 0755): keep the compiled kernels, close it
    except OSError:
        return False
    return True


def _parents_ok(path: Path, uid: int) -> bool:
    """Every directory above ``path``, as written and with symlinks resolved, belongs to
    root or ``uid`` and nobody else may write it, unless it is sticky (like /tmp: others
    may add entries there but not rename ours). A symlink on the way must sit in a
    directory nobody else may write at all (sticky or not: the link may be theirs)."""
    for p in reversed(path.parents):
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            if not _safe(os.lstat(p.parent), uid, sticky_ok=False):
                return False
        elif not _safe(st, uid, sticky_ok=True):
            return False
    real = Path(os.path.realpath(path.parent))
    return all(_safe(os.lstat(p), uid, sticky_ok=True) for p in (*reversed(real.parents), real))


def cache_candidates(environ: dict | None = None) -> list[Path]:
    """Where the compile cache may go, best first: $XDG_CACHE_HOME or ~/.cache, then
    $XDG_RUNTIME_DIR (per-user, 0700 by systemd). Never a fixed name under /tmp."""
    env = os.environ if environ is None else environ
    out = []
    cache = env.get("XDG_CACHE_HOME") or (
        str(Path(env["HOME"]) / ".cache") if env.get("HOME") else None
    )
    for base, leaf in ((cache, ("vecroute", "numba")), (env.get("XDG_RUNTIME_DIR"), ())):
        if base and os.path.isabs(base):
            out.append(Path(base).joinpath(*leaf) if leaf else Path(base) / "vecroute-numba")
    return out


def choose_cache_dir(package_dir: Path, candidates: list[Path]) -> Path | None:
    """None: numba's own cache beside the sources (``__pycache__``) is safe to use (the
    package directory is ours to write and nobody else's); else the first candidate that
    is (made) private, its parents created 0700 when missing; else a fresh private
    directory from mkdtemp (no cache across runs: compiling again is slow, loading
    someone else's pickle is worse)."""
    if os.access(package_dir, os.W_OK) and _writable_only_by_us(package_dir):
        return None
    for c in candidates:
        for parent in reversed(c.parents):  # ~/.cache/vecroute: made private on the way
            try:
                os.mkdir(parent, 0o700)
            except FileExistsError:
                pass
            except OSError:  # not ours to make (or to look into: HOME=/root for nobody)
                break
        if private_dir(c):
            return c
    import atexit
    import logging
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="vecroute-numba-"))  # 0700, a new random name
    atexit.register(shutil.rmtree, tmp, True)
    if not private_dir(tmp):  # $TMPDIR lets others rename what is in it
        raise RuntimeError(f"vecroute: no private directory for the compile cache "
                           f"(tried {', '.join(map(str, [*candidates, tmp]))})")
    logging.getLogger("vecroute").warning(
        "vecroute: no private directory for the compile cache (tried %s); compiling into "
        "%s for this run only", ", ".join(map(str, candidates)) or "none", tmp
    )
    return tmp


def _writable_only_by_us(path: Path) -> bool:
    """Every directory of the package (its ``__pycache__`` ones included, where numba
    puts the cache) is owned by root or us and writable by nobody else, and no directory
    above it lets another user replace it."""
    uid = os.geteuid()
    real = Path(os.path.realpath(path))
    try:
        if not _parents_ok(real, uid):
            return False
        for d in (real, *(p for p in real.rglob("*") if p.is_dir() and not p.is_symlink())):
            if not _safe(os.lstat(d), uid, sticky_ok=False):
                return False
    except OSError:
        return False
    return True


def _safe(st: os.stat_result, uid: int, sticky_ok: bool) -> bool:
    """A real directory of root or ``uid`` that nobody else may write (a sticky one, where
    others may add entries but not rename ours, only as a parent)."""
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid in (0, uid)
        and (not st.st_mode & 0o022 or (sticky_ok and bool(st.st_mode & stat.S_ISVTX)))
    )


def _numba_cache_dir() -> None:
    """Point numba's compile cache at a directory only this user can write (an explicit
    NUMBA_CACHE_DIR is the operator's choice and is kept)."""
    if "NUMBA_CACHE_DIR" in os.environ:
        return
    target = choose_cache_dir(Path(__file__).parent, cache_candidates())
    if target is not None:
        os.environ["NUMBA_CACHE_DIR"] = str(target)


_numba_cache_dir()
