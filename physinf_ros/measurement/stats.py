"""Latency statistics shared by the nodes and the benchmark: percentiles, confidence intervals."""

from collections import deque
import math
import threading
from typing import Dict, Iterable, Optional, Sequence, Tuple

import numpy as np


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


class TokenIntervals:
    """
    Milliseconds between consecutive token publishes of a request: what a subscriber gets.

    Filled by the thread that publishes; start() at each request, so the wait between two
    replies is never counted as an interval.
    """

    def __init__(self, size: int = 512):
        self._window = LatencyWindow(size)
        self._last: Optional[float] = None

    def start(self) -> None:
        self._last = None

    def tick(self, now: float) -> None:
        """Record a publish at time.monotonic() now."""
        if self._last is not None:
            self._window.add((now - self._last) * 1000.0)
        self._last = now

    def summary(self) -> Dict[str, float]:
        """p50/p90/p99 interval ms and the token rate they imply, as LatencyWindow.summary."""
        return self._window.summary()


class PrefixReuse:
    """
    How much of the prompts the KV cache held: the hit rate and the last request's count.

    hit_rate is the fraction of prompt tokens, over the requests decoded since the counts were
    made, whose keys and values were kept rather than computed (NaN before the first).
    """

    def __init__(self):
        self.prompt_tokens = self.cached_tokens = self.requests_reusing = 0
        self.last_prompt_tokens = self.last_cached_tokens = 0

    def add(self, prompt_tokens: int, cached_tokens: int) -> None:
        """Count one decoded request."""
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens
        self.requests_reusing += cached_tokens > 0
        self.last_prompt_tokens, self.last_cached_tokens = prompt_tokens, cached_tokens

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else float('nan')

    def values(self) -> dict:
        """Return the diagnostics' fields."""
        return {'kv_cache_hit_rate': self.hit_rate, 'kv_requests_reusing': self.requests_reusing,
                'last_prompt_tokens': self.last_prompt_tokens,
                'last_cached_tokens': self.last_cached_tokens}


def bootstrap_ratio_ci(a: Sequence[float], b: Sequence[float], confidence: float = 0.95,
                       resamples: int = 10000, seed: int = 0) -> Tuple[float, float, float]:
    """
    Return mean(a) / mean(b) and its percentile bootstrap confidence interval.

    a[i] and b[i] are paired (measured in the same session slot, so drift between slots
    affects both alike): each resample draws slot indices with replacement and keeps the pairs
    together. Returns (ratio, low, high); with one pair the interval is the point itself.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f'need two equally long, non-empty samples; got {a.size} and {b.size}')
    ratio = float(a.mean() / b.mean())
    picks = np.random.default_rng(seed).integers(0, a.size, size=(resamples, a.size))
    ratios = a[picks].mean(axis=1) / b[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return ratio, float(low), float(high)


# Student's t, 97.5th percentiles by degrees of freedom (a two-sided 95% interval); the normal
# distribution's 1.960 beyond the table.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def ratio_t_ci(ratios: Sequence[float]) -> Tuple[float, float, float]:
    """
    Return the geometric mean of independent ratios and its 95% Student-t interval.

    Each ratio is one independent pair (new / base of one round of processes, where the sessions
    of a process share its level and so are not independent of each other). The interval is
    taken on the logarithms, so it is symmetric in new / base and base / new. Needs two ratios.
    """
    logs = np.log(np.asarray(ratios, dtype=float))
    if logs.ndim != 1 or logs.size < 2:
        raise ValueError(f'need at least two ratios; got {logs.size}')
    df = logs.size - 1
    t = T_975[df - 1] if df <= len(T_975) else 1.960
    mean = float(logs.mean())
    half = t * float(logs.std(ddof=1)) / math.sqrt(logs.size)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def bootstrap_mean_ci(values: Sequence[float], confidence: float = 0.95,
                      resamples: int = 10000, seed: int = 0) -> Tuple[float, float, float]:
    """
    Return mean(values) and its percentile bootstrap confidence interval.

    values are independent measurements (a cell's session medians); with one value the
    interval is the point itself.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f'need a non-empty sample; got {values.size} values')
    picks = np.random.default_rng(seed).integers(0, values.size, size=(resamples, values.size))
    means = values[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(values.mean()), float(low), float(high)
