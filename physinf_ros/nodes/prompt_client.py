"""
prompt_client: send one prompt to a decoder node and print the reply as it streams.

    ros2 run physinf_ros prompt_client --prompt "What is the capital of France?"

Sends the prompt as a goal of the decoder's Generate action, so it prints its own reply only,
even while other clients are served; Ctrl-C cancels the goal. Where the interface package
physinf_ros_interfaces is not built it falls back to the ~/prompt topic (single client).
Prints the tokens as they arrive, then the decoder's diagnostics. Exits 0 when the request
finished, 1 when it was rejected, failed or timed out, 2 when the prompt cannot be sent (a NUL:
ROS 2 would cut the prompt there, unseen by the decoder).

    ros2 run physinf_ros prompt_client --chat [--system "You are a kitchen robot."]

holds a conversation: each line read from stdin is a user turn, sent with the whole history
(the client keeps it) as the goal's messages, so the decoder reuses the KV cache of the turns
before; after each reply it prints the tokens, the TTFT and how many prompt tokens were cached.
A refused turn is left out of the history. Exits 0 at the end of input, 1 when no decoder
answers.
"""

import argparse
import json
import sys
import time
from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray
import rclpy
from rclpy.action import ActionClient
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from std_msgs.msg import String

try:
    from physinf_ros_interfaces.msg import ChatMessage
except ImportError:   # the interface package is not built: no action, no conversations
    ChatMessage = None

from .common import DIAGNOSTICS_QOS
from .decoder_interface import EVENTS_QOS, Generate, TOKENS_QOS
from ..serving.prompts import unsendable


class PromptClient(Node):
    """Publishes one prompt and follows its request through the decoder's topics."""

    def __init__(self, decoder: str):
        super().__init__('prompt_client')
        self.decoder = decoder.rstrip('/')
        self.sent = False
        self.request_id = None
        self.outcome = None
        self.goal_handle = None
        self.via_topic = False
        self.diagnostics = None
        self._prompt_pub = self.create_publisher(String, f'{self.decoder}/prompt', 10)
        self.create_subscription(String, f'{self.decoder}/tokens', self._on_token, TOKENS_QOS)
        self.create_subscription(String, f'{self.decoder}/events', self._on_event, EVENTS_QOS)
        self.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics,
                                 DIAGNOSTICS_QOS)

    def connected(self) -> bool:
        """Tell whether the decoder listens for prompts and we hear its tokens and events."""
        return (self._prompt_pub.get_subscription_count() > 0
                and self.count_publishers(f'{self.decoder}/tokens') > 0
                and self.count_publishers(f'{self.decoder}/events') > 0)

    def send(self, text: str) -> None:
        _refuse_unsendable(text)
        self._prompt_pub.publish(String(data=text))
        self.sent = self.via_topic = True

    def _on_token(self, msg: String) -> None:
        # Topics are not ordered against each other: a token may beat the 'accepted' event.
        if self.via_topic and self.outcome is None:
            sys.stdout.write(msg.data)
            sys.stdout.flush()

    def _on_event(self, msg: String) -> None:
        if not self.via_topic:
            return   # a goal's outcome comes with its result
        event = json.loads(msg.data)
        if self.request_id is None and event['event'] in ('accepted', 'rejected'):
            self.request_id = event['id']
        if event['id'] != self.request_id:
            return
        if event['event'] in ('finished', 'rejected', 'error'):
            self.outcome = event

    def send_goal(self, text: str, timeout_s: float, history: Optional[list] = None) -> bool:
        """
        Send text as a Generate goal; False when no action server answers in time.

        history: the conversation before text, (role, content) pairs; when given (even
        empty), the goal's messages are history and text as the next user message.
        """
        _refuse_unsendable(text)
        if getattr(self, '_client', None) is None:
            self._client = ActionClient(self, Generate, f'{self.decoder}/generate')
        if not self._client.wait_for_server(timeout_sec=timeout_s):
            return False
        self.sent, self.outcome, self.goal_handle = True, None, None
        goal = Generate.Goal(prompt=text)
        if history is not None:
            goal = Generate.Goal(messages=[ChatMessage(role=role, content=content)
                                           for role, content in list(history) + [('user', text)]])
        self._goal = self._client.send_goal_async(goal, feedback_callback=self._on_feedback)
        self._goal.add_done_callback(self._on_goal_response)
        return True

    def _on_feedback(self, feedback) -> None:
        sys.stdout.write(feedback.feedback.piece)
        sys.stdout.flush()

    def _on_goal_response(self, future) -> None:
        self.goal_handle = future.result()
        self.goal_handle.get_result_async().add_done_callback(self._on_result)

    def _on_result(self, future) -> None:
        result = future.result().result
        finished = result.finish_reason in ('eos', 'length', 'cancelled')
        # The same shape as the events the topic path reads.
        self.outcome = {'event': 'finished' if finished else result.finish_reason,
                        'reason': result.finish_reason if finished else result.detail,
                        'tokens': result.tokens, 'ttft_ms': result.ttft_ms,
                        'tokens_per_s': result.tokens_per_s, 'text': result.text,
                        'prompt_tokens': result.prompt_tokens,
                        'cached_tokens': result.cached_tokens}

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith(self.decoder + ':'):
                self.diagnostics = {kv.key: kv.value for kv in status.values}


