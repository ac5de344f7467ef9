"""A decoder_node in its own process, and a test node that talks to it over real ROS 2."""

from contextlib import contextmanager
import json
import os
from pathlib import Path
import signal
import subprocess
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray
from installed import installed_command  # noqa: F401 - re-exported for the node tests
from physinf_ros.nodes.common import DIAGNOSTICS_QOS, LATENCY_QOS
from physinf_ros.nodes.decoder_interface import EVENTS_QOS, TOKENS_QOS
from physinf_ros.serving.params import PARAMS_BY_NAME
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import Float64, String
from std_srvs.srv import Trigger


# Where the nodes under test decode: the CPU on CI; `cuda` on the GPU machine
# (benchmarks/run_device.sh nodetests), where auto then picks the graphed backend.
TEST_DEVICE = os.environ.get('PHYSINF_TEST_DEVICE', 'cpu')


class NodeProcess:
    """A node's console script started with parameters in a private namespace; logs to a file."""

    script = 'decoder_node'

    def __init__(self, namespace, log_path, **params):
        args = ['--ros-args', '-r', f'__ns:={namespace}']
        for name, value in params.items():
            args += ['-p', f'{name}:={json.dumps(value)}']
        self.params = params
        self.log_path = log_path
        self._log = open(log_path, 'w')
        command = installed_command(self.script)
        self.proc = subprocess.Popen(command + args, stdout=self._log, stderr=subprocess.STDOUT)

    def log(self):
        return Path(self.log_path).read_text()

    def interrupt(self, timeout=10.0):
        """Ctrl-C the node; returns (exit code, seconds it took to exit)."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=timeout)
        self._log.close()
        return code, time.monotonic() - start

    def status(self):
        """Resident memory (MiB) and thread count of the node process, from /proc."""
        fields = dict(line.split(':', 1) for line in
                      Path(f'/proc/{self.proc.pid}/status').read_text().splitlines())
        return {'rss_mib': round(int(fields['VmRSS'].split()[0]) / 1024, 1),
                'threads': int(fields['Threads'])}

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class DecoderProcess(NodeProcess):
    """decoder_node in its own process."""


class BenchmarkProcess(NodeProcess):
    """benchmark_node in its own process."""

    script = 'benchmark_node'


class Probe(Node):
    """Records everything the decoder publishes, in arrival order."""

    def __init__(self, namespace):
        super().__init__('probe')
        base = f'{namespace}/decoder'
        self.base = base
        self.lock = threading.Lock()
        self.arrivals = []            # (topic, payload) in arrival order
        self.times = []               # time.monotonic() of each arrival
        self.prompt_pub = self.create_publisher(String, f'{base}/prompt', 100)
        self.create_subscription(String, f'{base}/tokens',
                                 lambda m: self._record('tokens', m.data), TOKENS_QOS)
        self.create_subscription(String, f'{base}/response',
                                 lambda m: self._record('response', m.data), 10)
        self.create_subscription(Float64, f'{base}/step_latency',
                                 lambda m: self._record('step_latency', m.data), LATENCY_QOS)
        self.create_subscription(String, f'{base}/events',
                                 lambda m: self._record('events', json.loads(m.data)),
                                 EVENTS_QOS)
        self.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics,
                                 DIAGNOSTICS_QOS)
        self.cancel_client = self.create_client(Trigger, f'{base}/cancel')
        self.cancel_all_client = self.create_client(Trigger, f'{base}/cancel_all')
        self.params_client = self.create_client(SetParameters, f'{base}/set_parameters')

    def _record(self, topic, payload):
        with self.lock:
            self.arrivals.append((topic, payload))
            self.times.append(time.monotonic())

    def _on_diagnostics(self, msg):
        # The decoder's own status as 'diagnostics'; its other tasks' as 'diagnostics:NAME'.
        for status in msg.status:
            if status.name.startswith(self.base + ': '):
                name = status.name[len(self.base) + 2:]
                self._record('diagnostics' if name == 'decoder' else f'diagnostics:{name}',
                             {kv.key: kv.value for kv in status.values})

    def mark(self):
        with self.lock:
            return len(self.arrivals)

    def since(self, mark, topic=None):
        with self.lock:
            items = self.arrivals[mark:]
        return items if topic is None else [p for t, p in items if t == topic]

    def since_timed(self, mark, topic):
        """(arrival time, payload) of one topic's messages since mark."""
        with self.lock:
            items = list(zip(self.times[mark:], self.arrivals[mark:]))
        return [(t, p) for t, (name, p) in items if name == topic]

    def events_for(self, request_id, mark=0):
        return [e for e in self.since(mark, 'events') if e['id'] == request_id]


