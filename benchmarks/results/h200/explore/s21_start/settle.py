"""
Session 21: the steps after a prefill, step by step, with the GPU's clocks beside them.

Run 3 found the 8B's protocol steps falling by 1-2% over the 30 after the prefill. One graphed
decoder, a prefill of CTX random tokens, then STEPS synchronous steps, each printed with its
wall-clock time (time.time(), to line up with `nvidia-smi --query-gpu=timestamp,clocks.sm,...
-lms 20` run beside it) and its host and device times. Twice: after the prefill, and after the
same decoder has idled IDLE_S seconds (no prefill before those steps).
Usage: settle.py CTX ARCH
"""
import sys
import time

from physinf_ros.bench.protocol import GREEDY, prompt_ids
from physinf_ros.engine.loading import load
import torch

STEPS = 150
IDLE_S = 1.0


def steps(decoder, label):
    for i in range(STEPS):
        start = time.perf_counter()
        device_ms = decoder.launch().wait().step_ms
        host_ms = (time.perf_counter() - start) * 1000.0
        print(f'{label} {i} {time.time():.4f} host {host_ms:.3f} device {device_ms:.3f}',
              flush=True)


if __name__ == '__main__':
    ctx, arch = int(sys.argv[1]), sys.argv[2]
    engine = load(f'synthetic:{arch}', 'graphed', max_context=ctx + 2 * STEPS + 64)
    decoder = engine.decoder
    start = time.time()
    decoder.prefill(prompt_ids(engine.source.hf_config['vocab_size'], ctx, 0, 0), GREEDY)
    torch.cuda.synchronize()
    print(f'prefill {start:.4f} to {time.time():.4f}', flush=True)
    steps(decoder, 'after-prefill')
    time.sleep(IDLE_S)
    steps(decoder, 'after-idle')
