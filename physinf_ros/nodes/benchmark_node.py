"""
benchmark_node: runs the paper's protocol from its parameters and publishes what it measures.

A thin translator over physinf_ros.bench: the run happens in a worker thread; each measured step
goes out on ~/step_latency, each finished cell on ~/result (its JSON record), the latest
figures on /diagnostics (1 Hz), and what happens on ~/events. The results are written as JSON
and CSV. When the run is over the node stays up re-publishing the final diagnostics, or, with
exit_when_done, exits (code 0 when complete, 1 after an error).
"""

import json
import sys
import threading
import time
from typing import Dict, List, Optional

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rcl_interfaces.msg import SetParametersResult
import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float64, String

from .common import (close, descriptor, diagnostic_value, DIAGNOSTICS_QOS, LATENCY_QOS,
                     publish_guarded, start_ros, status, Updater)
from .entry import spin_once
from ..bench import params, results
from ..bench.benchmark import BenchListener, Benchmark
from ..engine import EngineError

# Results and events are few and all matter, also to a subscriber that joins late: latched.
RESULT_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)
EVENTS_QOS = RESULT_QOS
# Diagnostic keys of a cell, in the order they are published.
CELL_KEYS = ('model', 'target', 'mode', 'backend', 'ctx', 'R_floor', 't_floor_ms',
             'step_ms_p50', 'tokens_per_s', 'launch_fraction', 'speedup', 'ci95_lo', 'ci95_hi',
             'cost_per_mtok', 'B_peak_gbs', 'bandwidth_measured')


class _Publisher(BenchListener):
    # Turns the run's progress into messages; called from the worker thread.

    def __init__(self, node: 'BenchmarkNode'):
        self.node = node

    def loaded(self, engine) -> None:
        info = engine.info
        self.node.get_logger().info(f'loaded {info.model} ({info.backend} on {info.device}, '
                                    f'{info.dtype}) in {engine.load_s:.1f} s')

    def step(self, mode, ctx, step_ms) -> None:
        self.node.publish(self.node.latency_pub, Float64(data=step_ms))

    def session(self, mode, ctx, session) -> None:
        self.node.sessions_done += 1

    def result(self, record: Dict[str, object]) -> None:
        self.node.records.append(record)
        self.node.publish(self.node.result_pub, String(data=json.dumps(record)))
        self.node.get_logger().info(
            f'{record["mode"]} ctx {record["ctx"]}: {record["step_ms_p50"]:.3f} ms/step, '
            f'R_floor {diagnostic_value(record["R_floor"])}')


