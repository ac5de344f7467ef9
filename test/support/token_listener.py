"""
A second subscriber to a decoder's ~/tokens, in its own process, for the vanishing test.

    python token_listener.py /namespace/decoder

Prints 'ready' once subscribed, then one line per token received, until it is killed.
"""

import sys

from physinf_ros.nodes.decoder_interface import TOKENS_QOS
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from std_msgs.msg import String


def main():
    rclpy.init()
    node = Node('token_listener')
    node.create_subscription(String, f'{sys.argv[1]}/tokens',
                             lambda msg: print(f'token {len(msg.data)}', flush=True),
                             TOKENS_QOS)
    print('ready', flush=True)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    main()
