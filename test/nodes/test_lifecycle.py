"""
decoder_node as a managed node, started with autostart false.

Every transition is driven through ~/change_state and ~/get_state with real rclpy, the node in
its own process.
"""

import os
import time

from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
import pytest
from rcl_interfaces.msg import ParameterType
from rcl_interfaces.srv import DescribeParameters, GetParameters
from ros_harness import DecoderProcess, Harness, Probe, TEST_DEVICE

NAMESPACE = f'/lc{os.getpid()}'


class LifecycleProbe(Probe):
    """The probe plus clients of the decoder's lifecycle services."""

    def __init__(self, namespace):
        super().__init__(namespace)
        self.change_state_client = self.create_client(ChangeState, f'{self.base}/change_state')
        self.get_state_client = self.create_client(GetState, f'{self.base}/get_state')
        self.describe_client = self.create_client(DescribeParameters,
                                                  f'{self.base}/describe_parameters')
        self.get_params_client = self.create_client(GetParameters, f'{self.base}/get_parameters')


@pytest.fixture(scope='module')
def managed(tmp_path_factory):
    log = tmp_path_factory.mktemp('lifecycle') / 'decoder.log'
    node = DecoderProcess(NAMESPACE, log, autostart=False, device=TEST_DEVICE, max_new_tokens=32,
                          max_context=512, model='/nonexistent/model.gguf')
    harness = Harness(NAMESPACE, LifecycleProbe)
    harness.node = node
    try:
        harness.wait_connected(serving=False)
        harness.wait_for(harness.probe.change_state_client.service_is_ready, 30,
                         'the lifecycle services')
        # This node comes up in a moment (no model yet): give discovery time to match the
        # server's answers to our clients too, or a first answer can be lost.
        time.sleep(1.0)
        yield harness
    finally:
        harness.close()
        node.kill()


def state(harness):
    return harness.call(harness.probe.get_state_client, GetState.Request()).current_state.label


def transition(harness, transition_id, timeout=120.0):
    request = ChangeState.Request(transition=Transition(id=transition_id))
    return harness.call(harness.probe.change_state_client, request, timeout=timeout).success


def refusal(harness, text='What is the capital of France?'):
    request_id = harness.send(text)
    end = harness.wait_end(request_id)
    assert end['event'] == 'rejected'
    return end


def diagnostics(harness):
    mark = harness.probe.mark()
    return harness.wait_for(lambda: harness.probe.since(mark, 'diagnostics'), 5,
                            'diagnostics')[-1]


def test_starts_unconfigured_and_refuses_prompts_naming_the_state(managed):
    assert state(managed) == 'unconfigured'
    assert refusal(managed)['reason'] == ('decoder is unconfigured: configure and activate it '
                                          'first')
    assert diagnostics(managed)['lifecycle_state'] == 'unconfigured'
    assert 'autostart is false' in managed.node.log()


def described(harness, name):
    """Return the descriptor and value of one parameter, from the node's parameter services."""
    probe = harness.probe
    desc, = harness.call(probe.describe_client,
                         DescribeParameters.Request(names=[name])).descriptors
    value, = harness.call(probe.get_params_client, GetParameters.Request(names=[name])).values
    return desc, value


@pytest.mark.parametrize('name, kind, refused, words', [
    ('top_p', ParameterType.PARAMETER_DOUBLE, 1,
     'top_p must be a float, got an integer 1 (write 1.0: ROS reads 1 as an integer)'),
    ('top_p', ParameterType.PARAMETER_DOUBLE, True, 'top_p must be a float, got a boolean True'),
    ('max_new_tokens', ParameterType.PARAMETER_INTEGER, 'many',
     "max_new_tokens must be an integer, got a string 'many'"),
    ('use_chat_template', ParameterType.PARAMETER_BOOL, 'yes',
     "use_chat_template must be a boolean, got a string 'yes'"),
])
def test_a_refused_set_leaves_the_parameters_described_type_and_value(managed, name, kind,
                                                                      refused, words):
    before, value_before = described(managed, name)
    assert before.type == kind
    result = managed.set_parameter(name, refused)
    assert not result.successful
    after, value_after = described(managed, name)
    assert after.type == kind and after == before   # what ros2 param describe shows
    assert value_after == value_before and value_after.type == kind
    assert result.reason == words and not after.dynamic_typing


