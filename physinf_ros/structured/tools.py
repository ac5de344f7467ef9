"""
Tool calls: OpenAI-style function specs in, the model family's call format out and parsed back.

A request's `tools` is a JSON array of function specs ({"type": "function", "function":
{"name", "description", "parameters"}}, or the inner object alone) and `tool_choice` says what
the model may do with them: `auto` (call or answer, its choice), `none` (answer only: the tools
are not shown), `required` (call one of them) or a function's name (call that one). With
`required` or a name the call is constrained to the functions' JSON schemas (call_grammar).

How a model writes a call depends on its family and shows in its chat template (CallFormat):
Qwen2.5, Qwen3, SmolLM3 and Hermes-style templates wrap a JSON object in <tool_call> tags,
Llama 3.1 answers with the bare object (its arguments under "parameters"), Mistral's starts
with [TOOL_CALLS] and a JSON array. A template that cannot show tools at all (the embedded
SmolLM2's) gets them in the system turn (tools_system_text), with the <tool_call> format.
"""

from dataclasses import dataclass, field
import json
import re
from typing import List, Optional, Tuple

from .constraint import ConstraintError, JSON_OPTIONS

TOOL_CHOICES = ('auto', 'none', 'required')
_NAME = re.compile(r'^[A-Za-z0-9_.-]{1,64}$')
NO_PARAMETERS = {'type': 'object', 'properties': {}}


@dataclass(frozen=True)
class Function:
    """One function a model may call: its name, what it does, its arguments' JSON schema."""

    name: str
    description: str = ''
    parameters: dict = field(default_factory=lambda: dict(NO_PARAMETERS))

    def spec(self) -> dict:
        """Return the OpenAI-style spec, as chat templates take it."""
        return {'type': 'function', 'function': {
            'name': self.name, 'description': self.description, 'parameters': self.parameters}}


@dataclass(frozen=True)
class CallFormat:
    """How a model family writes one tool call around its JSON object."""

    name: str
    opening: str
    closing: str
    arguments_key: str
    in_list: bool = False   # the calls as a JSON array after the opening


HERMES = CallFormat('hermes', '<tool_call>\n', '\n</tool_call>', 'arguments')
LLAMA3 = CallFormat('llama3', '', '', 'parameters')
MISTRAL = CallFormat('mistral', '[TOOL_CALLS]', '', 'arguments', in_list=True)


def parse_tools(text: str) -> Tuple[Function, ...]:
    """Return the functions of a tools field ('' for none); ConstraintError says what is wrong."""
    if not text.strip():
        return ()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConstraintError(f'tools is not JSON: {exc}') from None
    if not isinstance(value, list) or not value:
        raise ConstraintError('tools must be a non-empty JSON array of function specs')
    functions, names = [], set()
    for index, item in enumerate(value):
        spec = item.get('function', item) if isinstance(item, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get('name'), str):
            raise ConstraintError(f'tools[{index}] names no function: give '
                                  '{"type": "function", "function": {"name": ..., '
                                  '"parameters": {...}}}')
        name = spec['name']
        if not _NAME.match(name):
            raise ConstraintError(f'tools[{index}]: function name {name!r} must be 1-64 letters, '
                                  'digits, _, . or -')
        if name in names:
            raise ConstraintError(f'tools[{index}]: function {name!r} is given twice')
        parameters = spec.get('parameters', NO_PARAMETERS)
        if not isinstance(parameters, dict):
            raise ConstraintError(f'tools[{index}]: parameters of {name!r} must be a JSON '
                                  'schema object')
        names.add(name)
        functions.append(Function(name, str(spec.get('description', '')), parameters))
    return tuple(functions)


def check_tool_choice(choice: str, functions: Tuple[Function, ...]) -> str:
    """Return the tool_choice to use ('' is auto); ConstraintError for one that cannot be."""
    choice = choice.strip() or 'auto'
    names = [f.name for f in functions]
    if choice not in TOOL_CHOICES and choice not in names:
        known = ', '.join(TOOL_CHOICES + tuple(names))
        raise ConstraintError(f'tool_choice {choice!r} is not one of: {known}')
    if choice not in ('auto', 'none') and not functions:
        raise ConstraintError(f'tool_choice {choice!r} needs tools')
    return choice


def call_format(chat_template: Optional[str]) -> CallFormat:
    """Return the call format a chat template teaches its model (HERMES when it shows none)."""
    template = chat_template or ''
    if '[TOOL_CALLS]' in template:
        return MISTRAL
    if '<tool_call>' in template:
        return HERMES
    if '<|python_tag|>' in template or 'Environment: ipython' in template:
        return LLAMA3
    return HERMES


def template_shows_tools(chat_template: Optional[str]) -> bool:
    """Say whether a chat template renders a tools argument itself."""
    return bool(chat_template) and 'tools' in chat_template


def tools_system_text(functions: Tuple[Function, ...], fmt: CallFormat) -> str:
    """Describe the tools for a system turn, for templates that cannot show them."""
    example = {'name': '<function name>', fmt.arguments_key: {'<argument>': '<value>'}}
    call = json.dumps([example] if fmt.in_list else example)
    lines = ['You can call functions. To call one, reply with only:',
             f'{fmt.opening}{call}{fmt.closing}',
             "The call's result comes back to you in a message of role tool.", 'The functions:']
    lines += [json.dumps(f.spec()['function']) for f in functions]
    return '\n'.join(lines)


def call_grammar(functions: Tuple[Function, ...], choice: str, fmt: CallFormat) -> str:
    """Return a Lark grammar (llguidance's) for one call of the functions choice allows."""
    chosen = [f for f in functions if choice in ('required', f.name)]
    calls = [{'type': 'object',
              'properties': {'name': {'const': f.name}, fmt.arguments_key: f.parameters},
              'required': ['name', fmt.arguments_key], 'additionalProperties': False}
             for f in chosen]
    schema = dict(calls[0]) if len(calls) == 1 else {'oneOf': calls}
    if fmt.in_list:
        schema = {'type': 'array', 'items': schema, 'minItems': 1, 'maxItems': 1}
    schema['x-guidance'] = {k: JSON_OPTIONS[k] for k in
                            ('whitespace_flexible', 'item_separator', 'key_separator')}
    parts = [json.dumps(fmt.opening)] * bool(fmt.opening) + ['call'] + \
        [json.dumps(fmt.closing)] * bool(fmt.closing)
    return f'start: {" ".join(parts)}\ncall: %json {json.dumps(schema)}\n'


def parse_tool_calls(text: str, functions: Tuple[Function, ...],
                     fmt: CallFormat) -> List[dict]:
    """Return the calls of known functions in a reply, as [{"name", "arguments"}]."""
    names = {f.name for f in functions}
    if fmt is HERMES:
        objects = [_json(m) for m in re.findall(r'<tool_call>\s*(.*?)\s*</tool_call>', text,
                                                re.DOTALL)]
    elif fmt.in_list:
        found = _json(text.split(fmt.opening, 1)[1]) if fmt.opening in text else None
        objects = found if isinstance(found, list) else []
    else:
        objects = [_json(text.strip())]
    calls = []
    for item in objects:
        if isinstance(item, dict) and item.get('name') in names:
            arguments = item.get(fmt.arguments_key, item.get('arguments', {}))
            calls.append({'name': item['name'], 'arguments': arguments})
    return calls


def _json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None