class BenchmarkNode(Node):
    """Runs one benchmark plan in a worker thread and publishes its results."""

    def __init__(self):
        super().__init__('benchmark')
        for param in params.BENCH_PARAMS:
            desc = descriptor(param)
            # A lone context (-p contexts:=2048) arrives as an integer; take it as '2048'.
            desc.dynamic_typing = param.name == 'contexts'
            self.declare_parameter(param.name, param.default, desc)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.settings = {p.name: self.get_parameter(p.name).value for p in params.BENCH_PARAMS}
        self.settings['contexts'] = str(self.settings['contexts'])
        self.latency_pub = self.create_publisher(Float64, '~/step_latency', LATENCY_QOS)
        self.result_pub = self.create_publisher(String, '~/result', RESULT_QOS)
        self.events_pub = self.create_publisher(String, '~/events', EVENTS_QOS)
        self.diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', DIAGNOSTICS_QOS)
        self.records: List[Dict[str, object]] = []
        self.sessions_done = 0
        self.sessions_total = 0
        self.state = 'starting'
        self.detail = ''
        self.files: List[str] = []
        self.finished = threading.Event()
        self.stopping = threading.Event()
        self.benchmark: Optional[Benchmark] = None
        self.diagnostics = Updater(self, lambda array: self.publish(self.diag_pub, array))
        self.diagnostics.add(self._run_status)
        self.diagnostics.add(self._cell_statuses)
        self.create_timer(1.0, self.diagnostics.update)
        self.worker = threading.Thread(target=self._run, name='benchmark', daemon=True)
        self.worker.start()

    # -- parameters ---------------------------------------------------------------------------
    def _on_set_parameters(self, changes) -> SetParametersResult:
        reason = ('benchmark parameters are read when the node starts; start it again with '
                  'the new values')
        for change in changes:
            self.get_logger().warning(f'parameter change of {change.name} refused: {reason}')
        return SetParametersResult(successful=False, reason=reason)

    # -- the run (worker thread) -------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._measure()
        except (EngineError, ValueError, RuntimeError, OSError) as exc:
            self._fail(f'benchmark failed: {exc}')
        finally:
            if not self.stopping.is_set():
                self.diagnostics.update()
            self.finished.set()

    def _measure(self) -> None:
        problems = params.problems(self.settings)
        if problems:
            return self._fail('parameters refused: ' + '; '.join(problems))
        s = self.settings
        plan = params.plan(s)
        self.sessions_total = plan.session_count()
        self.state = 'measuring'
        self.benchmark = Benchmark(plan, s['target'], s['price_per_hour'] or None,
                                   log=self.get_logger().info)
        target = self.benchmark.target
        self.event('started', f'{plan.session_count()} sessions: modes {",".join(plan.modes)}, '
                   f'contexts {",".join(map(str, plan.contexts))} on {target.name}',
                   target=target.key, B_peak_gbs=target.bandwidth_gbs, measured=target.measured)
        try:
            doc = self.benchmark.run(_Publisher(self), stop=self.stopping.is_set)
        except (EngineError, RuntimeError):
            self._write(self.benchmark.document('error'))   # keep what was measured
            raise
        self._write(doc)
        self.state = 'done' if doc['status'] == 'complete' else doc['status']
        self.event('finished', f'{len(doc["cells"])} cells, status {doc["status"]}',
                   status=doc['status'], files=self.files)

    def _write(self, doc) -> None:
        path = results.default_path(self.benchmark.target, self.settings['model'],
                                    str(params.out_dir(self.settings)))
        self.files = [str(p) for p in results.write(doc, path)]
        self.get_logger().info('wrote ' + ' and '.join(self.files))

    def _fail(self, reason: str) -> None:
        self.state, self.detail = 'error', reason
        self.get_logger().error(reason)
        self.event('error', reason)

    # -- messages -----------------------------------------------------------------------------
    def event(self, kind: str, reason: str, **extra) -> None:
        self.publish(self.events_pub,
                     String(data=json.dumps({'event': kind, 'reason': reason, **extra})))

    def publish(self, publisher, msg) -> None:
        publish_guarded(self, publisher, msg, self.stopping)

    def _run_status(self) -> List[DiagnosticStatus]:
        overall = {'state': self.state, 'sessions_done': self.sessions_done,
                   'sessions_total': self.sessions_total, 'cells_done': len(self.records),
                   'files': ' '.join(self.files)}
        if self.benchmark is not None:
            target = self.benchmark.target
            overall.update(target=target.key, B_peak_gbs=target.bandwidth_gbs,
                           bandwidth_measured=target.measured)
        level = DiagnosticStatus.ERROR if self.state == 'error' else DiagnosticStatus.OK
        return [status('benchmark', level, self.detail or self.state, overall)]

    def _cell_statuses(self) -> List[DiagnosticStatus]:
        return [status(f'{record["mode"]} ctx {record["ctx"]}', DiagnosticStatus.OK,
                       f'{diagnostic_value(record["step_ms_p50"])} ms/step, R_floor '
                       f'{diagnostic_value(record["R_floor"])}',
                       {k: record[k] for k in CELL_KEYS}, str(record['device']))
                for record in list(self.records)]

    def shutdown(self) -> None:
        """Stop the run within about one decode step; what was measured is written."""
        self.stopping.set()
        self.worker.join(timeout=10.0)


def main(args=None) -> int:
    if not start_ros(args, 'benchmark'):
        return 1
    node = None
    code = 0
    try:
        node = BenchmarkNode()
        executor = MultiThreadedExecutor(num_threads=2)
        executor.add_node(node)
        exit_when_done = node.settings['exit_when_done']
        while rclpy.ok() and not (exit_when_done and node.finished.is_set()):
            spin_once(executor, 0.1)
        if exit_when_done:
            time.sleep(1.0)   # let reliable subscribers fetch the last results before we go
            code = 1 if node.state == 'error' else 0
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        close(node, 'benchmark')
    return code


if __name__ == '__main__':
    sys.exit(main())
