"""
The decoder node's parameters: names, defaults, ranges and checks, free of rclpy.

The node turns this table into ROS parameter descriptors; tests read it to check that the launch
file and config/decoder.yaml only name parameters that exist.
"""

from dataclasses import dataclass
import re
from typing import Any, Mapping, Optional, Tuple

from .prompts import check_system_prompt
from ..engine import BACKEND_HELP, check_backend, EMBEDDED, MODEL_SPEC_HELP
from ..engine.device import DTYPES
from ..engine.speculative import MAX_DRAFT, Speculation
from ..structured import check_output, ConstraintError, OutputFormat
from ..structured.constraint import json_schema


@dataclass(frozen=True)
class Param:
    """
    One node parameter; read_only ones are not live.

    The decoder (a lifecycle node) reads its read_only parameters at configure and accepts
    changes to them only while unconfigured; the benchmark node reads them at start.
    """

    name: str
    default: Any
    description: str
    read_only: bool = False
    low: Optional[float] = None
    high: Optional[float] = None
    choices: Tuple[str, ...] = ()


DECODER_PARAMS = (
    Param('model', EMBEDDED, MODEL_SPEC_HELP, read_only=True),
    Param('backend', 'auto', 'Decoding backend: ' + BACKEND_HELP + '.', read_only=True),
    Param('device', 'auto', 'auto (CUDA when present, else CPU), cpu, cuda or cuda:N.',
          read_only=True),
    Param('dtype', 'auto', 'auto (bfloat16 on CUDA, float32 on CPU), ' + ', '.join(DTYPES) + '.',
          read_only=True, choices=('auto',) + tuple(DTYPES)),
    Param('max_context', 2048, 'Tokens of prompt plus reply the KV cache holds.',
          read_only=True, low=16, high=131072),
    Param('max_new_tokens', 256, 'Longest reply in tokens; applies from the next request.',
          low=1, high=32768),
    Param('temperature', 0.0, 'Sampling temperature; 0 is greedy (deterministic).',
          low=0.0, high=5.0),
    Param('top_p', 1.0, 'Nucleus sampling mass kept when temperature > 0; 1 keeps all.',
          low=0.01, high=1.0),
    Param('seed', -1, 'Sampling seed per request; -1 draws a fresh one each time. A seed '
          'repeats its reply bit for bit with deterministic true; without, a repeat can part '
          'at a near tie of two tokens.', low=-1, high=2**31 - 1),
    Param('deterministic', False,
          'GPU kernels that add in a fixed order: the GEMVs whose tuned launch shapes split K '
          '(their parts meet in float atomics, in the order they finish) run unsplit, so '
          'replies repeat bit for bit, at some speed on those shapes.', read_only=True),
    Param('use_chat_template', True, "Wrap prompts in the model's chat template."),
    Param('system_prompt', '',
          'System turn put before each prompt (empty: the template default); checked as '
          'prompts are (max_prompt_bytes, valid UTF-8 text) and refused with control '
          'characters other than tab and newlines.'),
    Param('max_prompt_bytes', 65536,
          'Largest prompt in UTF-8 bytes; larger ones are refused before any tokenizer work.',
          low=1, high=16 * 2**20),
    Param('truncate_prompt', False,
          'When a prompt leaves no room for a reply: false refuses it with its token count; '
          'true drops its beginning to leave room for max_new_tokens (at most half the '
          'context).'),
    Param('kv_keep_sequences', 1,
          'Sequences whose KV cache is kept for the next request: 1 keeps the last one decoded '
          '(prompt and reply, in the cache it used: no memory beyond max_context), and a '
          'prompt that shares a prefix with it (a follow-up turn, the same system prompt) '
          'prefills only what follows; 0 prefills every prompt from position 0.',
          low=0, high=1),
    Param('speculation', 'off',
          'Speculative decoding: off; ngram:K (K tokens drafted per step by looking up the '
          "sequence's last tokens earlier in the prompt and reply); or draft:MODEL:K (K drafted "
          'by a smaller model of the same tokenizer, loaded at configure beside the model). '
          f'K from 1 to {MAX_DRAFT}. Greedy replies are the same as with off; needs backend '
          'eager or graphed; constrained replies do not speculate.', read_only=True),
    Param('queue_size', 8, 'Prompts that may wait while one is decoded; more are rejected.',
          read_only=True, low=1, high=10000),
    Param('response_format', '',
          'Replies as JSON: a JSON schema, or {"type": "json_object"} for any JSON object; '
          'empty for free text. A goal that sets any of response_format, grammar, tools or '
          'tool_choice uses its own four instead.'),
    Param('grammar', '',
          "Replies in this grammar (llguidance's Lark syntax; a regex as start: /.../); "
          'empty for free text.'),
    Param('tools', '',
          'Functions the model may call: a JSON array of OpenAI-style specs; the calls come '
          'back in the result as tool_calls.'),
    Param('tool_choice', 'auto',
          'With tools: auto (call or answer), none (answer only), required (call one) or a '
          "function's name (call it); a required call follows the functions' schemas."),
)
# What a reply must look like (structured.OutputFormat's fields), checked together.
OUTPUT_PARAMS = ('response_format', 'grammar', 'tools', 'tool_choice')

