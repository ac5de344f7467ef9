"""Small pieces the nodes share: guarded publishing and diagnostic values."""

import threading

import rclpy


def publish_guarded(node, publisher, msg, stopping: threading.Event) -> None:
    """Publish from any thread; while the node shuts down, a closed context is not an error."""
    try:
        publisher.publish(msg)
    except Exception as exc:  # noqa: B902 - the context may be shutting down under us
        if not stopping.is_set():
            node.get_logger().error(f'publish failed: {exc}')


def close(node) -> None:
    """Stop a node's worker (its shutdown()), destroy it and shut ROS down; node may be None."""
    if node is not None:
        node.shutdown()
        node.get_logger().info('stopped')
        node.destroy_node()
    rclpy.try_shutdown()


def diagnostic_value(value) -> str:
    """Render a diagnostics KeyValue value: 'n/a' for unknown, 4 decimals for floats."""
    if value is None:
        return 'n/a'
    return f'{value:.4f}' if isinstance(value, float) else str(value)
