"""
Session 21: whether where the weights lie in memory sets a process's level.

Processes of the same code differ by up to 3% in the protocol (run 1). If that is the weights'
placement (their pages, how the driver maps them), new copies of the weights in one process
should move the level as much as a new process does. Each trial copies the loaded bf16 weights
anew, after the last copies were freed and the cache emptied, in one of two layouts:
  tensors    one allocation per tensor, as the loader makes them
  arena      one allocation for all, each tensor at a 2 MiB boundary in the order a step reads
             them (the driver may map a large contiguous range with larger pages)
then takes SESSIONS of the protocol's sessions on them (a fresh graphed decoder, the prefill,
5 warm-up steps, 30 measured), the layouts alternating first. Prints each trial's median.
Usage: placement.py CTX ARCH
"""
from dataclasses import replace
import gc
import statistics
import sys

from inproc import session   # the protocol's session (this folder is on sys.path)
from physinf_ros.bench.protocol import Plan
from physinf_ros.engine.llama import Layer, Weights
from physinf_ros.engine.loading import load
from physinf_ros.engine.native import NativeDecoder
import torch

TRIALS = 6
SESSIONS = 3
ALIGN = 2 << 20


def tensors_of(w: Weights):
    out = [w.embed]
    for layer in w.layers:
        out += [layer.attn_norm, layer.wqkv, layer.wo, layer.mlp_norm, layer.w_gate_up,
                layer.w_down]
        if layer.bqkv is not None:
            out.append(layer.bqkv)
    out.append(w.norm)
    if w.lm_head is not w.embed:
        out.append(w.lm_head)
    return out


def copy_weights(w: Weights, arena: bool) -> Weights:
    originals = tensors_of(w)
    copies = {}
    if arena:
        sizes = [(t.numel() * t.element_size() + ALIGN - 1) // ALIGN * ALIGN for t in originals]
        block = torch.empty(sum(sizes), dtype=torch.uint8, device=w.embed.device)
        offset = 0
        for t, size in zip(originals, sizes):
            nbytes = t.numel() * t.element_size()
            view = block[offset:offset + nbytes].view(t.dtype).view(t.shape)
            view.copy_(t)
            copies[id(t)] = view
            offset += size
    else:
        for t in originals:
            copies[id(t)] = t.clone()

    def c(t):
        return None if t is None else copies[id(t)]
    layers = [Layer(c(x.attn_norm), c(x.wqkv), c(x.bqkv), c(x.wo), c(x.mlp_norm),
                    c(x.w_gate_up), c(x.w_down)) for x in w.layers]
    lm_head = c(w.embed) if w.lm_head is w.embed else c(w.lm_head)
    return Weights(w.config, c(w.embed), layers, c(w.norm), lm_head)


class Copied:
    """An engine-like holder whose decoder runs on a copy of the weights."""

    def __init__(self, engine, weights):
        self.engine, self.weights = engine, weights
        d = engine.decoder
        self.info, self.device, self.config = d.info, d.device, d.ops.config
        self.source = engine.source
        self.decoder = None

    def renew(self, backend, max_context):
        self.decoder = None
        gc.collect()
        info = replace(self.info, max_context=max_context)
        self.decoder = NativeDecoder(self.weights, info, self.device, graphed=True,
                                     kernel_config=self.config)


def main(ctx: int, arch: str) -> None:
    print(torch.cuda.get_device_name(), flush=True)
    plan = Plan()
    engine = load(f'synthetic:{arch}', 'graphed', max_context=plan.max_context(ctx))
    weights = engine.decoder.weights
    levels = {'tensors': [], 'arena': []}
    for trial in range(TRIALS):
        order = ('tensors', 'arena') if trial % 2 == 0 else ('arena', 'tensors')
        for layout in order:
            holder = Copied(engine, copy_weights(weights, layout == 'arena'))
            medians = [statistics.median(session(holder, None, plan, ctx, slot))
                       for slot in range(SESSIONS)]
            levels[layout].append(statistics.median(medians))
            print(f'{arch} ctx {ctx} trial {trial} {layout:7s}: sessions '
                  + ' '.join(f'{m:.3f}' for m in medians) + ' ms', flush=True)
            holder.decoder = holder.weights = None
            del holder
            gc.collect()
            torch.cuda.empty_cache()
    for layout, values in levels.items():
        print(f'{arch} ctx {ctx} {layout}: trial medians {min(values):.3f}-{max(values):.3f}, '
              f'median {statistics.median(values):.3f} ms', flush=True)


if __name__ == '__main__':
    main(int(sys.argv[1]), sys.argv[2])
