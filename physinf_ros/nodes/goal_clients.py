"""
Which action client sent each goal of decoder_node's Generate action, and whether it is there.

rclpy hands an action server the goal request without its sender: the request header it keeps
holds only a sequence number (rclpy 9.1's rmw_request_id_t binds no writer_guid), and rclpy has
no graph query for service clients. Service introspection tells it: with the action server's
introspection at CONTENTS, rcl publishes every send_goal request it takes on the hidden topic
<action>/_action/send_goal/_service_event, with the goal (so its goal id) and the client's GID.
Under rmw_fastrtps_cpp that GID is the client's send_goal reply reader, which the graph lists
among the subscriptions of rr<action>/_action/send_goalReply (no_mangle) for as long as the
client exists: the client has gone once it is not listed any more. docs/RELIABILITY.md shows
what each API gives.
"""

from collections import OrderedDict
import threading
from typing import Optional
import uuid

from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.service_introspection import ServiceIntrospectionState

# One event per goal request and one per answer; every request's event matters.
EVENTS_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)


class GoalClients:
    """The client GID of each recent goal, from the send_goal introspection events."""

    KEEP = 1000   # goals remembered: events can come before their goal is accepted

    def __init__(self, node, action_server, action_type, action_name: str):
        self._node = node
        self._clients: 'OrderedDict[str, bytes]' = OrderedDict()
        self._lock = threading.Lock()
        self._reply_topic = f'rr{action_name}/_action/send_goalReply'
        self.unavailable = ''   # why goals cannot be tied to their clients; '' when they can
        try:
            action_server.configure_introspection(node.get_clock(), EVENTS_QOS,
                                                  ServiceIntrospectionState.CONTENTS)
            node.create_subscription(action_type.Impl.SendGoalService.Event,
                                     f'{action_name}/_action/send_goal/_service_event',
                                     self._on_event, EVENTS_QOS)
        except Exception as exc:  # noqa: B902 - e.g. SROS2 permissions without that topic
            self.unavailable = f'{type(exc).__name__}: {exc}'

    def _on_event(self, event) -> None:
        # service_msgs/ServiceEventInfo, through the event (rclpy's own dependency).
        if event.info.event_type != event.info.REQUEST_RECEIVED or not event.request:
            return
        goal_id = str(uuid.UUID(bytes=bytes(event.request[0].goal_id.uuid)))
        with self._lock:
            self._clients[goal_id] = bytes(event.info.client_gid)
            while len(self._clients) > self.KEEP:
                self._clients.popitem(last=False)

    def client_of(self, goal_id: str) -> Optional[bytes]:
        """Return the GID of the client that sent the goal; None if its event has not come."""
        with self._lock:
            return self._clients.get(goal_id)

    def forget(self, goal_id: str) -> None:
        with self._lock:
            self._clients.pop(goal_id, None)

    def present(self) -> frozenset:
        """Return the GIDs of the action's clients now in the graph (their send_goal readers)."""
        return frozenset(bytes(info.endpoint_gid) for info in
                         self._node.get_subscriptions_info_by_topic(self._reply_topic,
                                                                    no_mangle=True))
