"""The Generate action of physinf_ros_interfaces, as colcon builds it from interfaces/."""

import threading

from installed import require_interfaces

require_interfaces()

from physinf_ros_interfaces.action import Generate  # noqa: E402, I100 - after the skip
from physinf_ros_interfaces.msg import ChatMessage  # noqa: E402
import rclpy  # noqa: E402
from rclpy.action import ActionClient, ActionServer  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402

GOAL = {'prompt': 'string', 'messages': 'sequence<physinf_ros_interfaces/ChatMessage>',
        'max_new_tokens': 'int32', 'temperature': 'float', 'top_p': 'float', 'seed': 'int64',
        'response_format': 'string', 'grammar': 'string', 'tools': 'string',
        'tool_choice': 'string'}
RESULT = {'text': 'string', 'finish_reason': 'string', 'detail': 'string', 'tokens': 'int32',
          'ttft_ms': 'double', 'tokens_per_s': 'double', 'prompt_tokens': 'int32',
          'cached_tokens': 'int32', 'tool_calls': 'string', 'tokens_per_step': 'double',
          'drafted_tokens': 'int32', 'accepted_tokens': 'int32'}
FEEDBACK = {'piece': 'string', 'tokens': 'int32', 'step_ms': 'double'}


def test_fields_are_the_documented_ones():
    assert Generate.Goal.get_fields_and_field_types() == GOAL
    assert Generate.Result.get_fields_and_field_types() == RESULT
    assert Generate.Feedback.get_fields_and_field_types() == FEEDBACK
    assert ChatMessage.get_fields_and_field_types() == {'role': 'string', 'content': 'string'}


def test_an_unset_goal_asks_for_the_nodes_settings():
    goal = Generate.Goal(prompt='Where is the kitchen?')
    # 0 or negative: the node's parameter (max_new_tokens, top_p 0; temperature, seed < 0).
    assert (goal.max_new_tokens, goal.top_p) == (0, 0.0)
    assert goal.temperature < 0 and goal.seed < 0
    # Empty output fields: the node's response_format, grammar, tools and tool_choice.
    assert (goal.response_format, goal.grammar, goal.tools, goal.tool_choice) == ('',) * 4


def test_text_survives_serialisation():
    # Loads the generated C type support: what fails when the build is not sourced.
    result = Generate.Result(text='Paris 🤖 こんにちは', finish_reason='length',
                             detail='max_new_tokens (8) reached', tokens=8, ttft_ms=229.5,
                             tokens_per_s=8.25)
    back = deserialize_message(serialize_message(result), Generate.Result)
    assert back == result
    goal = Generate.Goal(messages=[ChatMessage(role='system', content='Be brief.'),
                                   ChatMessage(role='user', content='Où est la cuisine ? 🤖')])
    back = deserialize_message(serialize_message(goal), Generate.Goal)
    assert [(m.role, m.content) for m in back.messages] == [
        ('system', 'Be brief.'), ('user', 'Où est la cuisine ? 🤖')]


def test_goal_feedback_and_result_round_trip_over_ros():
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node('generate_interface_test', context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)

    def execute(handle):
        pieces = ['Par', 'is']
        for count, piece in enumerate(pieces, 1):
            handle.publish_feedback(Generate.Feedback(piece=piece, tokens=count, step_ms=1.5))
        handle.succeed()
        return Generate.Result(text=''.join(pieces) + ' / ' + handle.request.prompt,
                               finish_reason='eos', tokens=len(pieces))

    server = ActionServer(node, Generate, 'generate', execute)
    client = ActionClient(node, Generate, 'generate')
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        assert client.wait_for_server(timeout_sec=10.0)
        feedback = []
        sent = client.send_goal_async(Generate.Goal(prompt='capital of France?'),
                                      feedback_callback=lambda msg: feedback.append(
                                          msg.feedback.piece))
        handle = wait(sent)
        assert handle.accepted
        result = wait(handle.get_result_async()).result
        assert result.text == 'Paris / capital of France?' and result.finish_reason == 'eos'
        assert result.tokens == 2 and feedback == ['Par', 'is']
    finally:
        executor.shutdown()
        server.destroy()
        client.destroy()
        node.destroy_node()
        rclpy.shutdown(context=context)
        spinner.join(timeout=5.0)


def wait(future, timeout=10.0):
    """Return the future's result once the spinning thread has set it."""
    done = threading.Event()
    future.add_done_callback(lambda _: done.set())
    assert done.wait(timeout), 'no answer within 10 s'
    return future.result()
