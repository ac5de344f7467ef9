"""
Speculative decoding on robot-like prompts: is the text the same, what is accepted, what it buys.

Each prompt of config/speculation_prompts.yaml is answered greedy (the embedded model by default)
with speculation off, then with prompt lookup (ngram:K) for each K of --ks. Greedy speculation
must give exactly the tokens the one-token loop gives: the script checks every reply against the
one without speculation. In 16-bit weights a verify step's rows and a plain step round their
sums differently, so where the plain step's top two logits lie within two bf16 steps of each
other (a near tie, as test_speculative_gpu.py allows) the replies may part there: such a reply
is reported as a near tie with the gap; any other difference fails (exit status 1). Per prompt and
overall: reply tokens per decode step, acceptance (accepted / drafted tokens), and the effective
speed-up, tokens per step over what an average step costs in plain steps. With a physinf-bench
--verify-k results file (--verify-costs) a verify step of a j-token draft costs t_verify(k) /
t_step of the smallest measured k >= j (an upper bound: a longer verify costs no less) and a
plain step costs 1; without one, the effective speed-up is the measured wall-clock tokens/s
ratio on this device, labelled as such: overall, its median over the prompts, so that a prompt
slowed by another job on the machine does not sway it.

    python benchmarks/speculation_acceptance.py \
        --out benchmarks/results/dev/speculation_acceptance.json
"""

import argparse
import json
import math
from pathlib import Path
import platform
import statistics
import sys
from typing import Dict, List, Optional, Sequence

from physinf_ros.bench import results
from physinf_ros.bench.protocol import parse_list
from physinf_ros.engine import load
from physinf_ros.engine.loading import make_proposer
from physinf_ros.engine.speculative import Speculation
from physinf_ros.resources import config_path
import torch
import yaml

CPU_NOTE = ("CPU timings are not the target's: on a CPU this file shows acceptance and that "
            "the text is identical; its wall-clock speed-up is this CPU's, eager, and says "
            'nothing of a graphed GPU step')


class CountingProposer:
    """A proposer that records the length of every draft it hands out (one per verify step)."""

    def __init__(self, proposer):
        self.proposer = proposer
        self.k = proposer.k
        self.lengths: List[int] = []

    def start(self, prompt_ids, sampling) -> None:
        self.proposer.start(prompt_ids, sampling)

    def propose(self, sequence, k: int) -> List[int]:
        draft = self.proposer.propose(sequence, k)
        if draft:
            self.lengths.append(len(draft))
        return draft

    def close(self) -> None:
        self.proposer.close()


def verify_costs(path: Path, backend: str) -> Dict[str, object]:
    """
    Return t_verify(k) / t_step by k from a physinf-bench --verify-k file, with where it came from.

    The cell is the backend's if the file has one (else its first mode's), at its smallest
    context: the nearest to short robot prompts.
    """
    doc = results.read(path)
    cells = [c for c in doc['cells'] if c.get('verify')]
    if not cells:
        raise ValueError(f'{path} has no verify steps: run physinf-bench with --verify-k')
    mode = backend if any(c['mode'] == backend for c in cells) else cells[0]['mode']
    cell = min((c for c in cells if c['mode'] == mode), key=lambda c: c['ctx'])
    return {'file': Path(path).name, 'model': cell['model'], 'mode': cell['mode'],
            'backend': cell['backend'], 'ctx': cell['ctx'], 'target': cell['target'],
            'step_ms_p50': cell['step_ms_p50'],
            'ratio': {row['k']: row['ratio'] for row in cell['verify'] if row['k'] > 0}}


def step_cost(lengths: Sequence[int], plain_steps: int, ratio: Dict[int, float]) -> float:
    """Return the cost in plain steps of verify steps of drafts of lengths and plain steps."""
    cost = float(plain_steps)
    for length in lengths:
        measured = [k for k in ratio if k >= length]
        if not measured:
            raise ValueError(f'a draft of {length} tokens: the verify costs stop at k '
                             f'{max(ratio)}')
        cost += ratio[min(measured)]
    return cost


