"""
Token-mask cost of llguidance (the package's choice) and xgrammar on the robot schemas.

For each tokenizer (the embedded model's 49k vocabulary, and a 128k byte-level BPE trained here
on this interpreter's standard library, Llama-3.1's vocabulary size, since no published 128k
tokenizer is at hand offline) and each schema of config/robot_schemas.yaml: the schema's compile
time, then the mask before each token of the schema's example reply (tokenized as the model
would write it), checking that each token is allowed and that the reply may end after it.
xgrammar is measured only when installed (pip install xgrammar; it brings its own torch).

    python benchmarks/grammar_masks.py --train-128k build/tok128k --reps 3 \
        --out benchmarks/results/dev/grammar_masks.json
"""

import argparse
import glob
import json
import os
import platform
import sysconfig
import time

from physinf_ros.engine.weights.resolve import resolve
from physinf_ros.measurement.stats import percentile
from physinf_ros.resources import config_path
from physinf_ros.structured import compile_constraint, OutputFormat, Vocabulary
from physinf_ros.structured.constraint import JSON_OPTIONS
import torch
import yaml


def train_tokenizer(vocab_size: int, out_dir: str, max_chars: int = 80_000_000) -> None:
    """Train a byte-level BPE of vocab_size on the standard library's Python source."""
    from tokenizers import decoders, models, pre_tokenizers, Tokenizer, trainers
    from transformers import PreTrainedTokenizerFast
    texts, total = [], 0
    pattern = os.path.join(sysconfig.get_paths()['stdlib'], '**', '*.py')
    for path in sorted(glob.glob(pattern, recursive=True)):
        try:
            with open(path, encoding='utf-8') as f:
                texts.append(f.read())
        except (UnicodeDecodeError, OSError):
            continue
        total += len(texts[-1])
        if total > max_chars:
            break
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=['<|eot|>'],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token='<|eot|>').save_pretrained(
        out_dir)


def walk_llguidance(tokenizer, schemas, reps):
    start = time.perf_counter()
    vocabulary = Vocabulary(tokenizer, [tokenizer.eos_token_id])
    setup_ms = (time.perf_counter() - start) * 1e3
    compile_ms, mask_us, refused = [], [], set()
    for entry in schemas:
        ids = tokenizer.encode(json.dumps(entry['example']), add_special_tokens=False)
        for _ in range(reps):
            start = time.perf_counter()
            constraint = compile_constraint(vocabulary, OutputFormat(json.dumps(entry['schema'])))
            compile_ms.append((time.perf_counter() - start) * 1e3)
            for token in ids + [tokenizer.eos_token_id]:
                start = time.perf_counter()
                bits = constraint.fill_bitmask()
                mask_us.append((time.perf_counter() - start) * 1e6)
                allowed = (int(bits[token // 32]) >> (token % 32)) & 1
                if not allowed or not constraint.advance(token):
                    refused.add(entry['name'])
                    break
    return setup_ms, compile_ms, mask_us, refused


def walk_xgrammar(tokenizer, schemas, reps):
    import xgrammar
    start = time.perf_counter()
    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
    setup_ms = (time.perf_counter() - start) * 1e3
    compile_ms, mask_us, refused = [], [], set()
    bitmask = xgrammar.allocate_token_bitmask(1, info.vocab_size)
    separators = (JSON_OPTIONS['item_separator'], JSON_OPTIONS['key_separator'])
    for entry in schemas:
        ids = tokenizer.encode(json.dumps(entry['example']), add_special_tokens=False)
        for _ in range(reps):
            start = time.perf_counter()
            compiled = compiler.compile_json_schema(json.dumps(entry['schema']),
                                                    any_whitespace=False, separators=separators)
            matcher = xgrammar.GrammarMatcher(compiled)
            compile_ms.append((time.perf_counter() - start) * 1e3)
            for token in ids + [tokenizer.eos_token_id]:
                start = time.perf_counter()
                matcher.fill_next_token_bitmask(bitmask)
                mask_us.append((time.perf_counter() - start) * 1e6)
                allowed = (int(bitmask[0, token // 32]) >> (token % 32)) & 1
                if not allowed or not matcher.accept_token(token):
                    refused.add(entry['name'])
                    break
    return setup_ms, compile_ms, mask_us, refused


def row(library, tokenizer, walked):
    setup_ms, compile_ms, mask_us, refused = walked
    return {'library': library, 'vocab': len(tokenizer),
            'tokenizer_setup_ms': round(setup_ms, 1),
            'compile_ms_p50': round(percentile(compile_ms, 50), 3),
            'compile_ms_p99': round(percentile(compile_ms, 99), 3),
            'compile_ms_max': round(max(compile_ms), 3),
            'mask_us_p50': round(percentile(mask_us, 50), 1),
            'mask_us_p99': round(percentile(mask_us, 99), 1),
            'mask_us_max': round(max(mask_us), 1),
            'mask_us_mean': round(sum(mask_us) / len(mask_us), 1),
            'masks': len(mask_us), 'refused_examples': sorted(refused)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--tokenizer', metavar='DIR',
                        help="a tokenizer's directory (default: the embedded model's)")
    parser.add_argument('--train-128k', metavar='DIR',
                        help='also measure a 128256-token BPE, trained into DIR if absent')
    parser.add_argument('--schemas', default=config_path('robot_schemas.yaml'))
    parser.add_argument('--reps', type=int, default=3, help='compiles and walks per schema')
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    from transformers import AutoTokenizer
    with open(args.schemas) as f:
        schemas = yaml.safe_load(f)
    paths = [args.tokenizer or resolve('embedded').path]
    if args.train_128k:
        if not os.path.isdir(args.train_128k):
            train_tokenizer(128256, args.train_128k)
        paths.append(args.train_128k)
    walkers = [('llguidance', walk_llguidance)]
    try:
        import xgrammar  # noqa: F401 - measured only where installed
        walkers.append(('xgrammar', walk_xgrammar))
    except ImportError:
        print('xgrammar is not installed: measuring llguidance only')
    rows = []
    for path in paths:
        tokenizer = AutoTokenizer.from_pretrained(path)
        for library, walk in walkers:
            rows.append(row(library, tokenizer, walk(tokenizer, schemas, args.reps)))
            print(json.dumps(rows[-1]), flush=True)
    with open(args.out, 'w') as f:
        json.dump({'what': 'grammar_masks', 'schemas': len(schemas), 'reps': args.reps,
                   'cpu': platform.processor() or platform.machine(),
                   'cpu_count': os.cpu_count(), 'torch': torch.__version__, 'rows': rows},
                  f, indent=1)
        f.write('\n')


if __name__ == '__main__':
    main()