def test_parameters_are_described_with_their_types_descriptions_and_ranges(managed):
    desc, _ = described(managed, 'top_p')
    assert desc.description.startswith('Nucleus sampling')
    low, = desc.floating_point_range
    assert (low.from_value, low.to_value) == (0.01, 1.0)
    desc, _ = described(managed, 'max_new_tokens')
    assert desc.type == ParameterType.PARAMETER_INTEGER and desc.integer_range[0].to_value == 32768
    desc, _ = described(managed, 'model')
    assert desc.type == ParameterType.PARAMETER_STRING and 'Read at configure' in desc.description


def test_failed_configure_leaves_the_node_unconfigured_and_reconfigurable(managed):
    mark = managed.probe.mark()
    assert not transition(managed, Transition.TRANSITION_CONFIGURE)
    assert state(managed) == 'unconfigured'
    error, = [e for e in managed.probe.since(mark, 'events') if e['event'] == 'error']
    assert error['id'] is None and error['reason'].startswith('configure failed')
    assert '/nonexistent/model.gguf' in error['reason']
    status = diagnostics(managed)
    assert '/nonexistent/model.gguf' in status['configure_error']
    assert 'configure failed' in managed.node.log()
    # Configure-time parameters can be changed while unconfigured; then it configures.
    assert managed.set_parameter('model', 'embedded').successful
    assert transition(managed, Transition.TRANSITION_CONFIGURE)
    assert state(managed) == 'inactive'


def test_inactive_refuses_prompts_and_configure_time_changes(managed):
    assert refusal(managed)['reason'] == 'decoder is inactive: activate it first'
    refused = managed.set_parameter('max_context', 1024)
    assert not refused.successful
    assert refused.reason == ('max_context is read at configure: change it while the node is '
                              'unconfigured (now inactive: clean it up first)')
    assert managed.set_parameter('max_new_tokens', 24).successful   # live parameters apply


def test_activate_serves(managed):
    assert transition(managed, Transition.TRANSITION_ACTIVATE)
    assert state(managed) == 'active'
    refused = managed.set_parameter('model', 'embedded')
    assert not refused.successful
    assert refused.reason.endswith('(now active: deactivate it, then clean it up)')
    finished = managed.wait_end(managed.send('What is the capital of France?'))
    assert finished['event'] == 'finished'
    assert diagnostics(managed)['lifecycle_state'] == 'active'


def test_deactivate_cancels_running_and_waiting_requests_then_refuses(managed):
    probe = managed.probe
    assert managed.set_parameter('max_new_tokens', 400).successful
    mark = probe.mark()
    running = managed.send('Write a long story about a robot who learns to paint.')
    waiting = managed.send('And another one about a boat.')
    managed.wait_for(lambda: len(probe.since(mark, 'tokens')) >= 3, 60, 'three tokens')
    assert transition(managed, Transition.TRANSITION_DEACTIVATE)
    assert state(managed) == 'inactive'
    for request_id in (running, waiting):
        finished = managed.wait_end(request_id, timeout=10)
        assert finished['event'] == 'finished' and finished['reason'] == 'cancelled'
        assert finished['detail'] == 'decoder deactivated'
    assert managed.wait_end(running)['tokens'] < 400
    assert refusal(managed)['reason'] == 'decoder is inactive: activate it first'


def test_cleanup_releases_the_model_and_it_configures_again(managed):
    assert transition(managed, Transition.TRANSITION_CLEANUP)
    assert state(managed) == 'unconfigured'
    assert 'model released' in managed.node.log()
    # The configure that failed earlier is history once one succeeded.
    status = diagnostics(managed)
    assert status['lifecycle_state'] == 'unconfigured' and 'configure_error' not in status
    assert managed.set_parameter('max_new_tokens', 8).successful
    assert transition(managed, Transition.TRANSITION_CONFIGURE)
    assert transition(managed, Transition.TRANSITION_ACTIVATE)
    finished = managed.wait_end(managed.send('Say hello.'))
    assert finished['event'] == 'finished' and finished['tokens'] <= 8


def test_shutdown_transition_exits_the_process_cleanly(managed):
    assert transition(managed, Transition.TRANSITION_ACTIVE_SHUTDOWN)
    assert managed.node.proc.wait(timeout=10) == 0, managed.node.log()
    log = managed.node.log()
    assert 'shut down (lifecycle)' in log and 'Traceback' not in log
