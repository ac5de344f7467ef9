"""
Where a graphed step's time goes between kernels: %globaltimer stamps in every program.

The package's kernels.py is patched as text into a module of its own (nothing is committed
twice): every kernel takes a stamp buffer and a base offset, and each program writes three
times, in nanoseconds: as it reaches its PDL wait (its pre-wait loads issued), as the wait
releases it, and as it ends; each launches with at most the registers the same kernel takes
unstamped (since session 35: more had cost some kernels a wave). Launch i of a step writes
programs at i * SLOT. One step (layers and greedy head) is captured in a CUDA graph with a
launch's base baked in, replayed, and each kernel's window is read back: its first program's
release against the previous kernel's last end (the boundary), and its last end against its
first release (its time after the wait).
With ARMS set (';'-separated arms of space-separated settings: attention.FIELD=VALUE or
switch=VALUE as an A/B sets them, or KIND:N:K=BLOCK_N,BLOCK_K,SPLIT_K,WARPS for one GEMV's
launch shape), each arm's step is timed unstamped and its per-op table printed, the arms
interleaved over ROUNDS rounds.
KERNELS_SOURCE=PATH stamps another kernels.py instead (a base, for an A/B of code); LANDED=1 adds
a mark for when the split kernel's first tile has landed.
Usage: timeline.py ARCH CTX... (bf16, random weights, a cache of random keys and values)
"""
from dataclasses import fields
import importlib.util
import os
import re
import statistics
import sys
import tempfile

from physinf_ros.bench.attention import _time_cuda_graph
from physinf_ros.engine import kernels
from physinf_ros.engine.llama import (decode_layers, from_state_dict, KVCache, ModelConfig,
                                      rope_tables, synthetic_state_dict)
from physinf_ros.engine.models import synthetic_config
import torch

SLOT = 20480          # programs per launch at most (Qwen2.5-1.5B's head has 18992)
WIDTH = 8             # stamps per program: wait reached, released, end, 5 marks in the split
# The split kernel's marks, after these lines: its queries rotated (3), the new key and value
# stored (4, the split holding pos only), the first tile attended (5), the loop done (6).
SPLIT_MARKS = [
    (('                     KC.dtype.element_ty).to(DOT)\n',   # before session 17
      '        q = _rotated(q, q_partner, cos[None, :], sin[None, :], D, KC.dtype.element_ty)'
      '.to(DOT)\n'), 3, 8),
    ("            tl.debug_barrier()   # the stores are visible to the whole program's later "
     'loads\n', 4, 12),
    (('                                tl.zeros([GROUP_P, D], dtype=tl.float32), scale, DOT, '
      'PRECISION)\n',
      # session 25's v29 (s25_warp_keys/v29.diff)
      '        m_i, l_i, acc = _attend(q, k_first, v_first, t < end, m_i, l_i, acc, scale, DOT,\n'
      '                                PRECISION)\n'), 5, 8),
    (('            m_i, l_i, acc = _attend(q, k, v, t_mask, m_i, l_i, acc, scale, DOT, '
      'PRECISION)\n',
      # session 25's v29
      '            m_i, l_i, acc = _attend(q, k, v, t < end, m_i, l_i, acc, scale, DOT, '
      'PRECISION)\n'), 6, 8)]
# With LANDED=1, mark 7 (after mark 3) waits for the first tile's keys and values to arrive
# (a max over them feeds the timer read): when the tile loaded before the wait has landed.
LANDED = ('        _mark_after(STAMPS, STAMP_BASE, 7, (tl.max(k_first.to(tl.float32) + '
          'v_first.to(tl.float32)) > 0).to(tl.int32))\n')
LAUNCHES = 256        # launch slots per step
STAMP = """
@triton.jit
def _now(x):
    return tl.inline_asm_elementwise('mov.u64 $0, %globaltimer;', '=l,r', [x],
                                     dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _program():
    return (tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)).to(tl.int64)


@triton.jit
def _grid_sync(PDL: tl.constexpr, STAMPS, STAMP_BASE):
    at = (STAMP_BASE + _program()) * WIDTH
    tl.store(STAMPS + at, _now(tl.program_id(0)))
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    tl.store(STAMPS + at + 1, _now(tl.program_id(0)))


@triton.jit
def _stamp_end(STAMPS, STAMP_BASE):
    tl.store(STAMPS + (STAMP_BASE + _program()) * WIDTH + 2, _now(tl.program_id(0)))


@triton.jit
def _mark(STAMPS, STAMP_BASE, AT: tl.constexpr):
    tl.store(STAMPS + (STAMP_BASE + _program()) * WIDTH + AT, _now(tl.program_id(0)))


@triton.jit
def _mark_after(STAMPS, STAMP_BASE, AT: tl.constexpr, value):
    tl.store(STAMPS + (STAMP_BASE + _program()) * WIDTH + AT, _now(value))
"""


