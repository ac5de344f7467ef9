"""physinf-bench: run the protocol, print a short table, write the results as JSON + CSV."""

import argparse
from datetime import datetime, timezone
import json
from pathlib import Path
import sys
from typing import Dict, List

from . import protocol, results, ttft
from .benchmark import BenchListener, Benchmark
from .params import MODES_HELP
from .protocol import Plan
from ..engine import EMBEDDED, EngineError, load, MODEL_SPEC_HELP
from ..engine.device import pick_device
from ..engine.speculative import MAX_DRAFT
from ..measurement.targets import detect
from ..structured import ConstraintError, OutputFormat
from ..structured.constraint import json_schema


def _log(message: str) -> None:
    print(f'[physinf] {message}', file=sys.stderr, flush=True)


class ProgressBar(BenchListener):
    """A progress bar over sessions on stderr, with the last session's median step."""

    def __init__(self, total: int):
        from tqdm import tqdm
        self.bar = tqdm(total=total, unit='session', file=sys.stderr, dynamic_ncols=True)

    def session(self, mode, ctx, session) -> None:
        self.bar.set_description(f'{mode} ctx {ctx}')
        self.bar.set_postfix_str(f'{session.median_ms:.3f} ms/step')
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def table(records: List[Dict[str, object]]) -> str:
    """Return a short fixed-width summary of the cells."""
    def fmt(value, spec):
        return format(value, spec) if value is not None else '-'

    lines = [f'{"mode":<26} {"ran as":<24} {"ctx":>6} {"ms/step":>9} {"t_floor":>8} '
             f'{"R_floor":>7} {"tok/s":>8} {"speedup [95% CI]":>24}']
    for r in records:
        speedup = '-' if r['speedup'] is None else (
            f'{r["speedup"]:.3f} [{r["ci95_lo"]:.3f}, {r["ci95_hi"]:.3f}]')
        lines.append(f'{r["mode"]:<26} {r["backend"]:<24} {r["ctx"]:>6} '
                     f'{fmt(r["step_ms_p50"], ".3f"):>9} {fmt(r["t_floor_ms"], ".3f"):>8} '
                     f'{fmt(r["R_floor"], ".3f"):>7} {fmt(r["tokens_per_s"], ".1f"):>8} '
                     f'{speedup:>24}')
    return '\n'.join(lines)


def verify_table(records: List[Dict[str, object]]) -> str:
    """Return a speculative plan's verify steps per cell and k, next to the plain step (k 0)."""
    lines = [f'{"mode":<26} {"ctx":>6} {"k":>2} {"ms p50":>9} {"ms p99":>9} '
             f'{"t_k/t_step":>10} {"draft pays at":>13}']
    for r in records:
        for row in r.get('verify') or []:
            paired = row['draft_break_even_tokens_per_step']
            lines.append(f'{r["mode"]:<26} {r["ctx"]:>6} {row["k"]:>2} {row["ms_p50"]:>9.3f} '
                         f'{row["ms_p99"]:>9.3f} {row["ratio"]:>10.3f} '
                         f'{"-" if paired is None else format(paired, ".3f"):>13}')
    return '\n'.join(lines)


def bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='physinf-bench',
        description="Measure batch-1 decode steps (the paper's protocol): per cell (mode, "
                    'context) fresh sessions of warm-up then measured steps; A/B of each mode '
                    "against the first with a bootstrap 95% CI; R_floor against the target's "
                    'datasheet bandwidth. Writes JSON and a CSV beside it.')
    parser.add_argument('--model', default=EMBEDDED, help=MODEL_SPEC_HELP)
    parser.add_argument('--backend', help='measure this one mode (same as --modes NAME)')
    parser.add_argument('--modes', help=MODES_HELP + ' (default: eager,graphed)')
    parser.add_argument('--record-unavailable', action='store_true',
                        help='record a mode that cannot run here (its package missing, no CUDA, '
                             'a failed load or session) in the results with the reason, and go '
                             'on with the others (for a stack matrix); default: stop with the '
                             'error')
    parser.add_argument('--contexts', default='2048,4096,8192,16384',
                        help='comma-separated context lengths filled by a real prefill')
    parser.add_argument('--steps', type=int, default=30, help='measured steps per session')
    parser.add_argument('--warmup', type=int, default=5, help='warm-up steps per session')
    parser.add_argument('--sessions', type=int, default=10,
                        help='fresh sessions per cell (A/B pairs)')
    parser.add_argument('--device', default='auto', help='auto, cpu, cuda or cuda:N')
    parser.add_argument('--dtype', default='auto', help='auto, float32, bfloat16 or float16')
    parser.add_argument('--seed', type=int, default=0, help='seed of the random prompts')
    parser.add_argument('--target', default='',
                        help='a key of config/targets.yaml (default: found by GPU name, '
                             'else a measured bandwidth)')
    parser.add_argument('--price-per-hour', type=float,
                        help='USD per hour of this target, for cost per million tokens')
    parser.add_argument('--json-schema', type=Path, metavar='FILE',
                        help='also time steps constrained to this JSON schema, in the same '
                             'sessions (constrained_step_ms_p50, mask_us_p50, ... per cell)')
    parser.add_argument('--tokenizer', default='', metavar='DIR',
                        help="the grammar's tokenizer where the model has none (synthetic:); "
                             "its vocabulary must be the model's size")
    parser.add_argument('--verify-k', metavar='K1,K2,...',
                        help='also time verify steps of k drafted tokens (speculative decoding, '
                             f'k from 1 to {MAX_DRAFT}, e.g. 1,2,4,8), in the same sessions: '
                             'verify_ms_p50/p99 and t_verify(k) / t_step per k and cell, the '
                             'tokens per verify step a k-token draft must average to pay off')
    parser.add_argument('--draft', metavar='MODEL', default='',
                        help="with --verify-k: also time this draft model's plain steps (same "
                             'context and prompt) and give the tokens per step a draft pair '
                             'needs, (t_verify(k) + k * t_draft) / t_step')
    parser.add_argument('--deterministic', action='store_true',
                        help='our GPU kernels add in a fixed order (the GEMVs that split K run '
                        "unsplit), as the decoder node's deterministic parameter")
    parser.add_argument('--ttft', metavar='HISTORIES',
                        help='measure time to first token instead of steps: per history length '
                             '(comma-separated, e.g. 0,512,2048,16384; 0: the turn alone) a cold '
                             'prefill of history and a new turn, and the turn reusing the KV '
                             'cache of the history, '
                             'each next to its compute floor (the --backend mode, default auto)')
    parser.add_argument('--ttft-turn', type=int, default=ttft.TURN_TOKENS,
                        help='tokens of the new turn (--ttft)')
    parser.add_argument('--ttft-repeats', type=int, default=3,
                        help='timed repeats per history length (--ttft); medians are reported')
    parser.add_argument('--out', type=Path,
                        help='results JSON (CSV beside it); default '
                             'benchmarks/results/<target>/<model>-<time>.json')
    return parser


def plan_from_args(args, parser: argparse.ArgumentParser) -> Plan:
    if args.backend and args.modes:
        parser.error('give --backend or --modes, not both')
    modes = (args.backend,) if args.backend else protocol.parse_list(
        args.modes or ','.join(protocol.DEFAULT_MODES))
    try:
        contexts = protocol.parse_list(args.contexts, int)
    except ValueError:
        parser.error(f'--contexts must be comma-separated integers; got {args.contexts!r}')
    try:
        schema = args.json_schema.read_text() if args.json_schema else ''
        if schema:
            json_schema(schema)
    except (OSError, ConstraintError) as exc:
        parser.error(f'--json-schema: {exc}')
    try:
        verify_ks = protocol.parse_list(args.verify_k, int) if args.verify_k else ()
    except ValueError:
        parser.error(f'--verify-k must be comma-separated integers; got {args.verify_k!r}')
    plan = Plan(model=args.model, modes=modes, contexts=contexts, steps=args.steps,
                warmup=args.warmup, sessions=args.sessions, device=args.device,
                dtype=args.dtype, seed=args.seed, record_unavailable=args.record_unavailable,
                output=OutputFormat(response_format=schema), tokenizer=args.tokenizer,
                verify_ks=verify_ks, draft=args.draft, deterministic=args.deterministic)
    problems = plan.problems()
    if problems:
        parser.error('; '.join(problems))
    if args.price_per_hour is not None and args.price_per_hour <= 0:
        parser.error('--price-per-hour must be positive')
    return plan