def answer(engine, ids: List[int], max_new_tokens: int, speculation: Speculation) -> dict:
    """Return one greedy reply's tokens, text and counters (speculation off or ngram:K)."""
    proposer = make_proposer(speculation, engine)
    counting = CountingProposer(proposer) if proposer is not None else None
    generation = engine.generate(ids, max_new_tokens, proposer=counting)
    for _ in generation:
        pass
    decode_tokens = len(generation.step_ms)   # the first token comes from the prefill
    steps = generation.steps
    lengths = counting.lengths if counting is not None else []
    return {'token_ids': generation.token_ids, 'text': generation.text,
            'finish_reason': generation.finish_reason, 'decode_tokens': decode_tokens,
            'steps': steps, 'verify_steps': generation.verify_steps, 'draft_lengths': lengths,
            'drafted': generation.drafted_tokens, 'accepted': generation.accepted_tokens,
            'tokens_per_step': generation.tokens_per_step,
            'decode_ms': sum(generation.step_ms)}


def summary(runs: Sequence[dict], offs: Sequence[dict],
            ratio: Optional[Dict[int, float]]) -> dict:
    """
    Return tokens per step, acceptance and speed-ups of replies runs against offs (paired).

    Counts are summed over the replies; the wall-clock speed-up is the median over the pairs of
    their tokens/s ratios.
    """
    tokens = sum(r['decode_tokens'] for r in runs)
    steps = sum(r['steps'] for r in runs)
    drafted = sum(r['drafted'] for r in runs)
    ratios = [(r['decode_tokens'] / r['decode_ms']) / (o['decode_tokens'] / o['decode_ms'])
              for r, o in zip(runs, offs) if r['decode_ms'] > 0 and o['decode_ms'] > 0]
    out = {'identical': all(r['identical'] for r in runs), 'decode_tokens': tokens,
           'steps': steps, 'verify_steps': sum(r['verify_steps'] for r in runs),
           'drafted': drafted, 'accepted': sum(r['accepted'] for r in runs),
           'tokens_per_step': tokens / steps if steps else None,
           'acceptance': sum(r['accepted'] for r in runs) / drafted if drafted else None,
           'wall_clock_speedup': statistics.median(ratios) if ratios else None}
    if ratio is not None:
        cost = sum(step_cost(r['draft_lengths'], r['steps'] - r['verify_steps'], ratio)
                   for r in runs)
        out['cost_in_plain_steps'] = cost
        out['effective_speedup'] = tokens / cost if cost else None
    else:
        out['effective_speedup'] = out['wall_clock_speedup']
    return out


def bf16_ulp(value: float) -> float:
    """Spacing of bf16 numbers at value (8 significant bits)."""
    return 2.0 ** (math.floor(math.log2(max(abs(value), 1e-30))) - 7)


def parting(engine, ids: List[int], plain: List[int], other: List[int]) -> dict:
    """Where two greedy replies part, and the plain step's top-2 logit gap there."""
    same = 0
    while same < min(len(plain), len(other)) and plain[same] == other[same]:
        same += 1
    engine.decoder.reuse_prefix = False
    logits = engine.decoder.prompt_logits(ids + plain[:same])[-1].float()
    engine.decoder.reuse_prefix = True
    top = torch.topk(logits, 2).values.tolist()
    gap, ulp = top[0] - top[1], bf16_ulp(top[0])
    return {'token': same, 'top2_gap': gap, 'bf16_ulp': ulp,
            'near_tie': engine.info.dtype != 'float32' and gap <= 2 * ulp}


