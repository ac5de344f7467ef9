"""
A conversation's second turn, KV cache reused, against the same prompt cold: TTFT and reply.

The history is a real first turn (a system prompt, a long user message of --history-words words
and the model's greedy reply); the second turn adds a short question. Cold prefills the whole
second prompt from position 0 (reuse off, the cache first holding an unrelated prompt); reused
prefills it after the first turn was decoded, so only the new tokens are computed. Each is run
--repeats times; the medians, their ratio and whether every reply is the same, token for token,
are written as JSON.

    python benchmarks/chat_reuse.py --device cpu --backend eager --out chat_reuse.json
"""

import argparse
import json
from pathlib import Path
import statistics
import sys

from physinf_ros.bench.results import machine_facts
from physinf_ros.engine import load, Sampling

SYSTEM = 'You are a kitchen robot. You fetch cups, plates and cutlery, and you answer briefly.'
SENTENCE = ('The cups are on the second shelf, the plates below them, and the cutlery in the '
            'drawer.')


def decode(engine, ids, reuse, max_new_tokens):
    engine.decoder.reuse_prefix = reuse
    generation = engine.generate(ids, max_new_tokens, Sampling())
    for _ in generation:
        pass
    return generation


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--model', default='embedded')
    parser.add_argument('--backend', default='eager')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--dtype', default='auto')
    parser.add_argument('--history-words', type=int, default=600)
    parser.add_argument('--max-new-tokens', type=int, default=32)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--out', type=Path, required=True)
    args = parser.parse_args()
    engine = load(args.model, args.backend, args.device, args.dtype, max_context=4096,
                  log=lambda m: print(m, file=sys.stderr))
    words = SENTENCE.split()
    story = ' '.join(words[i % len(words)] for i in range(args.history_words))
    first = engine.encode_messages([('user', f'Remember this: {story}')], system_prompt=SYSTEM)
    unrelated = engine.encode('Count to three.')
    turn = decode(engine, first, False, args.max_new_tokens)
    second = engine.encode_messages([('user', f'Remember this: {story}'),
                                     ('assistant', turn.text), ('user', 'Where are the plates?')],
                                    system_prompt=SYSTEM)
    runs = {'cold': [], 'reused': []}
    for _ in range(args.repeats):
        decode(engine, unrelated, False, 1)
        runs['cold'].append(decode(engine, second, False, args.max_new_tokens))
        decode(engine, first, True, args.max_new_tokens)   # the first turn, as a node would
        runs['reused'].append(decode(engine, second, True, args.max_new_tokens))
    ttft = {kind: statistics.median(g.ttft_ms for g in gens) for kind, gens in runs.items()}
    replies = {tuple(g.token_ids) for gens in runs.values() for g in gens}
    doc = {
        'command': 'python benchmarks/chat_reuse.py ' + ' '.join(sys.argv[1:]),
        'machine': machine_facts(engine.device),
        'model': args.model, 'backend': engine.info.backend, 'dtype': engine.info.dtype,
        'first_prompt_tokens': len(first), 'second_prompt_tokens': len(second),
        'cached_tokens': runs['reused'][-1].cached_tokens,
        'ttft_cold_ms': ttft['cold'], 'ttft_reused_ms': ttft['reused'],
        'ttft_cold_over_reused': ttft['cold'] / ttft['reused'],
        'ttft_cold_ms_all': [g.ttft_ms for g in runs['cold']],
        'ttft_reused_ms_all': [g.ttft_ms for g in runs['reused']],
        'same_reply_every_run': len(replies) == 1,
        'reply': runs['reused'][-1].text,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + '\n')
    print(json.dumps({k: v for k, v in doc.items() if k not in ('machine',)}, indent=1))
    return 0 if doc['same_reply_every_run'] else 1


if __name__ == '__main__':
    sys.exit(main())
