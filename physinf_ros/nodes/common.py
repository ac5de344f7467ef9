"""Small pieces the nodes share: start and stop, QoS, descriptors, publishing, diagnostics."""

import threading
from typing import Any, Callable, Dict, Iterable, List

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from lifecycle_msgs.srv import ChangeState, GetAvailableStates, GetAvailableTransitions, GetState
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                ParameterType)
import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.lifecycle import LifecycleNodeMixin
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions

from .entry import take_signals

# One latency sample per step; a subscriber that falls far behind only loses old samples.
LATENCY_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
# Diagnostics are a state snapshot: only the newest one matters.
DIAGNOSTICS_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
# Services: the default services QoS keeps the last 10 requests, so the DDS reader drops the
# rest of a burst that arrives before the executor takes them, and their callers wait for ever
# (200 concurrent ~/cancel calls: 11-14 answered). 1000 is rclpy's depth for the parameter
# services (qos_profile_parameters); the same depth keeps the answers on the way back.
# Keep last, not keep all: a client that stops reading can never block the node's writer.
SERVICES_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)

# The lifecycle services rclpy's LifecycleNodeMixin creates, with the handler of each.
# rcl_lifecycle creates them with the default services QoS (keep last 10) and takes no QoS;
# with enable_communication_interface=False it creates none (the transition_event publisher
# stays) and the node creates them with SERVICES_QOS, bound to the mixin's own handlers.
LIFECYCLE_SERVICES = (
    (ChangeState, 'change_state', 'on_change_state'),
    (GetState, 'get_state', 'on_get_state'),
    (GetAvailableStates, 'get_available_states', 'on_get_available_states'),
    (GetAvailableTransitions, 'get_available_transitions', 'on_get_available_transitions'),
    (GetAvailableTransitions, 'get_transition_graph', 'on_get_transition_graph'),
)


def _mixin_handler(handler: str) -> str:
    # The mixin's handlers are private (name-mangled) methods; rclpy is pinned (requirements.txt)
    # and has_lifecycle_handlers() checks they are there before the node relies on them.
    return f'_{LifecycleNodeMixin.__name__}__{handler}'


def has_lifecycle_handlers() -> bool:
    """Whether this rclpy's LifecycleNodeMixin has the handlers create_lifecycle_services binds."""
    return all(hasattr(LifecycleNodeMixin, _mixin_handler(handler))
               for _, _, handler in LIFECYCLE_SERVICES)


def create_lifecycle_services(node, callback_group) -> None:
    """Create a lifecycle node's services with SERVICES_QOS (the mixin made without them)."""
    for srv_type, name, handler in LIFECYCLE_SERVICES:
        node.create_service(srv_type, f'~/{name}', getattr(node, _mixin_handler(handler)),
                            qos_profile=SERVICES_QOS, callback_group=callback_group)


PARAMETER_TYPES = {bool: ParameterType.PARAMETER_BOOL, int: ParameterType.PARAMETER_INTEGER,
                   float: ParameterType.PARAMETER_DOUBLE, str: ParameterType.PARAMETER_STRING}


def descriptor(param, managed: bool = False, typed: bool = False) -> ParameterDescriptor:
    """
    Build the ROS parameter descriptor of a config.Param: description, range, read-only, type.

    managed: the node is a lifecycle node that reads its read_only parameters at configure;
    they stay writable for ROS, and the node refuses changes to them unless unconfigured.
    typed: the parameter's type is fixed (dynamic_typing off). A node declares its parameters
    untyped, so that a value of another type given at start is refused by the table's check
    (which names the parameter and both types), then fixes their types (fix_types): a refused
    set can then never change the type the descriptor reports.
    """
    description = param.description
    if managed and param.read_only:
        description += ' Read at configure: change it while the node is unconfigured.'
    desc = ParameterDescriptor(description=description,
                               read_only=param.read_only and not managed,
                               dynamic_typing=not typed)
    if typed:
        desc.type = PARAMETER_TYPES[type(param.default)]
    if param.choices:
        desc.additional_constraints = 'one of: ' + ', '.join(param.choices)
    if param.low is not None and isinstance(param.default, float):
        desc.floating_point_range = [FloatingPointRange(
            from_value=float(param.low), to_value=float(param.high), step=0.0)]
    elif param.low is not None:
        desc.integer_range = [IntegerRange(
            from_value=int(param.low), to_value=int(param.high), step=1)]
    return desc


