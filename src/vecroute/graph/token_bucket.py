"""The token bucket that limits the ICMP errors and redirects the router sends."""

from numba import njit

from vecroute.graph.state import TB_BURST, TB_CREDIT, TB_LAST, TB_RATE

NANO = 1_000_000_000


@njit(cache=True, inline="always")
def has_token(tb, now: int) -> bool:
    """Refill the bucket and say whether take_token would succeed (takes nothing): a
    caller checks it before the work of building what the token pays for."""
    cap = tb[TB_BURST] * NANO
    if tb[TB_LAST] < 0:
        tb[TB_LAST] = now
    el = now - tb[TB_LAST]
    if el > 0:
        if el > 100 * NANO:
            el = 100 * NANO
        c = tb[TB_CREDIT] + el * tb[TB_RATE]
        tb[TB_CREDIT] = c if c < cap else cap
        tb[TB_LAST] = now
    return tb[TB_CREDIT] >= NANO


@njit(cache=True)
def take_token(tb, now: int) -> bool:
    """Global token bucket: refill at TB_RATE tokens/s up to TB_BURST, take one."""
    if not has_token(tb, now):
        return False
    tb[TB_CREDIT] -= NANO
    return True
