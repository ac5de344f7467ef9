"""
decoder_node's request bookkeeping, free of rclpy: the request, its queue, and the ledger.

Every prompt ends up counted exactly once as accepted or rejected, and every accepted request
exactly once as finished (cancelled ones included) or failed; the ledger holds those counts so
that nothing is lost silently and the node can show it.
"""

from collections import deque
from dataclasses import dataclass, field
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..engine import Sampling


@dataclass
class Request:
    """One accepted prompt, the settings it was accepted with, and its cancellation."""

    id: int  # noqa: A003 - the request id, as the events call it
    prompt_ids: list
    max_new_tokens: int
    sampling: Sampling
    steps: int = 0                         # decode steps done so far
    steps_at_cancel: Optional[int] = None  # steps done when the cancel arrived
    cancelled_at: Optional[float] = None   # time.monotonic() of the cancel
    cancel_detail: str = ''                # what cancelled it
    goal_id: Optional[str] = None          # the action goal it serves; None for a topic prompt
    reply: Any = None                      # where its pieces and end go (the node's sink)
    output: Any = None                     # structured.OutputFormat: what the reply must be
    constraint: Any = None                 # its compiled grammar (None: free text)
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _ended: bool = field(default=False, repr=False)
    _settled: bool = field(default=False, repr=False)   # its outcome is fixed: too late to cancel
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def cancel(self, detail: str) -> bool:
        """
        Ask the request to stop, saying what cancelled it (detail); True if this call did.

        Only the first call counts, and records when (in steps and time) and why; False for a
        request cancelled already, or one whose outcome is settled (decoding over).
        """
        with self._lock:
            if self._cancel.is_set() or self._settled:
                return False
            self.steps_at_cancel = self.steps
            self.cancelled_at = time.monotonic()
            self.cancel_detail = detail
            self._cancel.set()
            return True

    def settle(self) -> None:
        """Fix the outcome (decoding is over): a later cancel is refused, not half-applied."""
        with self._lock:
            self._settled = True

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def ended(self) -> bool:
        return self._ended

    def end_once(self) -> bool:
        """Mark the request ended; True only for the first call (its one outcome is sent)."""
        with self._lock:
            first, self._ended = not self._ended, True
            return first


class RequestQueue:
    """The request being decoded and a bounded FIFO of those waiting behind it."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self.current: Optional[Request] = None
        self._waiting: deque = deque()
        self._ready = threading.Condition()

    def put(self, request: Request, admitted: Callable[[int], None]) -> bool:
        """
        Queue a request unless maxsize are waiting already; False when full.

        admitted(position) runs before the request becomes visible to take(), so whatever it
        announces (the 'accepted' event) always precedes what the worker does with it.
        """
        with self._ready:
            if len(self._waiting) >= self.maxsize:
                return False
            admitted(len(self._waiting) + 1)
            self._waiting.append(request)
            self._ready.notify()
            return True

    def take(self, timeout: float) -> Optional[Request]:
        """Make the oldest waiting request the current one; None after timeout s of none."""
        with self._ready:
            if not self._waiting:
                self._ready.wait(timeout)
            if self._waiting:
                self.current = self._waiting.popleft()
                return self.current
            return None

    def remove(self, request: Request) -> bool:
        """Take a waiting request out of the queue; False if it is not waiting (any more)."""
        with self._ready:
            if request not in self._waiting:
                return False
            self._waiting.remove(request)
            self._ready.notify_all()
            return True

    def done(self) -> None:
        """Mark the current request as ended."""
        with self._ready:
            self.current = None
            self._ready.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request runs or waits; False if that took longer than timeout s."""
        with self._ready:
            return self._ready.wait_for(lambda: self.current is None and not self._waiting,
                                        timeout)

    def snapshot(self) -> Tuple[Optional[Request], List[Request]]:
        """Return the current request and those waiting (oldest first) at one instant."""
        with self._ready:
            return self.current, list(self._waiting)

    def cancel_all(self, detail: str) -> Tuple[Optional[Request], List[Request]]:
        """
        Cancel the current request and every waiting one (why: detail).

        Return those this call cancelled: the current one (None if there was none, or it was
        cancelled or settled already) and the waiting ones.
        """
        current, waiting = self.snapshot()
        return (current if current is not None and current.cancel(detail) else None,
                [request for request in waiting if request.cancel(detail)])

    def qsize(self) -> int:
        """Count the requests waiting (the current one not counted)."""
        return len(self._waiting)


class Ledger:
    """Counts of what became of every prompt; safe to update from several threads."""

    KEYS = ('received', 'accepted', 'rejected', 'finished', 'cancelled', 'errors')

    def __init__(self):
        self._counts = dict.fromkeys(self.KEYS, 0)
        self._lock = threading.Lock()

    def count(self, *keys: str) -> None:
        with self._lock:
            for key in keys:
                self._counts[key] += 1

    def snapshot(self) -> Dict[str, int]:
        """Return the counts, plus open: accepted requests that have not ended yet."""
        with self._lock:
            counts = dict(self._counts)
        counts['open'] = counts['accepted'] - counts['finished'] - counts['errors']
        return counts
