"""
Does a seeded sampled reply repeat? Default kernels against deterministic ones (issue 54).

The same prompt is answered --replies times with one seed, with the KV cache's prefix reused
(each reply then prefills only the last prompt token, over the rows kernels) and without
(the whole prompt each time), once with the GPU's default kernels and once with
KernelConfig.deterministic. A reply that differs from the first of its kind is counted, with the
token where it parts. Split K's float atomics add in the order their programs finish, so the
default kernels can give more than one reply; the deterministic ones must give one.

    python benchmarks/seed_repeats.py --out benchmarks/results/dev/seed_repeats.json
"""

import argparse
import json
from pathlib import Path
import sys
from typing import Dict, List

from physinf_ros.bench import results
from physinf_ros.engine import load, Sampling
import torch

PROMPTS = ('Write one sentence about a robot.',
           'List three things a kitchen robot should check before it starts cooking.')


def part(reply: List[int], first: List[int]) -> int:
    """Return the index of the first token where reply leaves first (its length if none)."""
    return next((i for i, (a, b) in enumerate(zip(reply, first)) if a != b),
                min(len(reply), len(first)))


def measure(deterministic: bool, args) -> List[Dict[str, object]]:
    engine = load(args.model, backend='graphed', device='cuda', deterministic=deterministic)
    sampling = Sampling(temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    rows = []
    for text in PROMPTS:
        prompt = engine.encode(text)
        for reuse in (False, True):
            engine.decoder.reuse_prefix = reuse
            replies = []
            for _ in range(args.replies):
                generation = engine.generate(prompt, args.tokens, sampling)
                list(generation)
                replies.append(list(generation.token_ids))
            parted = [part(reply, replies[0]) for reply in replies[1:] if reply != replies[0]]
            rows.append({'deterministic': deterministic, 'prompt': text, 'reuse_prefix': reuse,
                         'replies': len(replies),
                         'distinct': len({tuple(r) for r in replies}),
                         'differ_from_first': len(parted), 'parted_at': parted})
            print(f'deterministic {deterministic}, reuse {reuse}, {text[:30]!r}: '
                  f"{rows[-1]['distinct']} distinct of {len(replies)}"
                  + (f', parted at {parted}' if parted else ''), flush=True)
    engine.close()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--model', default='embedded')
    parser.add_argument('--replies', type=int, default=40)
    parser.add_argument('--tokens', type=int, default=48)
    parser.add_argument('--temperature', type=float, default=1.2)
    parser.add_argument('--top-p', type=float, default=0.9)
    parser.add_argument('--seed', type=int, default=11)
    parser.add_argument('--out', type=Path, required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print('needs a CUDA GPU (the graphed engine)', file=sys.stderr)
        return 2
    rows = measure(False, args) + measure(True, args)
    doc = {'command': ' '.join(['python', 'benchmarks/seed_repeats.py'] + (argv or sys.argv[1:])),
           'machine': results.machine_facts(torch.device('cuda')), 'model': args.model,
           'sampling': {'temperature': args.temperature, 'top_p': args.top_p, 'seed': args.seed},
           'tokens': args.tokens, 'rows': rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + '\n')
    # The deterministic kernels' promise: one reply per prompt and kind.
    return 0 if all(row['distinct'] == 1 for row in rows if row['deterministic']) else 1


if __name__ == '__main__':
    sys.exit(main())
