"""benchmark_node as its own process on the embedded model (CPU), over real ROS 2 topics."""

import json
import os
from pathlib import Path
import subprocess
import threading

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from physinf_ros.bench import results
from physinf_ros.nodes.benchmark_node import EVENTS_QOS, RESULT_QOS
from physinf_ros.nodes.common import DIAGNOSTICS_QOS, LATENCY_QOS
import pytest
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node
from ros_harness import BenchmarkProcess, Harness, installed_command
from std_msgs.msg import Float64, String

NAMESPACE = f'/bench{os.getpid()}'
DIAGNOSTIC_KEYS = {'R_floor', 't_floor_ms', 'step_ms_p50', 'launch_fraction', 'speedup',
                   'ci95_lo', 'ci95_hi', 'cost_per_mtok'}
SETTINGS = {'model': 'embedded', 'device': 'cpu', 'modes': 'hf,eager', 'contexts': '32',
            'steps': 3, 'warmup': 1, 'sessions': 2}


class BenchProbe(Node):
    """Records what a benchmark node publishes."""

    def __init__(self, namespace):
        super().__init__('bench_probe')
        self.base = f'{namespace}/benchmark'
        self.lock = threading.Lock()
        self.results, self.events, self.latencies = [], [], []
        self.diagnostics = {}   # status name -> (level, {key: value}), the latest of each
        self.create_subscription(String, f'{self.base}/result',
                                 lambda m: self._add(self.results, json.loads(m.data)),
                                 RESULT_QOS)
        self.create_subscription(String, f'{self.base}/events',
                                 lambda m: self._add(self.events, json.loads(m.data)),
                                 EVENTS_QOS)
        self.create_subscription(Float64, f'{self.base}/step_latency',
                                 lambda m: self._add(self.latencies, m.data), LATENCY_QOS)
        self.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics,
                                 DIAGNOSTICS_QOS)
        self.params_client = self.create_client(SetParameters, f'{self.base}/set_parameters')

    def _add(self, items, value):
        with self.lock:
            items.append(value)

    def _on_diagnostics(self, msg):
        with self.lock:
            for status in msg.status:
                if status.name.startswith(self.base + ':'):
                    self.diagnostics[status.name[len(self.base) + 2:]] = (
                        status.level, {kv.key: kv.value for kv in status.values})

    def event(self, kind):
        with self.lock:
            return next((e for e in self.events if e['event'] == kind), None)


@pytest.fixture(scope='module')
def finished_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp('benchmark')
    node = BenchmarkProcess(NAMESPACE, folder / 'node.log', out_dir=str(folder / 'results'),
                            **SETTINGS)
    harness = Harness(NAMESPACE, BenchProbe)
    try:
        harness.wait_for(lambda: harness.probe.event('finished') or harness.probe.event('error')
                         or node.proc.poll() is not None, 300, 'the benchmark to finish')
        assert harness.probe.event('finished'), node.log()
        harness.wait_for(lambda: harness.probe.diagnostics.get('benchmark', (0, {}))[1]
                         .get('state') == 'done', 10, 'final diagnostics')
    except AssertionError:
        node.kill()
        harness.close()
        raise
    harness.node = node
    yield harness
    harness.close()
    node.kill()


def test_each_cell_is_published_as_a_json_result(finished_run):
    probe = finished_run.probe
    assert [(r['mode'], r['ctx']) for r in probe.results] == [('hf', 32), ('eager', 32)]
    eager = probe.results[1]
    assert eager['baseline'] == 'hf' and eager['ci95_lo'] <= eager['speedup'] <= eager['ci95_hi']
    assert eager['R_floor'] == pytest.approx(eager['t_floor_ms'] / eager['step_ms_p50'])
    assert len(eager['step_ms']) == 2 and all(len(s) == 3 for s in eager['step_ms'])


def test_every_measured_step_is_published(finished_run):
    probe = finished_run.probe
    assert len(probe.latencies) == 2 * 2 * 3   # modes x sessions x steps
    published = sorted(ms for r in probe.results for s in r['step_ms'] for ms in s)
    assert sorted(probe.latencies) == pytest.approx(published)


def test_diagnostics_carry_the_paper_figures(finished_run):
    diagnostics = finished_run.probe.diagnostics
    level, cell = diagnostics['eager ctx 32']
    assert level == DiagnosticStatus.OK
    assert DIAGNOSTIC_KEYS <= set(cell)
    assert 0 < float(cell['R_floor']) and float(cell['t_floor_ms']) > 0
    assert float(cell['ci95_lo']) <= float(cell['speedup']) <= float(cell['ci95_hi'])
    assert cell['cost_per_mtok'] == 'n/a' and cell['launch_fraction'] == 'n/a'
    assert diagnostics['hf ctx 32'][1]['speedup'] == 'n/a'   # the baseline
    _, overall = diagnostics['benchmark']
    assert overall['cells_done'] == '2' and overall['sessions_done'] == '4'
    assert overall['bandwidth_measured'] == 'True'


def test_results_files_hold_what_was_published(finished_run):
    finished = finished_run.probe.event('finished')
    json_path, csv_path = (Path(p) for p in finished['files'])
    doc = results.read(json_path)
    assert doc['status'] == 'complete' and csv_path.is_file()
    assert [c['step_ms'] for c in doc['cells']] == [
        r['step_ms'] for r in finished_run.probe.results]


def test_parameters_cannot_change_during_a_run(finished_run):
    assert not finished_run.set_parameter('sessions', 3).successful


def test_ctrl_c_exits_cleanly(finished_run):
    code, seconds = finished_run.node.interrupt()
    assert code == 0, finished_run.node.log()
    assert seconds < 10.0


def test_bad_parameters_are_reported_not_crashed_on(finished_run, tmp_path):
    # A second probe in the same ROS context (rclpy is initialised once per process).
    namespace = NAMESPACE + '_bad'
    node = BenchmarkProcess(namespace, tmp_path / 'node.log', device='cpu', contexts='32,x')
    probe = BenchProbe(namespace)
    finished_run.executor.add_node(probe)
    try:
        error = finished_run.wait_for(lambda: probe.event('error'), 120, 'an error event')
        assert "contexts must be comma-separated integers; got '32,x'" in error['reason']
        level, overall = finished_run.wait_for(
            lambda: probe.diagnostics.get('benchmark'), 10, 'diagnostics')
        assert overall['state'] == 'error' and level == DiagnosticStatus.ERROR
        assert node.proc.poll() is None, 'the node must stay up and say what is wrong'
        assert node.interrupt()[0] == 0
    finally:
        finished_run.executor.remove_node(probe)
        probe.destroy_node()
        node.kill()


def test_exit_when_done_exits_with_the_outcome(tmp_path):
    command = installed_command('benchmark_node')
    result = subprocess.run(command + ['--ros-args', '-r', f'__ns:={NAMESPACE}_exit',
                                       '-p', 'modes:=eager,warp,hf:nf5', '-p', 'device:=cpu',
                                       '-p', 'exit_when_done:=true'],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "mode 'warp' refused: unknown backend 'warp'" in result.stderr
    assert "mode 'hf:nf5' refused: unknown stack 'nf5'" in result.stderr   # with the list
    assert 'bnb-nf4' in result.stderr
