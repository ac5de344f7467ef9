"""
Session 28: what a GEMV's wait for its predecessor costs in the step, as a bound.

Every GEMV waits (PDL's griddepcontrol.wait) until the kernel before it has ended, though a
program's first tiles only need a part of that kernel's output: gate/up's first 256 inputs are
16 of o_proj's 256 programs, down's first 512 are 64 of gate/up's 1792. A GEMV that took each
part as its producers finish it (an arrival counter per part) would start before the grid ends.
The bound (`free` arms): the package's kernels.py is loaded as a module of its own with a FREE
switch per GEMV (kind, n, k) that drops the wait (the launch of the next kernel stays), so that
GEMV reads whatever its input holds as it runs: its results are wrong, its time is the time with
no dependency at all. The counters (`count` arms, counted.py): gate/up counted on o_proj, down on
gate/up, QKV on the down before it, each alone and all three; their logits are checked against
the package's and every counter against its target after the step. `zeroed` is the package's
step with the counters' zeroing (one memset at the step's start), the counted arms' base. All
arms: the step (layers and head, graphed; session 14's timeline.Model and step_ms), ROUNDS
interleaved rounds, the arms' order reversed every other round.
Usage: waits_probe.py ARCH:CTX[,CTX]... (PYTHONPATH the repository root)
"""
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 's14_timeline'))
from counted import counted_gate_up_kernel, counted_matvec_kernel  # noqa: E402
from physinf_ros.engine import kernels  # noqa: E402
from physinf_ros.engine.llama import gate_up_block  # noqa: E402
from timeline import kernels_module, Model, step_ms  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

ROUNDS = 5
GO = """
@triton.jit
def _wait_unless_free(PDL: tl.constexpr, FREE: tl.constexpr):
    # FREE: no wait for the predecessor (wrong results, a bound on the wait's cost).
    if FREE:
        if PDL:
            gdc_launch_dependents()
    else:
        _grid_sync(PDL)


"""


GEMV_KERNELS = ('_matvec_kernel', '_gate_up_kernel')


def kernel_head(source, name):
    """Return the def line(s) of kernel `name` in a kernels.py source, through `PDL`."""
    return re.search(rf'def {name}\((.|\n)*?PDL: tl.constexpr\):\n', source).group(0)


def add_switch(source, switch, note):
    """
    Return a kernels.py source with a constexpr `switch` on the dense GEMV and gate/up kernels.

    Each launch sets it from the module's set of the same name: True for the GEMVs, as
    (kind, n, k), listed there.
    """
    for name in GEMV_KERNELS:
        head = kernel_head(source, name)
        source = source.replace(head, head.replace(
            'PDL: tl.constexpr):', f'PDL: tl.constexpr, {switch}: tl.constexpr):'))
    launch = 'STREAM=config.stream(), AHEAD=cfg.tiles_ahead, num_warps=cfg.num_warps,'
    assert source.count(launch) == 1
    source = source.replace(launch, launch + f' {switch}=(kind, n, k) in {switch},')
    gate_up = 'BLOCK_K=cfg.block_k, EVEN=_even(n, k, cfg), STREAM=config.stream(),\n'
    assert source.count(gate_up) == 1
    source = source.replace(gate_up,
                            gate_up + f"        {switch}=('gate_up', n, k) in {switch},\n")
    return source + f'\n\n{switch} = set()   # {note}\n'


def free_source() -> str:
    """Return kernels.py with a FREE constexpr on the dense GEMV and gate/up kernels."""
    source = open(kernels.__file__).read()
    for name in GEMV_KERNELS:
        head = kernel_head(source, name)
        body_start = source.index(head) + len(head)
        sync = source.index('    _grid_sync(PDL)\n', body_start)
        source = (source[:body_start] + source[body_start:sync]
                  + '    _wait_unless_free(PDL, FREE)\n'
                  + source[sync + len('    _grid_sync(PDL)\n'):])
    anchor = '@triton.jit\ndef _inv_rms('
    assert source.count(anchor) == 1
    source = source.replace(anchor, GO.lstrip('\n') + anchor)
    return add_switch(source, 'FREE', '(kind, n, k) of the GEMVs launched without a wait')


def switched_ops(module, config, switch, gemvs):
    """Return the package's ops (module's) with the module's set `switch` holding gemvs."""
    class SwitchedOps(module.KernelOps):

        def _set(self):
            getattr(module, switch).clear()
            getattr(module, switch).update(gemvs)

        def rms_matvec(self, *args, **kw):
            self._set()
            return super().rms_matvec(*args, **kw)

        def matvec_add(self, *args, **kw):
            self._set()
            return super().matvec_add(*args, **kw)

        def rms_gate_up_silu(self, *args, **kw):
            self._set()
            return super().rms_gate_up_silu(*args, **kw)

    return SwitchedOps(config)


def make_ops(module, config, free):
    """Return the package's ops, the GEMVs in `free` launched without their wait."""
    return switched_ops(module, config, 'FREE', free)


