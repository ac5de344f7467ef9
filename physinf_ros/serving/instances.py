"""
One decoder per name: the record each decoder publishes at start, and who must give way.

Free of rclpy: nodes/instance_claim.py publishes and collects the records over ROS 2.
"""

from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
import json
import os
import secrets
import socket
import time
from typing import Iterable, List, Optional, Tuple


@dataclass(frozen=True)
class InstanceRecord:
    """Who runs under a name: process, host, wall-clock start, a random token, whether serving."""

    pid: int
    host: str
    started_ns: int      # time.time_ns() at start: comparable across processes and hosts
    token: str           # tells two records apart and breaks a tie of start times
    serving: bool = False  # past its own check: it stays, whenever it started

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Optional['InstanceRecord']:
        """Parse a record; None for anything that is not one (another publisher's noise)."""
        try:
            fields = json.loads(text)
            record = cls(pid=int(fields['pid']), host=str(fields['host']),
                         started_ns=int(fields['started_ns']), token=str(fields['token']),
                         serving=bool(fields.get('serving', False)))
        except (ValueError, TypeError, KeyError):
            return None
        return record

    def as_serving(self) -> 'InstanceRecord':
        return replace(self, serving=True)

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.started_ns / 1e9, timezone.utc)
        return f'pid {self.pid} on {self.host} since {since.isoformat(timespec="seconds")}'


def new_record() -> InstanceRecord:
    """Make this process's record, not yet serving."""
    return InstanceRecord(pid=os.getpid(), host=socket.gethostname(),
                          started_ns=time.time_ns(), token=secrets.token_hex(8))


def _order(record: InstanceRecord) -> Tuple[int, str]:
    return record.started_ns, record.token


def rival(own: InstanceRecord, seen: Iterable[InstanceRecord]) -> Optional[InstanceRecord]:
    """
    Return the instance own must give way to, or None when own may serve.

    One that already serves stays, whatever its start time says (clocks of two hosts may
    disagree): a newcomer never ends a serving decoder. Among instances still starting, the one
    that started first stays, a tie broken by the token. Two that both serve missed each other
    (discovery slower than both their checks); there too the one that started first stays.
    """
    others = [record for record in seen if record.token != own.token]
    serving = [record for record in others if record.serving]
    if own.serving:
        earlier = [record for record in serving if _order(record) < _order(own)]
        return min(earlier, key=_order) if earlier else None
    if serving:
        return min(serving, key=_order)
    earlier = [record for record in others if _order(record) < _order(own)]
    return min(earlier, key=_order) if earlier else None


def fully_qualified(name: str, namespace: str) -> str:
    return f'{namespace.rstrip("/")}/{name}'


def unrecorded(own_name: str, graph: List[Tuple[str, str]], records: int) -> int:
    """
    Nodes of own_name in the graph, besides this one, that no record accounts for.

    graph: (name, namespace) of every node, this one included. Such a node is an older
    decoder (it publishes no record), or one whose record has not arrived yet.
    """
    same = sum(fully_qualified(name, namespace) == own_name for name, namespace in graph)
    return max(0, same - 1 - records)


def taken_message(own_name: str, holder: Optional[InstanceRecord]) -> str:
    """Write the FATAL line of a decoder that must give way."""
    who = (f'({holder.describe()})' if holder is not None else
           '(it publishes no instance record: an older decoder, or one killed within the '
           'last 20 s or so that DDS has not forgotten yet)')
    return (f'another decoder is already running as {own_name} {who}: stop it or start this '
            'one with another name or namespace')
