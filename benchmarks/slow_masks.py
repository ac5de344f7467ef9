"""
Which grammar masks are slow: each mask's time beside the tokens it allows and the token before it.

A constrained step hides its mask behind the forward only while the mask is the shorter
(docs/PERF.md, constrained decoding). This walks a schema as the protocol's random weights do
(each token drawn uniformly from the mask, seeded) and records, for every mask after the first,
its host time, how many tokens it allows, and whether the token before it was forced (the only
one allowed, so known before its own step runs). The masks over a threshold are then counted by
both: where they come, and what could hide them.

    python benchmarks/slow_masks.py --tokenizer embedded --tokenizer build/tok128k \
        --without-max-length --out benchmarks/results/dev/slow_masks.json

(`embedded`: the embedded model's 49k tokenizer; build/tok128k: the 128k byte-level BPE that
benchmarks/grammar_masks.py --train-128k trains, the one the protocol's 8B cell used.)
--without-max-length walks the same schema with its strings' maxLength removed as well: a
bounded string is where the slow masks come (xgrammar shows the same, mlc-ai/xgrammar#852).
"""

import argparse
import json
import os
import platform
import random
import time

from physinf_ros.engine.weights.resolve import resolve
from physinf_ros.measurement.stats import percentile
from physinf_ros.resources import config_path
from physinf_ros.structured import compile_constraint, OutputFormat, Vocabulary
import yaml


def walk(vocabulary, output, walks, max_tokens, seed):
    """Return (mask_us, allowed, after_forced) of every mask after each walk's first."""
    rng, masks = random.Random(seed), []
    for _ in range(walks):
        constraint, forced = compile_constraint(vocabulary, output), None
        for index in range(max_tokens):
            start = time.perf_counter()
            constraint.fill_bitmask()
            mask_us = (time.perf_counter() - start) * 1e6
            allowed = constraint.last_mask().numpy().nonzero()[0]
            if index > 0:
                masks.append((mask_us, len(allowed), forced))
            if len(allowed) == 0:
                break
            token = int(rng.choice(allowed))
            if token in vocabulary.stop_ids or not constraint.advance(token) \
                    or constraint.finished:
                break
            forced = len(allowed) == 1
    return masks


def without_max_length(schema):
    """Return the schema with every string's maxLength removed (the rest as it is)."""
    if isinstance(schema, list):
        return [without_max_length(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {key: without_max_length(value) for key, value in schema.items()
            if not (key == 'maxLength' and schema.get('type') == 'string')}


def summary(masks, slow_us):
    """Percentiles of the masks, and the slow ones by what they allow and what came before."""
    times = [m[0] for m in masks]
    slow = [m for m in masks if m[0] > slow_us]
    return {'masks': len(masks), 'mask_us_p50': percentile(times, 50),
            'mask_us_p99': percentile(times, 99),
            'after_forced_share': sum(m[2] for m in masks) / len(masks),
            'slow_us': slow_us, 'slow': len(slow),
            'slow_after_forced': sum(m[2] for m in slow),
            'slow_allowed_p50': percentile([m[1] for m in slow], 50) if slow else None,
            'slow_allowed_min': min((m[1] for m in slow), default=None)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--tokenizer', action='append', required=True, metavar='DIR',
                        help="a tokenizer's folder, or embedded (the embedded model's)")
    parser.add_argument('--schema', default='plan', help="config/robot_schemas.yaml's name")
    parser.add_argument('--walks', type=int, default=40)
    parser.add_argument('--max-tokens', type=int, default=60)
    parser.add_argument('--slow-us', type=float, default=500.0,
                        help='a mask slower than this outlasts the 135M shape forward')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--without-max-length', action='store_true',
                        help="also walk the schema with its strings' maxLength removed")
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    from transformers import AutoTokenizer
    schemas = {s['name']: s['schema'] for s in yaml.safe_load(
        open(config_path('robot_schemas.yaml')))}
    # The schema as written under 'tokenizers' (the file's first form), the other beside it.
    variants = {'tokenizers': schemas[args.schema]}
    if args.without_max_length:
        variants['without_max_length'] = without_max_length(schemas[args.schema])
    results = {'processor': platform.processor(), 'cpus': os.cpu_count(),
               'schema': args.schema, 'walks': args.walks, 'seed': args.seed}
    for path in args.tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(
            str(resolve('embedded').path) if path == 'embedded' else path)
        vocabulary = Vocabulary(tokenizer, [tokenizer.eos_token_id])
        for variant, schema in variants.items():
            masks = walk(vocabulary, OutputFormat(json.dumps(schema)), args.walks,
                         args.max_tokens, args.seed)
            results.setdefault(variant, {})[f'{vocabulary.n_vocab} tokens'] = found = summary(
                masks, args.slow_us)
            label = 'as written' if variant == 'tokenizers' else 'maxLength removed'
            print(f"{label}, {vocabulary.n_vocab} tokens: {found['masks']} masks, "
                  f"p50 {found['mask_us_p50']:.0f} us, p99 {found['mask_us_p99']:.0f} us; "
                  f"{found['slow']} over {args.slow_us:.0f} us, {found['slow_after_forced']} of "
                  f"them after a forced token, allowing {found['slow_allowed_min']} tokens or "
                  'more')
    with open(args.out, 'w') as f:
        json.dump(results, f, indent=1)


if __name__ == '__main__':
    main()