def ttft_main(args, parser: argparse.ArgumentParser, argv: List[str]) -> int:
    """Run --ttft: the TTFT table, printed and written as JSON."""
    try:
        histories = protocol.parse_list(args.ttft, int)
    except ValueError:
        parser.error(f'--ttft must be comma-separated integers; got {args.ttft!r}')
    if not histories or min(histories) < 0 or args.ttft_turn < 1 or args.ttft_repeats < 1:
        parser.error('--ttft histories must be 0 or more (0: the turn alone), --ttft-turn and '
                     '--ttft-repeats positive')
    try:
        device = pick_device(args.device)
        target = detect(device, args.target, _log)
        engine = load(args.model, args.backend or 'auto', args.device, args.dtype,
                      max_context=64, log=_log)
        peak = target.bf16_dense_tflops if device.type == 'cuda' else None
        rows = ttft.measure(engine, histories, args.ttft_turn, args.ttft_repeats, args.seed,
                            peak, _log)
    except (ValueError, EngineError) as exc:
        _log(f'error: {exc}')
        return 2
    records = [row.record() for row in rows]
    info = engine.info
    doc = {'schema': ttft.SCHEMA, 'schema_version': ttft.SCHEMA_VERSION, 'kind': 'ttft',
           'created_utc': datetime.now(timezone.utc).isoformat(
               timespec='seconds'),
           'command': ' '.join(['physinf-bench'] + argv),
           'machine': results.machine_facts(device), 'target': target.facts(),
           'model': {'spec': args.model, 'backend': info.backend, 'dtype': info.dtype,
                     'device': info.device},
           'protocol': ttft.__doc__.strip(), 'peak_tflops': peak, 'rows': records,
           'table': ttft.table(records)}
    out = args.out or results.default_path(target, 'ttft-' + args.model)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + '\n')
    print(doc['table'])
    print(f'wrote {out}')
    return 0


def bench_main(argv=None) -> int:
    parser = bench_parser()
    args = parser.parse_args(argv)
    if args.ttft:
        return ttft_main(args, parser, list(sys.argv[1:] if argv is None else argv))
    plan = plan_from_args(args, parser)
    try:
        benchmark = Benchmark(plan, args.target, args.price_per_hour, log=_log)
    except (ValueError, EngineError, ConstraintError) as exc:
        _log(f'error: {exc}')
        return 2
    bar = ProgressBar(plan.session_count())
    try:
        doc = benchmark.run(bar)
    except (EngineError, ConstraintError) as exc:
        bar.close()
        _log(f'error: {exc}')
        return 2
    except KeyboardInterrupt:
        bar.close()
        _log('interrupted: writing the cells measured so far')
        doc = benchmark.document('interrupted')
    bar.close()
    out = args.out or results.default_path(benchmark.target, plan.model)
    json_path, csv_path = results.write(doc, out)
    print(table(doc['cells']))
    if plan.verify_ks:
        print(verify_table(doc['cells']))
    for entry in doc['unavailable']:
        print(f'unavailable: {entry["mode"]}: {entry["reason"]}')
    target = doc['target']
    print(f'target {target["name"]}: B_peak {target["B_peak_gbs"]:g} GB/s '
          f'({"measured" if target["measured"] else "datasheet"})')
    print(f'wrote {json_path} and {csv_path}')
    return 0 if doc['status'] == 'complete' else 1


if __name__ == '__main__':
    sys.exit(bench_main())