def fix_types(node, params, managed: bool = False) -> None:
    """Fix the declared parameters' types, once their values have passed the table's checks."""
    for param in params:
        node.set_descriptor(param.name, descriptor(param, managed, typed=True))


def publish_guarded(node, publisher, msg, stopping: threading.Event) -> None:
    """Publish from any thread; while the node shuts down, a closed context is not an error."""
    try:
        publisher.publish(msg)
    except Exception as exc:  # noqa: B902 - the context may be shutting down under us
        if not stopping.is_set():
            node.get_logger().error(f'publish failed: {exc}')


def start_ros(args, logger_name: str) -> bool:
    """
    rclpy.init with the node's own Ctrl-C and SIGTERM handling; False (logged) if rcl refuses.

    rclpy's handlers would shut ROS down at once; instead both signals raise KeyboardInterrupt
    in the main thread, so the node ends its work and says so while its publishers still work
    (close() below), then shuts ROS down.
    """
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    except RCLError as exc:
        # rcl parses --ros-args (a broken --params-file included) before any node exists.
        rclpy.logging.get_logger(logger_name).fatal(
            f'ROS 2 could not start with these arguments: {exc}')
        return False
    take_signals()
    return True


def close(node, logger_name: str) -> None:
    """Stop a node's worker (its shutdown()), destroy it and shut ROS down; node may be None."""
    if node is None:
        # Interrupted (or refused) before the node existed: say so all the same.
        rclpy.logging.get_logger(logger_name).info('stopped')
    else:
        node.shutdown()
        node.get_logger().info('stopped')
        node.destroy_node()
    rclpy.try_shutdown()


def diagnostic_value(value) -> str:
    """Render a diagnostics KeyValue value: 'n/a' for unknown, 4 decimals for floats."""
    if value is None:
        return 'n/a'
    return f'{value:.4f}' if isinstance(value, float) else str(value)


def status(name: str, level: int, message: str, values: Dict[str, Any],
           hardware_id: str = '') -> DiagnosticStatus:
    """One status of a diagnostics task: its name below the node's, level, message, values."""
    return DiagnosticStatus(level=level, name=name, message=message, hardware_id=hardware_id,
                            values=[KeyValue(key=k, value=diagnostic_value(v))
                                    for k, v in values.items()])


class Updater:
    """
    diagnostic_updater's Updater, small: task functions make statuses; update() publishes them.

    Every status is named "<node's full name>: <its name>" and all go out in one stamped
    DiagnosticArray, as diagnostic_updater does.
    """

    def __init__(self, node, publish: Callable[[DiagnosticArray], None]):
        self._node = node
        self._publish = publish
        self._tasks: List[Callable[[], Iterable[DiagnosticStatus]]] = []

    def add(self, task: Callable[[], Iterable[DiagnosticStatus]]) -> None:
        self._tasks.append(task)

    def update(self) -> None:
        prefix = self._node.get_fully_qualified_name()
        statuses = []
        for task in self._tasks:
            try:
                statuses += task()
            except Exception as exc:  # noqa: B902 - a diagnostics bug must not stop the node
                self._node.get_logger().error(f'diagnostics task {task.__name__} failed: {exc}')
                statuses.append(status(task.__name__.strip('_'), DiagnosticStatus.ERROR,
                                       f'task failed: {exc}', {}))
        for item in statuses:
            item.name = f'{prefix}: {item.name}'
        array = DiagnosticArray(status=statuses)
        array.header.stamp = self._node.get_clock().now().to_msg()
        self._publish(array)