def kernels_text():
    """Return the text of the kernels.py stamped: KERNELS_SOURCE's, or the package's."""
    return open(os.environ.get('KERNELS_SOURCE') or kernels.__file__).read()


def stamped_source():
    """Return the text of kernels.py with stamps."""
    source = kernels_text()
    old_sync = re.search(r'@triton.jit\ndef _grid_sync\(PDL: tl.constexpr\):\n(    .*\n|\n)*?\n\n',
                         source)
    source = source.replace(old_sync.group(0),
                            STAMP.lstrip('\n').replace('WIDTH', str(WIDTH)) + '\n\n')
    for anchors, mark, indent in SPLIT_MARKS:   # marks inside the split kernel's path
        anchors = (anchors,) if isinstance(anchors, str) else anchors
        anchor = next((a for a in anchors if a in source), anchors[0])
        assert source.count(anchor) == 1, anchor
        source = source.replace(anchor, anchor + ' ' * indent
                                + f'_mark(STAMPS, STAMP_BASE, {mark})\n'
                                + (LANDED if mark == 3 and os.environ.get('LANDED') else ''))
    source = source.replace('PDL: tl.constexpr):', 'PDL: tl.constexpr, STAMPS, STAMP_BASE):')
    source = source.replace('_grid_sync(PDL)', '_grid_sync(PDL, STAMPS, STAMP_BASE)')
    source = source.replace('**pdl)', '**_pdl(device))').replace('    pdl = _pdl(device)\n', '')
    lines = source.split('\n')
    out, in_kernel = [], False
    for i, line in enumerate(lines):
        if line.startswith('def ') and 'STAMPS, STAMP_BASE' in ''.join(lines[i:i + 8]) \
                and '_kernel(' in line:
            in_kernel = True
        elif in_kernel and line and not line.startswith(' ') and not line.startswith(')'):
            while out and out[-1] == '':
                out.pop()
            out += ['    _stamp_end(STAMPS, STAMP_BASE)', '', '']
            in_kernel = False
        out.append(line)
    source = '\n'.join(out)
    source = source.replace(
        "    return {'PDL': True, 'launch_pdl': True} if _PDL[index] else {'PDL': False}",
        "    return {**({'PDL': True, 'launch_pdl': True} if _PDL[index] else {'PDL': False}),\n"
        '            **STAMPING.launch()}')
    return source


