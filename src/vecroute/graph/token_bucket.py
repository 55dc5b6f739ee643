"""The token buckets that limit the ICMP errors, redirects and TCP RSTs the router sends
(and the punt policer): ``tb[b + TB_*]`` is a bucket (``b`` its first column)."""

from numba import njit

from vecroute.graph.state import TB_BURST, TB_CREDIT, TB_LAST, TB_RATE

NANO = 1_000_000_000


@njit(cache=True, inline="always")
def has_token_at(tb, b, now: int) -> bool:
    """Refill the bucket at column ``b`` and say whether take_token_at would succeed
    (takes nothing): a caller checks it before the work of building what the token pays
    for."""
    cap = tb[b + TB_BURST] * NANO
    if tb[b + TB_LAST] < 0:
        tb[b + TB_LAST] = now
    el = now - tb[b + TB_LAST]
    if el > 0:
        if el > 100 * NANO:
            el = 100 * NANO
        c = tb[b + TB_CREDIT] + el * tb[b + TB_RATE]
        tb[b + TB_CREDIT] = c if c < cap else cap
        tb[b + TB_LAST] = now
    return tb[b + TB_CREDIT] >= NANO


@njit(cache=True)
def take_token_at(tb, b, now: int) -> bool:
    """Refill the bucket at column ``b`` at TB_RATE tokens/s up to TB_BURST, take one."""
    if not has_token_at(tb, b, now):
        return False
    tb[b + TB_CREDIT] -= NANO
    return True


@njit(cache=True, inline="always")
def has_token(tb, now: int) -> bool:
    """has_token_at of the bucket at column 0."""
    return has_token_at(tb, 0, now)


@njit(cache=True)
def take_token(tb, now: int) -> bool:
    """take_token_at of the bucket at column 0 (the ICMP errors' in icmp_tb)."""
    return take_token_at(tb, 0, now)
