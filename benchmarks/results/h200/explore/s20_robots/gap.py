"""
Session 20: what the protocol's step costs beyond the graph's own time on the GPU.

The protocol times decoder.step() on the host: launch, then wait for the token. The probe and
timeline.py time graph replays back to back. For each shape, at ctx CTX, in one process:
  sync       the protocol's way: host time of launch() + wait(), and of launch() alone, and the
             step's device events (recorded before the replay and after the token's copy)
  ahead      LAUNCHED_AHEAD steps in flight, as the generation loop keeps them: host interval
             between successive tokens, and the device events
  replays    the greedy graph replayed back to back, timed by two events around all of them
  split      the step captured as two or three graphs (the embedding and the first layer or
             two, then the rest and the head, or the rest in two halves: SPLITS), replayed in
             turn and waited for, against the one graph replayed the same way: if a graph's
             launch latency grows with its nodes, a short first graph starts the device sooner,
             and the second one's launch overlaps the first one's work. Each split's greedy
             tokens are checked equal to the one graph's from the same state
  empty      graphs of N tiny kernels (torch adds), launched and waited for one at a time: how a
             graph's launch latency grows with its nodes on this machine
Usage: gap.py CTX ARCH...   (synthetic weights; medians over STEPS steps)
"""
import statistics
import sys
import time

from physinf_ros.bench.protocol import GREEDY, prompt_ids
from physinf_ros.engine.loading import load
import torch

SPLITS = {'one graph': None, 'first 1 layer': (1,), 'first 2 layers': (2,),
          'first 1, halves': (1, 'half')}

STEPS = 300


def median_ms(values):
    return statistics.median(values) * 1000.0 if values else float('nan')