def serving_decoder(namespace, log_path, probe_class=None, **params):
    """Start decoder_node and a connected Harness; yield the harness, its .node the process."""
    node = DecoderProcess(namespace, log_path, **params)
    harness = Harness(namespace, probe_class or Probe)
    try:
        harness.wait_connected()
    except AssertionError:
        node.kill()
        harness.close()
        raise AssertionError('decoder_node did not come up; its log:\n' + node.log())
    harness.node = node
    try:
        yield harness
    finally:
        harness.close()
        node.kill()


class Harness:
    """rclpy in this process, the probe spinning in a background thread."""

    def __init__(self, namespace, probe_class=Probe):
        rclpy.init()
        self.probe = probe_class(namespace)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.probe)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.02)
        raise AssertionError(f'timed out after {timeout:.0f} s waiting for {what}')

    def wait_connected(self, timeout=300.0, serving=True):
        """
        Wait until the decoder's endpoints are matched and, with serving, it serves.

        Its topics and services exist from its first moment, before configure has loaded the
        model (on a fresh GPU machine that includes compiling the kernels: over 30 s), so a
        node that serves is one whose diagnostics say it is active.
        """
        probe = self.probe
        self.wait_for(lambda: probe.prompt_pub.get_subscription_count() > 0
                      and probe.count_publishers(f'{probe.base}/events') > 0
                      and probe.count_publishers(f'{probe.base}/tokens') > 0
                      and probe.cancel_client.service_is_ready(), timeout, 'the decoder node')
        if serving:
            self.wait_for(lambda: any(d.get('lifecycle_state') == 'active'
                                      for d in probe.since(0, 'diagnostics')),
                          timeout, 'the decoder to serve (diagnostics: active)')

    def send(self, text):
        """Publish a prompt; return the id the decoder gave it (from its first event)."""
        mark = self.probe.mark()
        self.probe.prompt_pub.publish(String(data=text))
        first = self.wait_for(
            lambda: next((e for e in self.probe.since(mark, 'events')
                          if e['event'] in ('accepted', 'rejected')), None), 30, 'an event')
        return first['id']

    def ended(self, request_id, mark=0):
        """Return the finished, rejected or error event of a request since mark, or None."""
        return next((e for e in self.probe.events_for(request_id, mark)
                     if e['event'] in ('finished', 'rejected', 'error')), None)

    def wait_end(self, request_id, timeout=120.0):
        """Wait for the finished, rejected or error event of a request."""
        return self.wait_for(lambda: self.ended(request_id), timeout,
                             f'request {request_id} to end')

    def streamed(self, mark, response, timeout=10.0):
        """
        Return the ~/tokens text since mark once it spells response (or fail after timeout).

        The last token and the response travel on different topics: the response can land
        first, so a test that compares them waits for the stream to catch up.
        """
        self.wait_for(lambda: ''.join(self.probe.since(mark, 'tokens')) == response, timeout,
                      'the streamed tokens to spell the response')
        return ''.join(self.probe.since(mark, 'tokens'))

    def step_latencies(self, mark, steps, timeout=10.0):
        """
        Return the ~/step_latency values since mark, once at least steps of them have arrived.

        Topics are not ordered with each other: the finished event can land before the last
        step's latency, so a test that counts them waits for the count it expects.
        """
        self.wait_for(lambda: len(self.probe.since(mark, 'step_latency')) >= steps, timeout,
                      f'{steps} step latencies')
        return self.probe.since(mark, 'step_latency')

    def call(self, client, request, timeout=10.0):
        future = client.call_async(request)
        self.wait_for(future.done, timeout, f'{client.srv_name}')
        return future.result()

    def set_parameter(self, name, value):
        kinds = {bool: (ParameterType.PARAMETER_BOOL, 'bool_value'),
                 int: (ParameterType.PARAMETER_INTEGER, 'integer_value'),
                 float: (ParameterType.PARAMETER_DOUBLE, 'double_value'),
                 str: (ParameterType.PARAMETER_STRING, 'string_value')}
        kind, field_name = kinds[type(value)]
        param_value = ParameterValue(type=kind, **{field_name: value})
        result = self.call(self.probe.params_client, SetParameters.Request(
            parameters=[Parameter(name=name, value=param_value)]))
        return result.results[0]

    @contextmanager
    def parameters(self, **values):
        """
        Set the decoder's live parameters for a block.

        Afterwards each goes back to the value the node was started with, else its default.
        """
        try:
            for name, value in values.items():
                result = self.set_parameter(name, value)
                assert result.successful, result.reason
            yield
        finally:
            for name in values:
                started = self.node.params.get(name, PARAMS_BY_NAME[name].default)
                assert self.set_parameter(name, started).successful

    def close(self):
        self.executor.shutdown()
        self.probe.destroy_node()
        rclpy.try_shutdown()