def gemvs(c):
    """Return the layer's four GEMVs as (kind, n, k), by name."""
    qkv = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim
    return {'qkv': ('rms_matvec', qkv, c.hidden_size),
            'o_proj': ('matvec_add', c.hidden_size, c.num_heads * c.head_dim),
            'gate_up': ('gate_up', c.intermediate_size, c.hidden_size),
            'down': ('matvec_add', c.hidden_size, c.intermediate_size)}


class CountedOps(kernels.KernelOps):
    """The package's ops; the GEMVs named in `gated` wait on their producer's counters."""

    CONSUMES = {'gate_up': 'o_proj', 'down': 'gate_up', 'qkv': 'down'}

    def __init__(self, config, model_config, gated, device='cuda', parts=4, nap=False,
                 mode='count', l1=False, late=True, acquire=False, replicas=1):
        super().__init__(config)
        self.shapes = gemvs(model_config)
        self.gated = set(gated)
        self.parts = parts
        self.nap = nap
        self.l1 = l1   # inputs through L1 after an acquire fence (v32d), else from L2 (.cg)
        self.late = late   # the next kernel launched once the inputs are complete (v32e)
        self.acquire = acquire   # counters read with acquire loads, inputs through L1 (v32f)
        self.replicas = replicas   # copies of each counter, a program reads one (run 7)
        # count: consumers wait on the counters; signal: producers add, consumers wait as the
        # package's do; checks: consumers check the counters against a target of 0 (no wait).
        self.mode = mode
        # [layer, consumer, part, replica, LINE]: each counter on a 128-byte line
        self.counts = torch.zeros(model_config.num_layers, 3, 8 * 8 * 32, dtype=torch.int32,
                                  device=device)
        self.layer = -1

    def part(self, consumer):
        """Return (inputs a counter covers, producer programs a part needs, parts)."""
        kind, n, k = self.shapes[consumer]
        producer = self.config.gemv(*self.shapes[self.CONSUMES[consumer]])
        block_k = self.config.gemv(kind, n, k).block_k
        part = block_k * max(1, k // block_k // self.parts)
        assert k // part <= 8 or self.replicas == 1, 'the counters hold 8 parts of 8 replicas'
        while k % part or part % producer.block_n:   # every part whole: one target for all
            part //= 2
        return part, part // producer.block_n * producer.split_k, k // part

    def slot(self, consumer, layer):
        return self.counts[layer, ('gate_up', 'down', 'qkv').index(consumer)]

    def gating(self, name, layer):
        """Return the counter arguments of GEMV `name` in layer."""
        args = {'COUNT_IN': self.counts, 'PART_IN': 1, 'TARGET_IN': 0,
                'COUNT_OUT': self.counts, 'PART_OUT': 1, 'GATED': False, 'SIGNAL': False,
                'NAP': self.nap, 'L1': self.l1 or self.acquire, 'LATE': self.late,
                'ACQUIRE': self.acquire, 'REPLICAS': self.replicas}
        if name in self.gated and not (name == 'qkv' and layer == 0) and self.mode != 'signal':
            part, target, _ = self.part(name)
            args.update(COUNT_IN=self.slot(name, layer - (name == 'qkv')), PART_IN=part,
                        TARGET_IN=target if self.mode == 'count' else 0, GATED=True)
        consumer = {v: c for c, v in self.CONSUMES.items()}.get(name)
        if consumer in self.gated and not (name == 'down' and layer == len(self.counts) - 1):
            args.update(COUNT_OUT=self.slot(consumer, layer), PART_OUT=self.part(consumer)[0],
                        SIGNAL=True)
        return args

    def embed(self, table, token):
        self.layer = -1
        self.counts.zero_()
        return super().embed(table, token)

    def gemv(self, name, x, y, norm_w, bias, eps, w, accumulate):
        kind, n, k = self.shapes[name]
        cfg = self.config.gemv(kind, n, k)
        split_k = cfg.split_k if accumulate else 1
        counted_matvec_kernel[(triton.cdiv(n, cfg.block_n), split_k)](
            w, x, y, norm_w if norm_w is not None else x, bias if bias is not None else y, n,
            k, eps, **self.gating(name, self.layer), HAS_NORM=norm_w is not None,
            HAS_BIAS=bias is not None, ACCUMULATE=accumulate, BLOCK_N=cfg.block_n,
            BLOCK_K=cfg.block_k, SPLIT_K=split_k, EVEN=kernels._even(n, k, cfg),
            STREAM=self.config.stream(), AHEAD=cfg.tiles_ahead, num_warps=cfg.num_warps,
            **kernels._pdl(x.device))

    def rms_matvec(self, x, norm_w, w, bias, eps, out=None):
        if w.shape[0] != self.shapes['qkv'][1]:   # the head
            return super().rms_matvec(x, norm_w, w, bias, eps, out)
        self.layer += 1
        y = torch.empty(w.shape[0], device=x.device, dtype=torch.float32)
        self.gemv('qkv', x, y, norm_w, bias, eps, w, False)
        return y

    def matvec_add(self, x, a, w):
        name = 'down' if w.shape[1] == self.shapes['down'][2] else 'o_proj'
        self.gemv(name, a, x, None, None, 0.0, w, True)

    def rms_gate_up_silu(self, x, norm_w, w_gate_up, eps):
        kind, n, k = self.shapes['gate_up']
        cfg = self.config.gemv(kind, n, k)
        y = torch.empty(n, device=x.device, dtype=torch.float32)
        counted_gate_up_kernel[(triton.cdiv(n, cfg.block_n),)](
            w_gate_up, x, y, norm_w, n, k, eps, **self.gating('gate_up', self.layer),
            ROW_BLOCK=gate_up_block(n), BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
            EVEN=kernels._even(n, k, cfg), STREAM=self.config.stream(),
            num_warps=cfg.num_warps, **kernels._pdl(x.device))
        return y

    def check(self):
        """Return the counters that do not hold their targets after a step ('' if none)."""
        wrong = []
        for consumer in self.gated:
            part, target, parts = self.part(consumer)
            for layer in range(len(self.counts) - (consumer == 'qkv')):
                lines = self.slot(consumer, layer)[:parts * self.replicas * 32:32]
                got = lines.tolist()
                if got != [target] * (parts * self.replicas):
                    wrong.append(f'{consumer} layer {layer}: {got} (target {target})')
        return '; '.join(wrong[:3])


def check_arm(model, ops, base_logits, ctx):
    """Print how an arm's logits compare with the package's, and its counters."""
    model.step(ops, ctx)
    torch.cuda.synchronize()
    diff = ((model.logits - base_logits).norm() / base_logits.norm()).item()
    wrong = ops.check() if isinstance(ops, CountedOps) and ops.mode == 'count' else ''
    return f'logits vs package {diff:.1e}' + (f'; COUNTERS WRONG: {wrong}' if wrong else '')


def time_rounds(model, arms, arch, ctx, step_ms, width, rounds=ROUNDS):
    """
    Print each arm's step against arms['package']: medians of interleaved rounds.

    step_ms(model, ops, ctx) times one arm once; the arms' order is reversed every other round.
    """
    times = {name: [] for name in arms}
    for rnd in range(rounds):
        for name in (list(arms) if rnd % 2 == 0 else list(arms)[::-1]):
            times[name].append(step_ms(model, arms[name], ctx))
    base = statistics.median(times['package'])
    layers = model.config.num_layers
    print(f'{arch} ctx {ctx}, {layers} layers:', flush=True)
    for name, t in times.items():
        med = statistics.median(t)
        print(f'  {name:{width}s} {med:.4f} ms  {1e3 * (med - base):+7.1f} us '
              f'({1e3 * (med - base) / layers:+5.2f} a layer)  rounds '
              + ' '.join(f'{x:.4f}' for x in t), flush=True)


def main():
    dev = torch.device('cuda')
    config = kernels.KernelConfig.for_device(dev)
    module = kernels_module(free_source(), 'free_kernels')
    for spec in sys.argv[1:]:
        arch, contexts = spec.split(':')
        contexts = [int(c) for c in contexts.split(',')]
        model = Model(arch, max(contexts) + 64, dev)
        shapes = gemvs(model.config)
        assert len(set(shapes.values())) == 4, shapes
        three = {'gate_up', 'down', 'qkv'}
        arms = {'package': kernels.KernelOps(config),
                'zeroed': CountedOps(config, model.config, ()),
                'count qkv': CountedOps(config, model.config, {'qkv'}, nap=True, acquire=True),
                'count qkv, 1 part': CountedOps(config, model.config, {'qkv'}, nap=True,
                                                acquire=True, parts=1),
                'checks only qkv': CountedOps(config, model.config, {'qkv'}, mode='checks',
                                              acquire=True),
                'checks only qkv, 1 part': CountedOps(config, model.config, {'qkv'},
                                                      mode='checks', acquire=True, parts=1),
                'count qkv, 8 replicas': CountedOps(config, model.config, {'qkv'}, nap=True,
                                                    acquire=True, replicas=8),
                'count three, 8 replicas': CountedOps(config, model.config, three, nap=True,
                                                      acquire=True, replicas=8),
                'free qkv': make_ops(module, config, {shapes['qkv']}),
                'free all four': make_ops(module, config, set(shapes.values()))}
        for ctx in contexts:
            model.step(arms['package'], ctx)
            torch.cuda.synchronize()
            base_logits = model.logits.clone()
            for name, ops in arms.items():
                if not name.startswith('free'):
                    print(f'{arch} ctx {ctx} {name}: {check_arm(model, ops, base_logits, ctx)}',
                          flush=True)
            time_rounds(model, arms, arch, ctx, step_ms, 14)
        del model, arms
        torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
