"""vecroute: a userspace IPv4/IPv6 vector router and the tools to measure it."""

import os
from pathlib import Path


def _numba_cache_dir() -> None:
    """numba caches compiled kernels next to the sources; where the package is read-only
    to this user (an unprivileged user of a root-owned install), cache under ~/.cache."""
    if "NUMBA_CACHE_DIR" in os.environ or os.access(Path(__file__).parent, os.W_OK):
        return
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    target = home / "vecroute" / "numba"
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError:
        target = Path("/tmp") / f"vecroute-numba-{os.getuid()}"
        target.mkdir(parents=True, exist_ok=True)
    os.environ["NUMBA_CACHE_DIR"] = str(target)


_numba_cache_dir()
