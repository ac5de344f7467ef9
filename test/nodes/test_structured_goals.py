"""Structured replies through decoder_node: JSON schemas, grammars and tool calls, real rclpy."""

import json
import os

from installed import require_interfaces
from physinf_ros.engine.text import encode_messages
from physinf_ros.engine.weights.resolve import resolve
from physinf_ros.structured.tools import HERMES, parse_tools, tools_system_text
import pytest

require_interfaces()

import jsonschema  # noqa: E402, I100 - after the skip
from physinf_ros_interfaces.action import Generate  # noqa: E402
from physinf_ros_interfaces.msg import ChatMessage  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from ros_harness import Probe, serving_decoder, TEST_DEVICE  # noqa: E402

NAMESPACE = f'/json{os.getpid()}'
GOTO = {'type': 'object', 'properties': {'action': {'const': 'goto'},
                                         'room': {'enum': ['kitchen', 'hallway', 'office']}},
        'required': ['action', 'room'], 'additionalProperties': False}
TOOLS = [{'type': 'function', 'function': {
    'name': 'goto', 'description': 'drive the robot to a room',
    'parameters': {'type': 'object', 'properties': {'room': {'enum': ['kitchen', 'office']}},
                   'required': ['room'], 'additionalProperties': False}}}]


class GoalProbe(Probe):
    """The probe and one Generate client."""

    def __init__(self, namespace):
        super().__init__(namespace)
        self.generate = ActionClient(self, Generate, f'{self.base}/generate')


@pytest.fixture(scope='module')
def harness(tmp_path_factory):
    log = tmp_path_factory.mktemp('structured') / 'decoder.log'
    gen = serving_decoder(NAMESPACE, log, device=TEST_DEVICE, max_new_tokens=64,
                          max_context=1024, probe_class=GoalProbe)
    harness = next(gen)
    assert harness.probe.generate.wait_for_server(timeout_sec=30)
    yield harness
    gen.close()


def chat(turns):
    """Return ChatMessage messages made of (role, content) pairs."""
    return [ChatMessage(role=role, content=content) for role, content in turns]


def result_of(harness, **fields):
    future = harness.probe.generate.send_goal_async(Generate.Goal(**fields))
    handle = harness.wait_for(lambda: future.done() and future.result(), 30, 'goal response')
    result = handle.get_result_async()
    return harness.wait_for(lambda: result.done() and result.result(), 120, 'result').result


def test_a_goal_with_a_json_schema_gets_json_that_follows_it(harness):
    result = result_of(harness, prompt='Send the robot to the kitchen. Reply in JSON.',
                       response_format=json.dumps(GOTO))
    assert result.finish_reason == 'eos', result.detail
    jsonschema.validate(json.loads(result.text), GOTO)
    assert json.loads(result.tool_calls) == []


def test_a_goal_with_a_grammar_gets_a_reply_in_it(harness):
    result = result_of(harness, prompt='Is the kitchen door open?',
                       grammar='start: "the door is " ("open" | "closed") "."')
    assert result.finish_reason == 'eos', result.detail
    assert result.detail == 'the reply completed its grammar'
    assert result.text in ('the door is open.', 'the door is closed.')


def test_a_goal_with_tools_gets_its_call_in_tool_calls(harness):
    mark = harness.probe.mark()
    result = result_of(harness, prompt='Please go to the office.', tools=json.dumps(TOOLS),
                       tool_choice='required')
    assert result.finish_reason == 'eos', result.detail
    calls = json.loads(result.tool_calls)
    assert [call['name'] for call in calls] == ['goto']
    jsonschema.validate(calls[0]['arguments'], TOOLS[0]['function']['parameters'])
    finished = [e for e in harness.probe.since(mark, 'events') if e['event'] == 'finished']
    assert finished[-1]['tool_calls'] == calls


def test_a_tool_result_goes_back_and_the_reply_to_it_reuses_the_call(harness):
    # The round trip a robot client makes: its own system message and the user's request; the
    # model's call (required, so that the embedded model makes one); the call and its outcome
    # (a tool message) appended; the reply to that, with the same tools (auto).
    turns = [('system', 'You are a home robot. Use your functions to move.'),
             ('user', 'Please go to the office.')]
    call = result_of(harness, messages=chat(turns), tools=json.dumps(TOOLS),
                     tool_choice='required')
    assert call.finish_reason == 'eos', call.detail
    calls = json.loads(call.tool_calls)
    assert [c['name'] for c in calls] == ['goto']
    # The tools joined the conversation's own system message: the prompt is that long.
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(resolve('embedded').path)
    described = tools_system_text(parse_tools(json.dumps(TOOLS)), HERMES)
    assert call.prompt_tokens == len(encode_messages(tokenizer, turns, tools_text=described))
    turns += [('assistant', call.text),
              ('tool', json.dumps({'arrived': True, 'room': calls[0]['arguments']['room']}))]
    answer = result_of(harness, messages=chat(turns), tools=json.dumps(TOOLS),
                       tool_choice='auto')
    assert answer.finish_reason in ('eos', 'length'), answer.detail
    assert answer.text.strip()
    assert answer.prompt_tokens == len(encode_messages(tokenizer, turns, tools_text=described))
    # The KV cache still held the call's prompt and the call: the reply prefilled the rest.
    assert answer.cached_tokens >= call.prompt_tokens, (answer.cached_tokens, call.prompt_tokens)
    assert answer.prompt_tokens > call.prompt_tokens + call.tokens


@pytest.mark.parametrize('fields, words', [
    ({'response_format': '{"type": '}, ['goal field', 'response_format is not JSON']),
    ({'grammar': 'start: greeting'}, ['output format refused', 'grammar does not compile']),
    ({'tools': '[{"type": "function"}]'}, ['goal field', 'tools[0] names no function']),
    ({'tools': json.dumps(TOOLS), 'tool_choice': 'fly'}, ['goal field', "'fly' is not one of"]),
    ({'response_format': '{"type": "json_object"}', 'grammar': 'start: "a"'}, ['not both']),
])
def test_an_output_format_that_cannot_be_used_is_refused_and_the_node_serves_on(harness, fields,
                                                                                words):
    result = result_of(harness, prompt='Hi', **fields)
    assert result.finish_reason == 'rejected'
    for word in words:
        assert word in result.detail, result.detail
    after = result_of(harness, prompt='Say hi.', max_new_tokens=3)
    assert after.finish_reason in ('eos', 'length')


def test_the_parameters_shape_topic_replies(harness):
    with harness.parameters(grammar='start: "yes" | "no"'):
        request_id = harness.send('Is the sky blue?')
        end = harness.wait_end(request_id)
        assert end['event'] == 'finished' and end['reason'] == 'eos', end
        assert end['detail'] == 'the reply completed its grammar'
        response = harness.probe.since(0, 'response')[-1]
        assert response in ('yes', 'no')
    refused = harness.set_parameter('response_format', '[1]')
    assert not refused.successful and 'must be a JSON object' in refused.reason
    refused = harness.set_parameter('tool_choice', 'required')
    assert not refused.successful and 'needs tools' in refused.reason
