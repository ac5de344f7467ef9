"""
How often replies parse and follow their schema, constrained and not: the robot schemas, greedy.

Each schema of config/robot_schemas.yaml is asked for once with its schema in the prompt
(structured.examples.schema_prompt), free and constrained to the schema, on the embedded model
by default; a reply counts when it parses as JSON and validates against the schema.

    python benchmarks/structured_replies.py --out benchmarks/results/dev/structured_replies.json
"""

import argparse
import json
import platform

from physinf_ros.engine import load
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
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    engine = load(args.model, args.backend, args.device, max_context=1024)
    rows = []
    for entry in robot_schemas():
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
    with open(args.out, 'w') as f:
        json.dump({'what': 'structured_replies', 'model': engine.info.model,
                   'backend': engine.info.backend, 'device': engine.info.device,
                   'dtype': engine.info.dtype, 'decoding': 'greedy',
                   'max_new_tokens': args.max_new_tokens, 'machine': platform.machine(),
                   'schemas': len(rows), 'valid': summary, 'replies': rows}, f, indent=1)
        f.write('\n')
    print(f'valid replies of {len(rows)}: free {summary["free"]}, '
          f'constrained {summary["constrained"]}')


if __name__ == '__main__':
    main()
