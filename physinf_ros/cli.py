"""Command-line tools that need no ROS: physinf-generate."""

import argparse
import json
import sys

from .engine import (BACKEND_HELP, check_backend, EMBEDDED, EngineError, load, MODEL_SPEC_HELP,
                     Sampling)
from .engine import speculative
from .engine.loading import make_proposer
from .engine.speculative import MAX_DRAFT, Speculation
from .structured import ConstraintError, OutputFormat


def _log(message: str) -> None:
    print(f'[physinf] {message}', file=sys.stderr, flush=True)


def backend_name(text: str) -> str:
    """Return text when it names a backend (argparse type); the reason otherwise."""
    reason = check_backend(text)
    if reason:
        raise argparse.ArgumentTypeError(reason)
    return text


def speculation_setting(text: str) -> Speculation:
    """Read a speculation setting (argparse type); the reason when it is not one."""
    try:
        return Speculation.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """--model/--backend/--device/--dtype/--max-context, shared by the CLIs."""
    parser.add_argument('--model', default=EMBEDDED, help=MODEL_SPEC_HELP)
    parser.add_argument('--backend', default='auto', type=backend_name, help=BACKEND_HELP)
    parser.add_argument('--device', default='auto', help='auto, cpu, cuda or cuda:N')
    parser.add_argument('--dtype', default='auto', help='auto, float32, bfloat16 or float16')
    parser.add_argument('--max-context', type=int, default=2048,
                        help='KV cache size in tokens (prompt + reply)')


def generate_main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog='physinf-generate', description='Stream one reply to stdout as it is decoded.')
    parser.add_argument('--prompt', required=True, help='the user turn to answer')
    add_model_args(parser)
    parser.add_argument('--max-new-tokens', type=int, default=256)
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument('--greedy', action='store_true', help='argmax decoding (the default)')
    choice.add_argument('--temperature', type=float, default=0.0,
                        help='sample at this temperature (> 0)')
    parser.add_argument('--top-p', type=float, default=1.0, help='nucleus mass when sampling')
    parser.add_argument('--seed', type=int, default=None, help='sampling seed')
    parser.add_argument('--deterministic', action='store_true',
                        help='GPU kernels that add in a fixed order (no K split), so a seeded '
                        'reply repeats bit for bit; slower on shapes whose tuned GEMVs split K')
    parser.add_argument('--no-chat-template', action='store_true',
                        help='send the prompt as raw text, without the chat template')
    parser.add_argument('--system-prompt', default='', help='system turn before the prompt')
    parser.add_argument('--json', action='store_true',
                        help='end with one JSON line: text, token_ids, step_ms, ttft_ms, ...')
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument('--json-schema', metavar='FILE',
                       help='reply with JSON that follows this JSON schema (or a file holding '
                       '{"type": "json_object"} for any JSON object)')
    shape.add_argument('--grammar', metavar='FILE',
                       help="reply in this grammar (llguidance's Lark syntax; a regex as "
                       'start: /.../)')
    shape.add_argument('--tools', metavar='FILE',
                       help='functions the model may call: a JSON array of OpenAI-style specs')
    parser.add_argument('--tool-choice', default='auto',
                        help='with --tools: auto, none, required or a function name')
    parser.add_argument('--speculation', default=Speculation(), type=speculation_setting,
                        metavar='off|ngram:K|draft:MODEL:K',
                        help='speculative decoding: K tokens drafted per step (1 to '
                        f'{MAX_DRAFT}) by prompt lookup (ngram) or by a smaller model of the '
                        'same tokenizer (draft), verified in one step; greedy replies are the '
                        'same as with off (default: off; needs backend eager or graphed)')
    args = parser.parse_args(argv)
    if args.temperature < 0 or not 0 < args.top_p <= 1 or args.max_new_tokens < 1:
        parser.error('need temperature >= 0, 0 < top-p <= 1 and max-new-tokens >= 1')
    try:
        output = OutputFormat(*(_read(path) for path in (args.json_schema, args.grammar,
                                                         args.tools)), args.tool_choice)
    except OSError as exc:
        parser.error(str(exc))

    try:
        engine = load(args.model, args.backend, args.device, args.dtype, args.max_context,
                      log=_log, deterministic=args.deterministic)
        info = engine.info
        _log(f'{info.model}: backend {info.backend} on {info.device}, {info.dtype}, '
             f'loaded in {engine.load_s:.1f} s' + (f' ({info.note})' if info.note else ''))
        prompt_ids = engine.encode(args.prompt, not args.no_chat_template, args.system_prompt,
                                   output)
        proposer = make_proposer(args.speculation, engine, _log)
        generation = engine.generate(prompt_ids, args.max_new_tokens,
                                     Sampling(args.temperature, args.top_p, args.seed),
                                     output=output, proposer=proposer)
        for piece in generation:
            sys.stdout.write(piece.text)
            sys.stdout.flush()
        tool_calls = engine.tool_calls(generation.text, output)
    except (EngineError, ConstraintError) as exc:
        _log(f'error: {exc}')
        return 2
    sys.stdout.write('\n')
    _log(f'{generation.finish_reason}: {len(generation.token_ids)} tokens, '
         f'TTFT {generation.ttft_ms:.1f} ms, {generation.tokens_per_s:.1f} tokens/s'
         + (f' ({generation.detail})' if generation.detail else ''))
    if args.speculation.on and generation.proposer is None:
        _log(f'speculation {args.speculation} not used: a constrained reply does not speculate')
    elif generation.proposer is not None:
        figures = speculative.summary(speculative.counts(generation))
        _log(f'speculation {args.speculation}: {figures}')
    if args.json:
        print(json.dumps({
            'text': generation.text, 'token_ids': generation.token_ids,
            'step_ms': [round(x, 4) for x in generation.step_ms],
            'ttft_ms': round(generation.ttft_ms, 4), 'finish_reason': generation.finish_reason,
            'prompt_tokens': len(prompt_ids), 'tokens_per_s': round(generation.tokens_per_s, 3),
            'tool_calls': tool_calls, 'speculation': str(args.speculation),
            **speculative.counts(generation),
            'backend': info.backend, 'device': info.device, 'dtype': info.dtype,
            'model': info.model}))
    return 0


def _read(path) -> str:
    if path is None:
        return ''
    with open(path, encoding='utf-8') as f:
        return f.read()


if __name__ == '__main__':
    sys.exit(generate_main())
