"""
decoder_node's cost over its engine, as a subscriber in another process sees it.

For each model shape, a checkpoint of random bf16 weights with the embedded model's tokenizer is
written once (so the node streams text); physinf-generate decodes greedy replies of --tokens
tokens (its mean step is the engine's); then decoder_node (graphed) serves the same prompt
--runs times while a subscriber process times the arrival of every ~/tokens message:

    overhead = subscriber's mean token interval / physinf-generate's mean step - 1

and the time to first token three ways: physinf-generate's (`ttft_ms`), the node's own (its
`finished` event's `ttft_ms`) and the subscriber's (from publishing the prompt to the first
`~/tokens` message, so with the topic's delivery both ways).

    python benchmarks/node_overhead.py --out node_overhead.json --work DIR

Runs where rclpy is importable (the GPU machine: benchmarks/run_device.sh nodebench, with the
gpu-ros virtual environment). `--subscribe` is the subscriber's own entry point.
"""

import argparse
import json
import os
from pathlib import Path
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time

SHAPES = ('llama-3.1-8b', 'smollm2-135m')
# Prompts tried in order until one gives a reply of the full length with a text piece per
# token on these random weights (a piece that ends inside a character is held back).
PROMPTS = ('Tell me a long story about a robot.', 'Describe the kitchen.',
           'List the planets.', 'Write a poem about the sea.')
DOMAIN = str(100 + os.getpid() % 100)


def write_checkpoint(shape: str, folder: Path) -> Path:
    """Random bf16 weights of shape, with the embedded model's tokenizer and chat template."""
    import torch
    from physinf_ros.engine.model.config import ModelConfig
    from physinf_ros.engine.model.llama import synthetic_state_dict
    from physinf_ros.engine.weights.resolve import resolve
    from physinf_ros.engine.weights.source import synthetic_config
    from safetensors.torch import save_file
    if (folder / 'config.json').is_file():
        return folder
    embedded = resolve('embedded').path
    own = json.loads((embedded / 'config.json').read_text())
    config = own if shape == 'smollm2-135m' else synthetic_config(shape)
    # The tokenizer's ids: vocabulary size and special tokens come from the embedded model.
    config.update({k: own[k] for k in ('vocab_size', 'bos_token_id', 'eos_token_id')})
    config['torch_dtype'] = 'bfloat16'
    shutil.copytree(embedded, folder,
                    ignore=shutil.ignore_patterns('*.safetensors', 'config.json'))
    device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    state = synthetic_state_dict(ModelConfig.from_hf(config), device, torch.bfloat16)
    save_file({k: v.cpu() for k, v in state.items()}, str(folder / 'model.safetensors'))
    (folder / 'config.json').write_text(json.dumps(config, indent=1))
    return folder


