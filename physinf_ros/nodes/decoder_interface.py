"""
decoder_node's interface as its clients see it: the QoS of its topics and the Generate action.

Clients (prompt_client, the tests, benchmarks/node_overhead.py) import it from here, not from
decoder_node, which imports torch and the engine: seconds on a small CPU before a client could
even send its prompt.
"""

from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

try:
    from physinf_ros_interfaces.action import Generate
except ImportError:   # the interface package is not built or not sourced: topics only
    Generate = None

# Tokens must all arrive, in order, even when a subscriber lags a little: reliable and deep.
TOKENS_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
# Every request's events matter (a flood of rejections included).
EVENTS_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
# Prompts are never dropped by the transport: the node's own bounded queue decides.
PROMPT_QOS = QoSProfile(history=HistoryPolicy.KEEP_ALL, reliability=ReliabilityPolicy.RELIABLE)