def load_prompts(path: Optional[Path]) -> List[dict]:
    """Return the prompts: name, kind, prompt (config/speculation_prompts.yaml by default)."""
    return yaml.safe_load((path or config_path('speculation_prompts.yaml')).read_text())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--model', default='embedded')
    parser.add_argument('--backend', default='eager', help='eager or graphed (they verify)')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--ks', default='1,2,4,8', help='prompt lookup draft lengths (ngram:K)')
    parser.add_argument('--max-new-tokens', type=int, default=96)
    parser.add_argument('--prompts', type=Path, help='a prompts YAML (default: '
                                                     'config/speculation_prompts.yaml)')
    parser.add_argument('--verify-costs', type=Path, metavar='RESULTS',
                        help='a physinf-bench --verify-k results file: t_verify(k) / t_step '
                             'for the effective speed-up (default: the wall-clock ratio here)')
    parser.add_argument('--note', default='',
                        help='what a reader should know of this run (the machine, its load)')
    parser.add_argument('--out', type=Path, required=True)
    args = parser.parse_args(argv)
    settings = [Speculation.parse(f'ngram:{k}') for k in parse_list(args.ks, int)]
    costs = verify_costs(args.verify_costs, args.backend) if args.verify_costs else None
    ratio = costs['ratio'] if costs else None
    if ratio is not None and max(s.k for s in settings) > max(ratio):
        parser.error(f'--verify-costs measured k up to {max(ratio)}, --ks asks for '
                     f'{max(s.k for s in settings)}')
    prompts = load_prompts(args.prompts)
    engine = load(args.model, args.backend, args.device, max_context=1024)
    rows = []
    for entry in prompts:
        ids = engine.encode(entry['prompt'])
        off = answer(engine, ids, args.max_new_tokens, Speculation())
        row = {'name': entry['name'], 'kind': entry['kind'], 'prompt_tokens': len(ids),
               'text': off['text'], 'off': off}
        for setting in settings:
            run = answer(engine, ids, args.max_new_tokens, setting)
            run['identical'] = run['token_ids'] == off['token_ids'] and run['text'] == off['text']
            if not run['identical']:
                run['parted'] = parting(engine, ids, off['token_ids'], run['token_ids'])
                print(f'{"" if run["parted"]["near_tie"] else "!!! "}{entry["name"]} {setting}: '
                      f'the reply parts from the one without speculation at token '
                      f'{run["parted"]["token"]}, top-2 gap {run["parted"]["top2_gap"]:.4f} '
                      f'(bf16 step {run["parted"]["bf16_ulp"]:.4f}):\n  off: {off["text"]!r}'
                      f'\n  {setting}: {run["text"]!r}', file=sys.stderr, flush=True)
            run['summary'] = summary([run], [off], ratio)
            row[str(setting)] = run
        rows.append(row)
        print(entry['name'], len(off['token_ids']), 'tokens;', ', '.join(
            f'{s}: {row[str(s)]["summary"]["tokens_per_step"] or 0:.2f} tok/step'
            for s in settings), flush=True)
    overall = {str(s): summary([r[str(s)] for r in rows], [r['off'] for r in rows], ratio)
               for s in settings}
    identical = all(o['identical'] for o in overall.values())
    partings = [r[str(s)]['parted'] for r in rows for s in settings if 'parted' in r[str(s)]]
    unexplained = sum(not p['near_tie'] for p in partings)
    for row in rows:   # the full token lists were for the check; the text stays
        for run in [row['off']] + [row[str(s)] for s in settings]:
            del run['token_ids'], run['text']
    info = engine.info
    doc = {'what': 'speculation_acceptance', 'model': info.model, 'backend': info.backend,
           'device': info.device, 'dtype': info.dtype, 'decoding': 'greedy',
           'max_new_tokens': args.max_new_tokens, 'machine': platform.machine(),
           'prompts_file': args.prompts.name if args.prompts else 'speculation_prompts.yaml',
           'prompts': len(rows), 'settings': [str(s) for s in settings],
           'all_identical': identical, 'near_ties': len(partings) - unexplained,
           'other_differences': unexplained,
           'effective_speedup_source': (
               f'physinf-bench --verify-k: t_verify(k) / t_step of {costs["file"]} '
               f'({costs["model"]}, {costs["mode"]}, ctx {costs["ctx"]}, {costs["target"]})'
               if costs else f'measured wall-clock tokens/s ratio on this device '
                             f'({info.device}, {info.backend}); overall: its median over the '
                             'prompts'),
           'verify_costs': costs, 'overall': overall, 'replies': rows}
    notes = [CPU_NOTE] if info.device.startswith('cpu') else []
    notes += [args.note] if args.note else []
    if notes:
        doc['note'] = '; '.join(notes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + '\n')
    for setting, o in overall.items():
        print(f'{setting}: identical {o["identical"]}, '
              f'{o["tokens_per_step"] or 0:.2f} tokens/step, acceptance '
              f'{o["acceptance"] or 0:.2f}, effective speed-up {o["effective_speedup"] or 0:.2f}')
    if unexplained:
        print(f'!!! SPECULATION CHANGED THE TEXT of {unexplained} greedy replies past a near tie: '
              f'see "parted" in {args.out}', file=sys.stderr)
        return 1
    if not identical:
        print(f'replies identical with and without speculation but {len(partings)} that part '
              f'at a near tie of the plain step (bf16 rounding); wrote {args.out}')
        return 0
    print(f'all replies identical with and without speculation; wrote {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
