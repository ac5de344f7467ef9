"""prompt_client refuses a prompt it cannot send whole: a NUL would cut it below rclpy."""

from physinf_ros.nodes import prompt_client
from physinf_ros.serving.prompts import unsendable
import pytest
import rclpy
from rclpy.serialization import deserialize_message, serialize_message
from std_msgs.msg import String

NUL_PROMPT = 'hello \x00 world'


def test_the_transport_cuts_a_prompt_at_its_nul_unseen_by_the_decoder():
    # Why the client must refuse it: the decoder would get, accept and answer 'hello '.
    wire = serialize_message(String(data=NUL_PROMPT))
    assert deserialize_message(wire, String).data == 'hello '


def test_a_nul_prompt_is_refused_before_sending_with_the_reason_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exited:
        # No decoder runs: a client that tried to send would wait out the timeout instead.
        prompt_client.main(['prompt_client', '--prompt', NUL_PROMPT, '--timeout', '2'])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert 'prompt holds a NUL character at character 6' in error
    assert 'the decoder would get only the 6 characters before it' in error
    assert not rclpy.ok()   # refused before ROS started


@pytest.mark.parametrize('send', ['send', 'send_goal'])
def test_the_client_node_refuses_a_nul_prompt_before_publishing(send):
    rclpy.init()
    try:
        node = prompt_client.PromptClient('/nowhere/decoder')
        with pytest.raises(ValueError, match='NUL character at character 6'):
            getattr(node, send)(NUL_PROMPT, *([0.1] if send == 'send_goal' else []))
        assert not node.sent
        node.destroy_node()
    finally:
        rclpy.try_shutdown()


def test_only_a_nul_makes_a_prompt_unsendable():
    assert unsendable('hello world') is None
    assert unsendable('caf\u00e9 \ufffd \x07') is None   # the decoder sees and judges these
    assert 'character 0' in unsendable('\x00')