def generate(model: Path, prompt: str, tokens: int) -> dict:
    """One physinf-generate reply (graphed, greedy); its --json record."""
    done = subprocess.run(
        [sys.executable, '-m', 'physinf_ros.cli', '--model', str(model), '--backend', 'graphed',
         '--greedy', '--max-new-tokens', str(tokens), '--prompt', prompt, '--json'],
        capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def pick_prompt(model: Path, tokens: int) -> str:
    """Find the first prompt whose greedy reply is tokens long (no eos on random weights)."""
    for prompt in PROMPTS:
        if len(generate(model, prompt, tokens)['token_ids']) == tokens:
            return prompt
    raise SystemExit(f'no prompt gives a {tokens}-token reply on {model}')


def subscribe(namespace: str, prompt: str, runs: int, out: Path) -> None:
    """Be the subscriber process: send prompt runs times; record when messages arrive."""
    import rclpy
    from rclpy.node import Node
    from std_msgs.msg import Float64, String
    from physinf_ros.nodes.common import LATENCY_QOS
    from physinf_ros.nodes.decoder_interface import EVENTS_QOS, TOKENS_QOS
    rclpy.init()
    node = Node('overhead_subscriber')
    base = f'{namespace}/decoder'
    arrivals = {'tokens': [], 'step_latency': [], 'events': []}
    node.create_subscription(String, f'{base}/tokens',
                             lambda m: arrivals['tokens'].append(time.monotonic()), TOKENS_QOS)
    node.create_subscription(Float64, f'{base}/step_latency',
                             lambda m: arrivals['step_latency'].append(m.data), LATENCY_QOS)
    node.create_subscription(String, f'{base}/events',
                             lambda m: arrivals['events'].append(json.loads(m.data)), EVENTS_QOS)
    prompt_pub = node.create_publisher(String, f'{base}/prompt', 10)

    def spin_until(done, timeout):
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        if not done():
            raise SystemExit(f'timed out after {timeout} s')

    spin_until(lambda: prompt_pub.get_subscription_count() > 0
               and node.count_publishers(f'{base}/tokens') > 0, 600)
    time.sleep(1.0)   # discovery settles both ways before the first prompt
    records = []
    for _ in range(runs):
        for items in arrivals.values():
            items.clear()
        sent = time.monotonic()
        prompt_pub.publish(String(data=prompt))
        spin_until(lambda: any(e['event'] in ('finished', 'rejected', 'error')
                               for e in arrivals['events']), 300)
        straggling = time.monotonic() + 0.3   # messages of this reply still in flight
        while time.monotonic() < straggling:
            rclpy.spin_once(node, timeout_sec=0.05)
        finished = next(e for e in arrivals['events']
                        if e['event'] in ('finished', 'rejected', 'error'))
        times = arrivals['tokens']
        intervals = [(b - a) * 1000.0 for a, b in zip(times, times[1:])]
        records.append({'finished': finished, 'token_messages': len(times),
                        'first_token_ms': (times[0] - sent) * 1000.0 if times else None,
                        'token_interval_ms': intervals,
                        'step_latency_ms': list(arrivals['step_latency'])})
    out.write_text(json.dumps(records))
    node.destroy_node()
    rclpy.try_shutdown()


def measure_node(model: Path, prompt: str, tokens: int, runs: int, work: Path) -> list:
    """Start decoder_node on model, run the subscriber process against it, stop the node."""
    namespace = f'/overhead{os.getpid()}'
    ros = ['--ros-args', '-r', f'__ns:={namespace}', '-p', f'model:={model}',
           '-p', 'backend:=graphed', '-p', f'max_new_tokens:={tokens}']
    log = open(work / f'decoder_{model.name}.log', 'w')
    node = subprocess.Popen([sys.executable, '-m', 'physinf_ros.nodes.decoder_node'] + ros,
                            stdout=log, stderr=subprocess.STDOUT)
    out = work / f'subscriber_{model.name}.json'
    try:
        subprocess.run([sys.executable, __file__, '--subscribe', namespace, '--prompt', prompt,
                        '--runs', str(runs), '--out', str(out)], check=True, timeout=900)
    finally:
        node.send_signal(signal.SIGINT)
        node.wait(timeout=60)
        log.close()
    return json.loads(out.read_text())


def summarise(shape: str, prompt: str, generated: list, node_runs: list) -> dict:
    engine_steps = [ms for run in generated for ms in run['step_ms']]
    engine_mean = statistics.fmean(engine_steps)
    per_run = []
    for run in node_runs:
        intervals = run['token_interval_ms']
        per_run.append({
            'finish_reason': run['finished']['reason'], 'tokens': run['finished']['tokens'],
            'token_messages': run['token_messages'],
            'interval_mean_ms': statistics.fmean(intervals),
            'interval_p50_ms': statistics.median(intervals),
            'step_latency_mean_ms': statistics.fmean(run['step_latency_ms']),
            'node_ttft_ms': run['finished'].get('ttft_ms'),
            'subscriber_first_token_ms': run['first_token_ms']})
    interval_mean = statistics.fmean(r['interval_mean_ms'] for r in per_run)
    return {
        'shape': shape, 'prompt': prompt,
        'engine_mean_step_ms': engine_mean,
        'engine_step_ms_by_run': [statistics.fmean(run['step_ms']) for run in generated],
        'node_mean_step_latency_ms': statistics.fmean(r['step_latency_mean_ms']
                                                      for r in per_run),
        'subscriber_mean_interval_ms': interval_mean,
        'subscriber_p50_interval_ms': statistics.median(
            ms for run in node_runs for ms in run['token_interval_ms']),
        'overhead': interval_mean / engine_mean - 1.0,
        'engine_ttft_ms': statistics.median(run['ttft_ms'] for run in generated),
        'node_ttft_ms': statistics.median(r['node_ttft_ms'] for r in per_run),
        'subscriber_first_token_ms': statistics.median(r['subscriber_first_token_ms']
                                                       for r in per_run),
        'node_runs': per_run,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--out', type=Path, required=True)
    parser.add_argument('--work', type=Path, default=Path('/tmp/node_overhead'),
                        help='checkpoints and logs')
    parser.add_argument('--shapes', default=','.join(SHAPES))
    parser.add_argument('--tokens', type=int, default=300, help='reply length in tokens')
    parser.add_argument('--runs', type=int, default=3, help='replies per shape, each side')
    parser.add_argument('--subscribe', metavar='NAMESPACE', help=argparse.SUPPRESS)
    parser.add_argument('--prompt', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.subscribe:
        subscribe(args.subscribe, args.prompt, args.runs, args.out)
        return 0
    os.environ.setdefault('ROS_DOMAIN_ID', DOMAIN)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    args.work.mkdir(parents=True, exist_ok=True)
    import torch
    command = ['python', 'benchmarks/node_overhead.py'] + (argv or sys.argv[1:])
    results = {'command': ' '.join(command),
               'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none',
               'torch': torch.__version__,
               'python': platform.python_version(), 'tokens': args.tokens, 'runs': args.runs,
               'definition': 'overhead = subscriber_mean_interval_ms / engine_mean_step_ms - 1; '
                             'engine step: physinf-generate step_ms (CUDA events around each '
                             'graphed step); interval: between consecutive ~/tokens arrivals '
                             'in a subscriber process; TTFT (medians over runs): '
                             'engine_ttft_ms from physinf-generate, node_ttft_ms from the '
                             'finished event, subscriber_first_token_ms from publishing the '
                             'prompt to the first ~/tokens arrival',
               'shapes': []}
    for shape in args.shapes.split(','):
        model = write_checkpoint(shape, args.work / shape)
        prompt = pick_prompt(model, args.tokens)
        generated = [generate(model, prompt, args.tokens) for _ in range(args.runs)]
        node_runs = measure_node(model, prompt, args.tokens, args.runs, args.work)
        results['shapes'].append(summarise(shape, prompt, generated, node_runs))
        args.out.write_text(json.dumps(results, indent=1))
        row = results['shapes'][-1]
        print(f'{shape}: engine {row["engine_mean_step_ms"]:.4f} ms, node step_latency '
              f'{row["node_mean_step_latency_ms"]:.4f} ms, subscriber interval mean '
              f'{row["subscriber_mean_interval_ms"]:.4f} ms (p50 '
              f'{row["subscriber_p50_interval_ms"]:.4f}), overhead {row["overhead"]:+.2%}; '
              f'TTFT engine {row["engine_ttft_ms"]:.2f} ms, node {row["node_ttft_ms"]:.2f} ms, '
              f'subscriber {row["subscriber_first_token_ms"]:.2f} ms',
              flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