def _refuse_unsendable(text: str) -> None:
    reason = unsendable(text)
    if reason:
        raise ValueError(reason)


def _spin_until(node: Node, done, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        rclpy.spin_once(node, timeout_sec=0.05)
    return True


def chat(node: PromptClient, system: str, timeout_s: float, lines=sys.stdin) -> int:
    """Hold a conversation: each line a user turn; return 0 at the end of input."""
    history = [('system', system)] if system else []
    for line in lines:
        text = line.rstrip('\n')
        if not text.strip():
            continue
        reason = unsendable(text)
        if reason:
            print(f'[not sent: {reason}]')
            continue
        # The first turn goes as messages too, so the node renders every turn alike.
        if not node.send_goal(text, timeout_s, history):
            node.get_logger().error(f'no Generate action at {node.decoder}/generate')
            return 1
        if not _spin_until(node, lambda: node.outcome is not None, timeout_s):
            node.get_logger().error('no answer in time')
            return 1
        outcome = node.outcome
        if outcome['event'] != 'finished':
            print(f'\n[{outcome["event"]}: {outcome["reason"]}; this turn is left out]')
            continue
        history += [('user', text), ('assistant', outcome['text'])]
        print(f'\n[{outcome["reason"]}: {outcome["tokens"]} tokens, TTFT '
              f'{outcome["ttft_ms"]:.1f} ms, {outcome["cached_tokens"]} of '
              f'{outcome["prompt_tokens"]} prompt tokens cached]', flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='prompt_client', description=__doc__.split('\n')[0])
    parser.add_argument('--prompt', default='What is the capital of France?')
    parser.add_argument('--decoder', default='/decoder', help="decoder node's name")
    parser.add_argument('--timeout', type=float, default=300.0,
                        help='seconds to wait in all (with --chat: for each turn)')
    parser.add_argument('--chat', action='store_true',
                        help='hold a conversation: each line of stdin is a user turn')
    parser.add_argument('--system', default='',
                        help="with --chat: the conversation's system message (default: none, "
                        "the node's system_prompt)")
    argv = argv or sys.argv
    # Checked before rclpy reads the arguments: its C conversion would cut them at a NUL too.
    reason = next(filter(None, map(unsendable, argv)), None)
    if reason:
        parser.error(reason)   # exit 2, before ROS starts: nothing is sent
    args = parser.parse_args(rclpy.utilities.remove_ros_args(argv)[1:])
    rclpy.init(args=argv)
    node = PromptClient(args.decoder)
    code = 1
    try:
        if not _spin_until(node, node.connected, args.timeout):
            node.get_logger().error(f'no decoder at {args.decoder} after {args.timeout:.0f} s: '
                                    'is decoder_node running in this ROS domain?')
            return code
        if args.chat:
            if ChatMessage is None:
                node.get_logger().error('physinf_ros_interfaces is not built: a conversation '
                                        'needs the Generate action')
                return code
            code = chat(node, args.system, args.timeout)
            return code
        if Generate is None:
            node.get_logger().warning('physinf_ros_interfaces is not built: sending on the '
                                      '~/prompt topic (replies of other clients may mix in)')
            node.send(args.prompt)
        elif not node.send_goal(args.prompt, args.timeout):
            node.get_logger().error(f'no Generate action at {args.decoder}/generate')
            return code
        if not _spin_until(node, lambda: node.outcome is not None, args.timeout):
            node.get_logger().error('no answer in time')
            return code
        sys.stdout.write('\n')
        outcome = node.outcome
        if outcome['event'] != 'finished':
            node.get_logger().error(f'{outcome["event"]}: {outcome["reason"]}')
            return code
        code = 0
        node.diagnostics = None
        _spin_until(node, lambda: node.diagnostics is not None, 3.0)
        print(f'finished ({outcome["reason"]}): {outcome["tokens"]} tokens, '
              f'TTFT {outcome["ttft_ms"]:.1f} ms, {outcome["tokens_per_s"]:.1f} tokens/s')
        width = max(map(len, node.diagnostics or {'': 0}))
        for key, value in (node.diagnostics or {}).items():
            print(f'  {key:>{width}}: {value}')
    except (KeyboardInterrupt, ExternalShutdownException):
        if node.goal_handle is not None and node.outcome is None:
            node.goal_handle.cancel_goal_async()   # best effort: the decoder also watches us
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return code


if __name__ == '__main__':
    sys.exit(main())