def measure(arch: str, ctx: int) -> None:
    engine = load(f'synthetic:{arch}', 'graphed', max_context=ctx + 4 * STEPS + 64)
    decoder = engine.decoder
    decoder.prefill(prompt_ids(engine.source.hf_config['vocab_size'], ctx, 0, 0), GREEDY)
    for _ in range(20):
        decoder.step()
    host, launch, device = [], [], []
    for _ in range(STEPS):
        start = time.perf_counter()
        pending = decoder.launch()
        launched = time.perf_counter()
        result = pending.wait()
        host.append(time.perf_counter() - start)
        launch.append(launched - start)
        device.append(result.step_ms / 1000.0)
    interval, device_ahead = [], []
    queue = [decoder.launch(), decoder.launch()]
    last = time.perf_counter()
    for _ in range(STEPS):
        result = queue.pop(0).wait()
        now = time.perf_counter()
        interval.append(now - last)
        last = now
        device_ahead.append(result.step_ms / 1000.0)
        queue.append(decoder.launch())
    for pending in queue:
        pending.wait()
    graph = decoder._graph(True)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rounds = []
    for _ in range(3):
        torch.cuda.synchronize()
        begin.record()
        for _ in range(STEPS // 3):
            graph.replay()
        end.record()
        end.synchronize()
        rounds.append(begin.elapsed_time(end) / (STEPS // 3) / 1000.0)
    split(decoder, arch, ctx)
    print(f'{arch} ctx {ctx}: sync host {median_ms(host):.3f} ms '
          f'(launch() {median_ms(launch):.3f}), sync device events {median_ms(device):.3f}; '
          f'ahead interval {median_ms(interval):.3f},'
          f' ahead device events {median_ms(device_ahead):.3f}; replays back to back '
          f'{median_ms(rounds):.3f} ms', flush=True)
    del graph, decoder
    engine.close()


def layers(decoder, x, indices) -> None:
    # decode_layers' loop body over some of the layers.
    w, c, ops = decoder.weights, decoder.weights.config, decoder.ops
    for i in indices:
        layer = w.layers[i]
        qkv = ops.rms_matvec(x, layer.attn_norm, layer.wqkv, layer.bqkv, c.rms_norm_eps)
        attn = ops.rope_attention(qkv, decoder.pos, decoder.cos, decoder.sin,
                                  decoder.cache.k[i], decoder.cache.v[i], c.num_heads)
        ops.matvec_add(x, attn, layer.wo)
        h = ops.rms_gate_up_silu(x, layer.mlp_norm, layer.w_gate_up, c.rms_norm_eps)
        ops.matvec_add(x, h, layer.w_down)


def pieces(decoder, bounds):
    # The greedy step as a list of bodies, cut after the given layer counts.
    w = decoder.weights
    count = len(w.layers)
    cuts = [0] + [count // 2 if b == 'half' else b for b in bounds] + [count]
    state = {}

    def first():
        state['x'] = w.embed.index_select(0, decoder.token).float().view(-1)
        layers(decoder, state['x'], range(cuts[0], cuts[1]))

    def middle(lo, hi):
        return lambda: layers(decoder, state['x'], range(lo, hi))

    def last():
        layers(decoder, state['x'], range(cuts[-2], cuts[-1]))
        decoder.ops.greedy_head(state['x'], w.norm, w.lm_head, w.config.rms_norm_eps,
                                decoder.logits, decoder.token, decoder.pos)
    return [first] + [middle(cuts[j], cuts[j + 1]) for j in range(1, len(cuts) - 2)] + [last]


def capture(decoder, bodies):
    saved = decoder.token.clone(), decoder.pos.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            for body in bodies:
                body()
    torch.cuda.current_stream().wait_stream(stream)
    graphs, pool = [], None
    for body in bodies:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            body()
        pool = graph.pool()
        graphs.append(graph)
    decoder.token.copy_(saved[0])
    decoder.pos.copy_(saved[1])
    return graphs


@torch.inference_mode()
def split(decoder, arch, ctx) -> None:
    slot = torch.zeros(1, dtype=torch.long, pin_memory=True)
    done = torch.cuda.Event()
    arms = {name: ([decoder._graph(True)] if bounds is None
                   else capture(decoder, pieces(decoder, bounds)))
            for name, bounds in SPLITS.items()}
    start = decoder.token.clone(), decoder.pos.clone()
    tokens, times = {}, {name: [] for name in arms}
    for name, graphs in arms.items():   # the same 40 steps from the same state
        decoder.token.copy_(start[0])
        decoder.pos.copy_(start[1])
        out = []
        for _ in range(40):
            for graph in graphs:
                graph.replay()
            out.append(int(decoder.token))
        tokens[name] = out
    for _ in range(3):   # interleaved rounds; each step writes the cache one place further on
        for name, graphs in arms.items():
            decoder.token.copy_(start[0])
            decoder.pos.copy_(start[1])
            torch.cuda.synchronize()
            for _ in range(STEPS // 3):
                begin = time.perf_counter()
                for graph in graphs:
                    graph.replay()
                slot.copy_(decoder.token, non_blocking=True)
                done.record()
                done.synchronize()
                times[name].append(time.perf_counter() - begin)
    decoder.token.copy_(start[0])
    decoder.pos.copy_(start[1])
    for name in arms:
        same = 'tokens equal' if tokens[name] == tokens['one graph'] else 'TOKENS DIFFER'
        print(f'{arch} ctx {ctx} split {name}: replayed and waited for '
              f'{median_ms(times[name]):.3f} ms ({same})', flush=True)


def empty_graphs() -> None:
    x = torch.zeros(1, device='cuda')
    for nodes in (1, 50, 100, 200, 400):
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            x.add_(1)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for _ in range(nodes):
                x.add_(1)
        host = []
        for _ in range(200):
            start = time.perf_counter()
            graph.replay()
            torch.cuda.current_stream().synchronize()
            host.append(time.perf_counter() - start)
        print(f'empty graph of {nodes} adds: launched and waited for {median_ms(host):.4f} ms '
              f'({median_ms(host) * 1000 / nodes:.2f} us a node)', flush=True)


if __name__ == '__main__':
    print(torch.cuda.get_device_name(), flush=True)
    empty_graphs()
    for arch in sys.argv[2:]:
        measure(arch, int(sys.argv[1]))
