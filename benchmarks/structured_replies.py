"""
How often replies parse and follow their schema, constrained and not: the robot schemas, greedy.

Each schema of config/robot_schemas.yaml is asked for once with its schema in the prompt
(structured.examples.schema_prompt), free and constrained to the schema, on the embedded model
by default; a reply counts when it parses as JSON and validates against the schema. With
--sampled N, each schema's constrained reply is sampled instead (temperature 1, seeds 0 to N-1),
for how long replies run: a schema bounds characters, not tokens.

    python benchmarks/structured_replies.py --out benchmarks/results/dev/structured_replies.json
    python benchmarks/structured_replies.py --sampled 40 --schemas plan,say --max-new-tokens 600 \
        --out benchmarks/results/dev/sampled_reply_lengths.json
"""

import argparse
import json
import platform

from physinf_ros.engine import load, Sampling
from physinf_ros.structured import OutputFormat
from physinf_ros.structured.examples import robot_schemas, schema_prompt


def valid(text: str, schema: dict) -> bool:
    import jsonschema
    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--model', default='embedded')
    parser.add_argument('--backend', default='eager')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--max-new-tokens', type=int, default=160)
    parser.add_argument('--sampled', type=int, metavar='N',
                        help='sample each constrained reply at temperature 1 with seeds 0 to N-1')
    parser.add_argument('--schemas', help='comma-separated schema names (default: all)')
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    schemas = robot_schemas()
    if args.schemas:
        names = args.schemas.split(',')
        unknown = set(names) - {entry['name'] for entry in schemas}
        if unknown:
            parser.error(f'unknown schemas {sorted(unknown)}: see config/robot_schemas.yaml')
        schemas = [entry for entry in schemas if entry['name'] in names]
    engine = load(args.model, args.backend, args.device, max_context=1024)
    if args.sampled:
        sampled(engine, schemas, args)
        return
    rows = []
    for entry in schemas:
        ids = engine.encode(schema_prompt(entry))
        row = {'schema': entry['name']}
        for kind, output in (('free', OutputFormat()),
                             ('constrained', OutputFormat(json.dumps(entry['schema'])))):
            generation = engine.generate(ids, args.max_new_tokens, output=output)
            for _ in generation:
                pass
            row[kind] = {'valid': valid(generation.text, entry['schema']),
                         'finish_reason': generation.finish_reason,
                         'tokens': len(generation.token_ids), 'text': generation.text}
        rows.append(row)
        print(entry['name'], row['free']['valid'], row['constrained']['valid'], flush=True)
    summary = {kind: sum(r[kind]['valid'] for r in rows) for kind in ('free', 'constrained')}
    write(args.out, engine, 'structured_replies', 'greedy', args.max_new_tokens,
          schemas=len(rows), valid=summary, replies=rows)
    print(f'valid replies of {len(rows)}: free {summary["free"]}, '
          f'constrained {summary["constrained"]}')


def sampled(engine, schemas, args):
    """Each schema's constrained reply sampled with N seeds: its tokens, finish and validity."""
    rows = []
    for entry in schemas:
        ids = engine.encode(schema_prompt(entry))
        tokens = []
        for seed in range(args.sampled):
            generation = engine.generate(ids, args.max_new_tokens,
                                         Sampling(temperature=1.0, seed=seed),
                                         output=OutputFormat(json.dumps(entry['schema'])))
            for _ in generation:
                pass
            tokens.append(len(generation.token_ids))
            rows.append({'schema': entry['name'], 'seed': seed, 'tokens': tokens[-1],
                         'finish_reason': generation.finish_reason,
                         'valid': valid(generation.text, entry['schema'])})
        print(f"{entry['name']}: {min(tokens)}-{max(tokens)} tokens over {len(tokens)} seeds",
              flush=True)
    write(args.out, engine, 'sampled_reply_lengths',
          f'temperature 1.0, seeds 0 to {args.sampled - 1}', args.max_new_tokens, replies=rows)


def write(path, engine, what, decoding, max_new_tokens, **results):
    """Write a results file: what it measured, the engine and decoding behind it, then results."""
    with open(path, 'w') as f:
        json.dump({'what': what, 'model': engine.info.model, 'backend': engine.info.backend,
                   'device': engine.info.device, 'dtype': engine.info.dtype,
                   'decoding': decoding, 'max_new_tokens': max_new_tokens,
                   'machine': platform.machine(), **results}, f, indent=1)
        f.write('\n')


if __name__ == '__main__':
    main()