# Read once when decoder_node starts, before any transition.
AUTOSTART = Param('autostart', True, 'Configure and activate at start, as an unmanaged node '
                  'would; false leaves the node unconfigured for a lifecycle manager.',
                  read_only=True)

PARAMS_BY_NAME = {p.name: p for p in DECODER_PARAMS}
_DEVICE = re.compile(r'^(auto|cpu|cuda(:\d+)?)$')
_KINDS = {bool: 'a boolean', int: 'an integer', float: 'a float', str: 'a string'}


def check(name: str, value: Any, settings: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """
    Why value is not acceptable for parameter name, or None when it is.

    settings: the other parameters' values (the node's, with the same call's changes), for
    the checks that involve two: system_prompt against max_prompt_bytes. Without them the
    defaults stand in.
    """
    param = PARAMS_BY_NAME.get(name)
    if param is None:
        return f'unknown parameter {name!r}'
    reason = check_value(param, value)
    if reason or name not in ('system_prompt', 'max_prompt_bytes') + OUTPUT_PARAMS:
        return reason
    current = {p.name: p.default for p in DECODER_PARAMS}
    current.update(settings or {})
    current[name] = value
    if name in OUTPUT_PARAMS:
        return check_output_params(current)
    reason = check_system_prompt(current['system_prompt'], current['max_prompt_bytes'])
    if reason and name == 'max_prompt_bytes':
        return f'max_prompt_bytes {value} refused: {reason}'
    return reason


def output_format(settings: Mapping[str, Any]) -> OutputFormat:
    """Return the output format the settings ask replies for."""
    return OutputFormat(*(settings[name] for name in OUTPUT_PARAMS))


def check_output_params(settings: Mapping[str, Any]) -> Optional[str]:
    """Why the output parameters cannot be used together, or None (a grammar's syntax aside)."""
    output = output_format(settings)
    try:
        check_output(output)
        if output.response_format.strip():
            json_schema(output.response_format)
    except ConstraintError as exc:
        return str(exc)
    return None


def check_value(param: Param, value: Any) -> Optional[str]:
    """Why value is not acceptable for param alone (type, choices, range, format), or None."""
    name = param.name
    if type(value) is not type(param.default):
        # ROS reads `-p top_p:=1` and `param set ... top_p 1` as integers: say how to write it.
        hint = ''
        if type(param.default) is float and type(value) is int:
            hint = f' (write {float(value)!r}: ROS reads {value!r} as an integer)'
        elif type(param.default) is str and type(value) is bool:
            # speculation:=off arrives as false: YAML reads off, on, yes and no as booleans.
            hint = (' (quote it: ROS reads an unquoted off, on, yes, no, true or false as a '
                    'boolean)')
        return (f'{name} must be {_KINDS[type(param.default)]}, '
                f'got {_KINDS.get(type(value), type(value).__name__)} {value!r}{hint}')
    if param.choices and value not in param.choices:
        return f'{name} must be one of {", ".join(param.choices)}; got {value!r}'
    if param.low is not None and not param.low <= value <= param.high:
        return f'{name} must be within [{param.low}, {param.high}]; got {value!r}'
    if name == 'device' and not _DEVICE.match(value.strip().lower()):
        return f'device must be auto, cpu, cuda or cuda:N; got {value!r}'
    if name == 'backend' and value != param.default:   # the benchmark's default '' is none
        return check_backend(value)
    if name == 'speculation':
        try:
            Speculation.parse(value)
        except ValueError as exc:
            return str(exc)
    if name == 'model' and not value.strip():
        return 'model must not be empty (use "embedded" for the built-in model)'
    return None
