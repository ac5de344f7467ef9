"""Latency statistics shared by the nodes and the benchmark: percentiles over a window."""

from collections import deque
import math
import threading
from typing import Dict, Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """Return the q-th percentile, q in 0-100, interpolated linearly; NaN for no values."""
    data = sorted(values)
    if not data:
        return float('nan')
    rank = (len(data) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return data[low] + (data[high] - data[low]) * (rank - low)


class LatencyWindow:
    """The most recent step times, safe to fill from one thread and read from another."""

    def __init__(self, size: int = 512):
        self._values = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, step_ms: float) -> None:
        with self._lock:
            self._values.append(step_ms)

    def summary(self) -> Dict[str, float]:
        """p50/p90/p99 step ms and the decode rate they imply."""
        with self._lock:
            values = list(self._values)
        p50 = percentile(values, 50)
        return {'p50': p50, 'p90': percentile(values, 90), 'p99': percentile(values, 99),
                'tokens_per_s': 1000.0 / p50 if values and p50 > 0 else float('nan'),
                'count': len(values)}
