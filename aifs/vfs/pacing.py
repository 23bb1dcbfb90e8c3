"""A token bucket for upload bandwidth.

Written here rather than taken from a library because the rate limiters on PyPI
target asyncio or threads; this one sleeps with trio and is a dozen lines.
"""

import trio


class TokenBucket:
    """`rate` bytes per second with a burst of one second's worth; rate 0 means no cap.

    A caller takes what it used; the balance may go negative, and then the caller
    sleeps until it is paid back, so the long-run rate never exceeds `rate`.
    """

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._tokens = float(rate)
        self._stamp: float | None = None

    async def take(self, nbytes: int) -> None:
        if self.rate <= 0:
            return
        now = trio.current_time()
        if self._stamp is not None:
            self._tokens = min(self.rate, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= nbytes
        if self._tokens < 0:
            await trio.sleep(-self._tokens / self.rate)
