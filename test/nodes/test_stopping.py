"""
Stopping decoder_node by a signal delivers every request's result before the process exits.

Real rclpy action clients in this process, the node in its own: a goal running, two waiting
and a topic prompt when SIGINT (Ctrl-C, and what ros2 launch sends first) or SIGTERM comes.
Each goal's result must reach its client, as the lifecycle shutdown transition delivers it
(ABORTED, cancelled, node shutting down), and the process must exit 0 within a bounded time.
"""

import os
import signal
import time

from installed import require_interfaces
import pytest

require_interfaces()

from action_msgs.msg import GoalStatus  # noqa: E402, I100 - after the skip
from known_prompts import LONG_STORY  # noqa: E402
from physinf_ros.nodes.decoder_node import RESULTS_SEND_S, STOP_WAIT_S  # noqa: E402
from physinf_ros_interfaces.action import Generate  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from ros_harness import Probe, serving_decoder, TEST_DEVICE  # noqa: E402
from std_msgs.msg import String  # noqa: E402

# The node's own bound, and time for the process and rclpy to end after it.
EXIT_WITHIN_S = STOP_WAIT_S + RESULTS_SEND_S + 3.0


class ClientsProbe(Probe):
    """The probe plus three Generate clients, each a robot program's own."""

    def __init__(self, namespace):
        super().__init__(namespace)
        self.generate_clients = [ActionClient(self, Generate, f'{self.base}/generate')
                                 for _ in range(3)]


def send_goal(harness, client, **fields):
    """Send a goal; return its accepted handle and the future of its result."""
    pieces = []
    future = client.send_goal_async(Generate.Goal(**fields),
                                    feedback_callback=lambda m: pieces.append(m))
    handle = harness.wait_for(lambda: future.done() and future.result(), 30, 'goal response')
    assert handle.accepted
    return handle.get_result_async(), pieces


# Ctrl-C on ros2 launch: the terminal's SIGINT and launch's own reach the node together.
@pytest.mark.parametrize('signals', [[signal.SIGINT], [signal.SIGTERM],
                                     [signal.SIGINT, signal.SIGINT]],
                         ids=['SIGINT', 'SIGTERM', 'Ctrl-C on ros2 launch'])
def test_a_signal_delivers_every_goal_result_before_the_process_exits(signals, tmp_path,
                                                                      figures):
    namespace = f'/stop{os.getpid()}{len(signals)}{signals[0]}'
    gen = serving_decoder(namespace, tmp_path / 'decoder.log', device=TEST_DEVICE,
                          max_new_tokens=400, max_context=1024, queue_size=4,
                          probe_class=ClientsProbe)
    harness = next(gen)
    try:
        probe = harness.probe
        for client in probe.generate_clients:
            assert client.wait_for_server(timeout_sec=30)
        first, second, third = probe.generate_clients
        running, pieces = send_goal(harness, first, prompt=LONG_STORY)
        harness.wait_for(lambda: len(pieces) >= 3, 120, 'three pieces of the running goal')
        waiting = [send_goal(harness, client, prompt=LONG_STORY, max_new_tokens=8)[0]
                   for client in (second, third)]
        mark = probe.mark()
        probe.prompt_pub.publish(String(data='Say hello.'))
        topic = harness.wait_for(lambda: next((e for e in probe.since(mark, 'events')
                                               if e['event'] == 'accepted'), None),
                                 30, 'the topic prompt accepted')
        assert not any(future.done() for future in [running] + waiting)
        time.sleep(0.5)   # the clients' result requests are at the server by now

        start = time.monotonic()
        for signum in signals:
            harness.node.proc.send_signal(signum)
        code = harness.node.proc.wait(timeout=EXIT_WITHIN_S + 10)
        seconds = time.monotonic() - start
        # Nothing more can come from a process that has gone: what counts arrived before.
        time.sleep(0.5)
        results = [future.result() if future.done() else None for future in [running] + waiting]
        figures('stopped by ' + ' + '.join(signal.Signals(s).name for s in signals),
                exit_code=code,
                seconds=round(seconds, 3),
                results_delivered=sum(result is not None for result in results))
        assert code == 0, harness.node.log()
        assert seconds < EXIT_WITHIN_S
        assert all(result is not None for result in results), harness.node.log()
        for response in results:
            assert response.status == GoalStatus.STATUS_ABORTED
            assert response.result.finish_reason == 'cancelled'
            assert response.result.detail == 'node shutting down'
        assert results[0].result.tokens > 0
        finished = [e for e in probe.since(mark, 'events')
                    if e['event'] == 'finished' and e['id'] == topic['id']]
        assert len(finished) == 1 and finished[0]['detail'] == 'node shutting down'
        assert probe.since(mark, 'response') == ['']   # its (empty) reply went out too
    finally:
        gen.close()