def kernels_module(source, name):
    """Return a kernels.py source as module NAME of its own, in the package (relative imports)."""
    path = os.path.join(tempfile.mkdtemp(), name + '.py')   # Triton reads its source
    with open(path, 'w') as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location('physinf_ros.engine.' + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stamped_module():
    """
    Return kernels.py with stamps: a module of its own, in the package (relative imports).

    Each kernel launches with at most the registers its unstamped twin takes (Capped).
    """
    module = kernels_module(stamped_source(), 'stamped_kernels')
    twins = kernels_module(kernels_text(), 'twin_kernels')
    for name in dir(module):
        if name.endswith('_kernel') and 'STAMPS' in getattr(module, name).arg_names:
            setattr(module, name, Capped(getattr(module, name), getattr(twins, name)))
    module.STAMPING = Stamping()
    return module


class Capped:
    """
    A stamped kernel, launched with at most the registers its unstamped twin takes.

    The stamps' registers can cost a kernel programs an SM: on Qwen2.5-1.5B they took o_proj
    from 168 registers to 200 (3 programs an SM to 2) and gate/up from 56 to 64 (9 to 8), each
    then a wave longer, and the stamped step ran 13% longer than the plain one (session 22's
    run 4). At the twin's count ptxas fits the stamps with nothing spilled (session 35,
    s35_static/stamp_regs.log).
    """

    def __init__(self, stamped, twin):
        self.stamped, self.twin = stamped, twin

    def __getattr__(self, name):
        return getattr(self.stamped, name)

    def __getitem__(self, grid):
        def launch(*args, STAMPS, STAMP_BASE, **options):
            twin = self.twin.warmup(*args, grid=grid, **options)   # compiled once, then cached
            twin = twin.result() if hasattr(twin, 'result') else twin   # an async compile's
            twin._init_handles()
            return self.stamped[grid](*args, STAMPS=STAMPS, STAMP_BASE=STAMP_BASE,
                                      **dict(options, maxnreg=twin.n_regs))
        return launch


class Stamping:
    """The stamp buffer and the launch counter that gives each launch its base."""

    def __init__(self):
        self.stamps = torch.zeros(LAUNCHES * SLOT * WIDTH, dtype=torch.int64, device='cuda')
        self.launches = []
        self.skipped = 0   # launches ahead of layer 0 (the embedding's), left out of the tables

    def start(self):
        self.launches = []

    def launch(self):
        caller = sys._getframe(2).f_code.co_name
        self.launches.append(caller)
        return {'STAMPS': self.stamps, 'STAMP_BASE': (len(self.launches) - 1) * SLOT}


def windows(stamps, count):
    """Per launch: (first wait reached, first release, last release, last end), in us."""
    rows = stamps.view(LAUNCHES, SLOT, WIDTH)[:count].cpu()
    out = []
    for i in range(count):
        r = rows[i]
        r = r[r[:, 0] > 0]
        assert len(r) < SLOT, f'launch {i} filled its {SLOT} slots: raise SLOT'
        out.append((r[:, 0].min().item(), r[:, 1].min().item(), r[:, 1].max().item(),
                    r[:, 2].max().item(), len(r)))
    t0 = out[0][0]
    return [tuple((v - t0) / 1e3 for v in w[:4]) + (w[4],) for w in out]


NAMES = ['qkv', 'attn split', 'attn reduce', 'o_proj', 'gate/up', 'down']


class Model:
    """Random weights of a published shape, a cache of random keys and values, step state."""

    def __init__(self, arch, max_context, dev):
        self.config = c = ModelConfig.from_hf(synthetic_config(arch))
        self.w = from_state_dict(c, synthetic_state_dict(c, dev, torch.bfloat16), dev,
                                 torch.bfloat16)
        self.cache = KVCache.allocate(c, max_context, dev, torch.bfloat16)
        gen = torch.Generator(device=dev).manual_seed(1)
        self.cache.k.normal_(0.0, 1.0, generator=gen)
        self.cache.v.normal_(0.0, 1.0, generator=gen)
        self.cos, self.sin = rope_tables(c, max_context, dev)
        self.token = torch.tensor([77], device=dev)
        self.pos = torch.zeros(1, dtype=torch.int32, device=dev)
        self.logits = torch.empty(c.vocab_size, device=dev)

    def step(self, ops, ctx):
        self.pos.fill_(ctx - 1)
        x = decode_layers(self.w, self.cache, self.token, self.pos, self.cos, self.sin, ops)
        ops.rms_matvec(x, self.w.norm, self.w.lm_head, None, self.config.rms_norm_eps,
                       out=self.logits)


def step_ms(model, ops, ctx, stamped=None):
    def step():
        if stamped is not None:   # each captured launch at its own base
            stamped.STAMPING.start()
        model.step(ops, ctx)

    return statistics.median(_time_cuda_graph(step, 30)) * 1e3


def stamped_windows(stamped, model, ops, ctx):
    """Launch names and windows of one replay of the stamped step (after two)."""
    def step():
        stamped.STAMPING.start()
        model.step(ops, ctx)

    stamped.STAMPING.stamps.zero_()
    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    launches = list(stamped.STAMPING.launches)
    for _ in range(3):
        model.pos.fill_(ctx - 1)
        graph.replay()
    torch.cuda.synchronize()
    win = windows(stamped.STAMPING.stamps, len(launches))
    # Since session 22 the step starts with the embedding kernel: the tables start at layer 0.
    skipped = stamped.STAMPING.skipped = int(launches[0] == 'embed')
    return launches[skipped:], win[skipped:]


def op_rows(win, launches, names=NAMES):
    """Return per op: medians over layers 1.. of four spans, and its programs; the head last."""
    per_layer = len(names)
    layers = (len(launches) - 1) // per_layer
    out = []
    for j in range(per_layer):
        rows = []
        for layer in range(1, layers):
            i = layer * per_layer + j
            rows.append((win[i][1] - win[i - 1][3], win[i][2] - win[i][1], win[i][3] - win[i][1],
                         win[i][3] - win[i - 1][3]))
        out.append([statistics.median(r[k] for r in rows) for k in range(4)]
                   + [win[per_layer + j][4]])
    head, last = win[layers * per_layer], win[layers * per_layer - 1]
    out.append([head[1] - last[3], head[2] - head[1], head[3] - head[1], head[3] - last[3],
                head[4]])
    return out


def print_table(rows, names=NAMES):
    print('op | programs | boundary: first release - previous last end | first to last release '
          '| release to last end | op total (previous end to end), us (median over layers 1..)')
    for name, r in zip(names + ['head'], rows):
        print(f'{name} | {r[4]} | {r[0]:.2f} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f}')


def triton_config(module, dev):
    """
    Return module's KernelConfig for dev with the Triton split kernel.

    Since session 26 kernels.yaml puts the H200's 8-kv-head shapes on the CUDA split kernel
    (attention_split.cu), which these text patches cannot stamp: the tables here are of the
    Triton split (s26_cuda_split/cuda_timeline.py stamps the CUDA one). A base kernels.py from
    before it has no such switch.
    """
    config = module.KernelConfig.for_device(dev)
    if 'cuda' in {f.name for f in fields(module.AttentionConfig)}:
        config = config.with_flag('attention.cuda', '0')
    return config


def configured(module, dev, arm):
    config = triton_config(module, dev)
    for setting in arm.split():
        name, value = setting.split('=')
        if name.count(':') == 2:
            kind, n, k = name.split(':')
            config = config.with_gemv(kind, int(n), int(k),
                                      module.GemvConfig(*map(int, value.split(','))))
        else:
            config = config.with_flag(name, value)
    return module.KernelOps(config)


def timeline(model, stamped, dev, ctx):
    plain = kernels.KernelOps(triton_config(kernels, dev))
    ops = stamped.KernelOps(triton_config(stamped, dev))
    for rnd in range(2):   # does stamping change the step? the two, interleaved
        for name, arm, module in (('plain', plain, None), ('stamped', ops, stamped)):
            print(f'ctx {ctx} round {rnd} {name}: {step_ms(model, arm, ctx, module):.3f} ms',
                  flush=True)
    launches, win = stamped_windows(stamped, model, ops, ctx)
    print(f'ctx {ctx}: {len(launches)} launches; step from first wait to last end '
          f'{win[-1][3] - win[0][0]:.1f} us')
    print_table(op_rows(win, launches))
    print('first layers, per op (start, first release, last release, end):')
    for i in range(0, 2 * len(NAMES) + 1):
        print(f'  {i:>3} {launches[i]:>16} ' + ' '.join(f'{v:8.2f}' for v in win[i][:4])
              + f' {win[i][4]}')
    # Layer 1's split kernel (its launch slot counts the embedding's): which programs end last?
    split = len(NAMES) + 1 + stamped.STAMPING.skipped
    programs = win[len(NAMES) + 1][4]
    rows = stamped.STAMPING.stamps.view(LAUNCHES, SLOT, WIDTH)[split, :programs].cpu()
    released = rows[:, 1].min().item()
    order = sorted(range(len(rows)), key=lambda p: rows[p, 2].item())
    heads = model.config.num_kv_heads
    print(f'layer 1 attn split, programs (kv head, split) by end, us after the first release: '
          f'median end {(rows[order[len(order) // 2], 2].item() - released) / 1e3:.2f}; last:')
    for p in order[-8:]:
        print(f'  ({p % heads}, {p // heads}): released {(rows[p, 1].item() - released) / 1e3:.2f}'
              f' end {(rows[p, 2].item() - released) / 1e3:.2f}')
    print("layer 1 attn split, us from each program's own release (median): queries rotated, "
          'new key stored, first tile attended, loop done, end'
          + (', first tile landed' if os.environ.get('LANDED') else ''))
    for name, chosen in (('holding pos', rows[:, 4] > 0),
                         ('other splits with keys', (rows[:, 3] > 0) & (rows[:, 4] == 0))):
        picked = rows[chosen]
        spans = [(picked[:, k] - picked[:, 1]).double().median().item() / 1e3 if k != 4
                 or name == 'holding pos' else float('nan')
                 for k in (3, 4, 5, 6, 2) + ((7,) if os.environ.get('LANDED') else ())]
        print(f'  {name} ({len(picked)}): ' + ' '.join(f'{v:.2f}' for v in spans))


def sweep(model, stamped, dev, ctx, arms, rounds):
    times = {arm: [] for arm in arms}
    tables = {}
    for rnd in range(rounds):
        for arm in (arms if rnd % 2 == 0 else arms[::-1]):
            times[arm].append(step_ms(model, configured(kernels, dev, arm), ctx))
            if arm not in tables:
                launches, win = stamped_windows(stamped, model, configured(stamped, dev, arm),
                                                ctx)
                tables[arm] = op_rows(win, launches)
    for arm in arms:
        rows = tables[arm]
        print(f'ctx {ctx} {arm or "base":>44}: step ' + ' '.join(f'{t:.3f}' for t in times[arm])
              + f' ms (median {statistics.median(times[arm]):.3f}); op totals, us: '
              + ' '.join(f'{n} {r[3]:.2f}' for n, r in zip(NAMES + ['head'], rows)), flush=True)


def main():
    dev = torch.device('cuda')
    arch, contexts = sys.argv[1], [int(c) for c in sys.argv[2:]]
    stamped = stamped_module()
    model = Model(arch, max(contexts), dev)
    arms = os.environ.get('ARMS')
    for ctx in contexts:
        if arms is None:
            timeline(model, stamped, dev, ctx)
        else:
            sweep(model, stamped, dev, ctx, arms.split(';'), int(os.environ.get('ROUNDS', '3')))


if __name__ == '__main__':
    main()
