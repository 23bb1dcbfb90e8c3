"""Counts and latencies of FUSE requests, by wrapping the handlers of an Operations class.

aifs/fuse/ops.py applies `@instrument_operations` to AifsOperations (above
`@translate_errors`, so failures are seen as the errno the kernel gets).
"""

import functools
import inspect
import time

from prometheus_client import Counter, Histogram

from aifs.metrics.registry import LATENCY_BUCKETS, REGISTRY

OPS = Counter("aifs_fuse_ops", "FUSE requests served", ["op"], registry=REGISTRY)
ERRORS = Counter("aifs_fuse_errors", "FUSE requests answered with an error", ["op"], registry=REGISTRY)
LATENCY = Histogram("aifs_fuse_op_seconds", "Time to answer a FUSE request", ["op"],
                    buckets=LATENCY_BUCKETS, registry=REGISTRY)


def _timed(op: str, handler):
    ops, errors, latency = OPS.labels(op), ERRORS.labels(op), LATENCY.labels(op)

    @functools.wraps(handler)
    async def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return await handler(*args, **kwargs)
        except BaseException:
            errors.inc()
            raise
        finally:
            ops.inc()
            latency.observe(time.perf_counter() - start)

    return wrapper


def instrument_operations(cls: type) -> type:
    """Time every public coroutine method the class defines itself (the FUSE handlers)."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, _timed(name, member))
    return cls


_TOTALS = {  # sample name: the total it carries
    "aifs_fuse_op_seconds_count": "count", "aifs_fuse_op_seconds_sum": "seconds", "aifs_fuse_errors_total": "errors",
}


def operation_totals() -> dict[str, dict[str, float]]:
    """Per operation, the requests served, those answered with an error and the seconds spent
    answering them since the process started. Read from the collectors themselves, so that
    `aifs stats` has them whether or not the HTTP endpoint is served."""
    totals: dict[str, dict[str, float]] = {}
    for family in (*LATENCY.collect(), *ERRORS.collect()):
        for sample in family.samples:
            if sample.name in _TOTALS:
                op = totals.setdefault(sample.labels["op"], {"count": 0, "errors": 0, "seconds": 0.0})
                op[_TOTALS[sample.name]] = sample.value
    return totals
