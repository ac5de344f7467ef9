"""
Claim a decoder's name before serving: one decoder per fully qualified name.

Each decoder publishes its InstanceRecord (physinf_ros/serving/instances.py) on ~/instance,
latched, and listens there for DISCOVERY_S before it loads a model. It gives way (NameTaken) to a
decoder that already serves under its name, to one that started before it, or to a node of
its name that publishes no record (an older decoder). The listening is done by a bare node of
the decoder's name that has no prompt topic and no services: a decoder that must give way never
answers, or refuses, a request meant for the one that stays. The decoder node then keeps
listening while its model loads and checks again as it starts serving (NameWatch): on a busy
host discovery can take longer than DISCOVERY_S, and a model load gives it seconds more for
free. Only then does its record say it serves. While it serves it still listens: two that found
each other only after both began serving (discovery slower than both checks) are told apart
there, and the one that started later gives way.
"""

import time
from typing import Dict, Optional, Tuple

from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from .entry import spin_once
from ..serving.instances import InstanceRecord, new_record, rival, taken_message, unrecorded

# Latched: a decoder that starts later still gets the record of the one serving.
INSTANCE_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                          durability=DurabilityPolicy.TRANSIENT_LOCAL)
# Records of several decoders can arrive between two takes: keep them all.
INSTANCE_READER_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.TRANSIENT_LOCAL)
INSTANCE_TOPIC = '~/instance'
# How long a starting decoder listens for others: it adds this much to every start. Records
# arrived within 0.13-0.34 s on one host (test_one_decoder_per_name.py logs it); 1.0 s leaves
# room for a busy host, and for a network, where discovery takes longer.
DISCOVERY_S = 1.0
# A node of its name seen in the graph without a record yet: how much longer to wait for one.
RECORD_GRACE_S = 1.0


class NameTaken(Exception):
    """Another decoder runs under this one's name; the message names it, and is in the log."""


def refusal(node: Node, holder: Optional[InstanceRecord]) -> NameTaken:
    """Log why node gives way, then return the NameTaken that stops it."""
    # Logged where it is decided, not where it is caught: claim_name's teardown runs in rclpy's
    # and the DDS's native code, and once ended a losing decoder by SIGSEGV before the decoder
    # could say why (CI at 1133c6e, docs/RELIABILITY.md).
    message = taken_message(node.get_fully_qualified_name(), holder)
    node.get_logger().fatal(message)
    return NameTaken(message)


def claim_name(node_name: str) -> Tuple[InstanceRecord, Dict[str, InstanceRecord], str]:
    """Listen under node_name for DISCOVERY_S; return (own record, records seen, a note)."""
    claim = Node(node_name, start_parameter_services=False, parameter_overrides=[
        Parameter('start_type_description_service', value=False)])
    executor = SingleThreadedExecutor()
    try:
        own, seen, heard_after = new_record(), {}, []
        start = time.monotonic()

        def on_record(msg: String) -> None:
            record = InstanceRecord.from_json(msg.data)
            if record is not None and record.token != own.token:
                seen[record.token] = record
                heard_after.append(time.monotonic() - start)

        publisher = claim.create_publisher(String, INSTANCE_TOPIC, INSTANCE_QOS)
        claim.create_subscription(String, INSTANCE_TOPIC, on_record, INSTANCE_READER_QOS)
        publisher.publish(String(data=own.to_json()))
        executor.add_node(claim)
        name = claim.get_fully_qualified_name()
        while True:
            spin_once(executor, 0.02)
            waited = time.monotonic() - start
            if waited < DISCOVERY_S:
                continue
            missing = unrecorded(name, claim.get_node_names_and_namespaces(), len(seen))
            if not missing or waited >= DISCOVERY_S + RECORD_GRACE_S:
                break
        if heard_after:
            # How long discovery took: what DISCOVERY_S must cover.
            claim.get_logger().info(f'instance check: {len(seen)} other record(s), the first '
                                    f'after {heard_after[0]:.3f} s')
        holder = rival(own, seen.values())
        if holder is not None or missing:
            raise refusal(claim, holder)
        gave_way = f' ({len(seen)} starting later will give way)' if seen else ''
        return own, seen, f'no other decoder named {name} after {waited:.2f} s{gave_way}'
    finally:
        executor.shutdown()
        claim.destroy_node()


class NameWatch:
    """The decoder node's side: its record on ~/instance, and a last check before it serves."""

    def __init__(self, node, own: InstanceRecord, seen: Dict[str, InstanceRecord]):
        self.node, self.own, self.seen = node, own, dict(seen)
        self.serving_rival: Optional[InstanceRecord] = None   # one that serves and started first
        self._publisher = node.create_publisher(String, INSTANCE_TOPIC, INSTANCE_QOS)
        node.create_subscription(String, INSTANCE_TOPIC, self._on_record, INSTANCE_READER_QOS)
        # Still starting: one that starts later gives way to it, as to one serving.
        self._publisher.publish(String(data=own.to_json()))

    def _on_record(self, msg: String) -> None:
        record = InstanceRecord.from_json(msg.data)
        if record is not None and record.token != self.own.token:
            self.seen[record.token] = record
            if self.own.serving and self.serving_rival is None:
                self.serving_rival = rival(self.own, [record])

    def check(self) -> None:
        """While serving: raise NameTaken if one of this name that started first serves too."""
        if self.serving_rival is not None:
            self.node.get_logger().warning(
                'instance check: another decoder of this name began serving before this one '
                'heard it (discovery was slower than both checks); the one that started later '
                'gives way')
            raise refusal(self.node, self.serving_rival)

    def settle(self, executor) -> None:
        """Take the records that came meanwhile; raise NameTaken or announce serving."""
        # Records wait in the reader while the model loads; a short spin hands them over.
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            spin_once(executor, 0.02)
        name = self.node.get_fully_qualified_name()
        holder = rival(self.own, self.seen.values())
        if holder is not None or unrecorded(
                name, self.node.get_node_names_and_namespaces(), len(self.seen)):
            raise refusal(self.node, holder)
        self.own = self.own.as_serving()
        self._publisher.publish(String(data=self.own.to_json()))
