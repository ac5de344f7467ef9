"""
Session 29: where a GEMV loop's weight loads are waited for, compiled for sm_90 (no GPU).

Each bf16 GEMV of the 8B and the 1B, at config/kernels.yaml's H200 launch shape, is compiled as
the package launches it and as v33 (ring_probe.py), and its SASS read: the registers a thread
takes, and, for each weight load of the main loop (the 16-byte evict-first loads), the first
instruction after it in the same turn that waits on the scoreboard it sets (the control bits of
each instruction: bits 46-48 of its high word the scoreboard a load sets, bits 52-57 the ones it
waits on). A load waited for in its own turn is not in flight across the turn.
Usage: static_waits.py (PYTHONPATH the repository root, no TRITON_INTERPRET)
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 's14_timeline'))
sys.path.insert(0, os.path.join(HERE, '..', '..', '..', '..', '..', 'test', 'support'))
from kernel_aot import compile_sm90, cubin_text, resource_usage  # noqa: E402
from physinf_ros.engine import kernels  # noqa: E402
from physinf_ros.engine.llama import gate_up_block  # noqa: E402
from physinf_ros.resources import config_path  # noqa: E402
from ring_probe import ring_source  # noqa: E402
from timeline import kernels_module  # noqa: E402
import yaml  # noqa: E402

BF, F32 = '*bf16', '*fp32'
GEMV = {'W': BF, 'X': F32, 'Y': F32, 'NORM': BF, 'BIAS': BF, 'ARGMAX': '*i64', 'N': 'i32',
        'K': 'i32', 'eps': 'fp32'}
GATE_UP = {k: GEMV[k] for k in ('W', 'X', 'Y', 'NORM', 'N', 'K', 'eps')}
SHAPES = {'llama-3.1-8b': (4096, 6144, 14336), 'llama-3.2-1b': (2048, 3072, 8192)}


def compile_sass(fn, signature, constexprs, warps):
    """Return (SASS text, resource usage line) of one kernel compiled for sm_90."""
    compiled = compile_sm90(fn, signature, constexprs, divisible=('N', 'K'), num_warps=warps)
    usage = resource_usage(compiled)
    return (cubin_text(compiled, 'cuobjdump', '-sass'),
            ' '.join(f'{k}:{usage[k]}' for k in ('REG', 'STACK', 'LOCAL')))


def instructions(sass):
    """Return (address, text, scoreboard set or None, scoreboards waited on) per instruction."""
    lines = sass.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.match(r'\s*/\*([0-9a-f]{4})\*/\s+(.*?);\s*/\* (0x[0-9a-f]+) \*/', line)
        if not m:
            continue
        high = int(re.match(r'\s*/\* (0x[0-9a-f]+) \*/', lines[i + 1]).group(1), 16)
        control = high >> 41
        sets = (control >> 5) & 7
        waits = {b for b in range(6) if (control >> 11) >> b & 1}
        out.append((int(m.group(1), 16), m.group(2).strip(), None if sets == 7 else sets, waits))
    return out


def loop_waits(sass):
    """Return (turn's instructions, [(load address, where its scoreboard is first waited)])."""
    code = instructions(sass)
    loops = []
    for addr, text, _, _ in code:
        m = re.search(r'BRA (0x[0-9a-f]+)', text)
        if m and int(m.group(1), 16) < addr:
            loops.append((addr - int(m.group(1), 16), int(m.group(1), 16), addr))
    _, first, last = max(loops)
    turn = [ins for ins in code if first <= ins[0] <= last]
    found = []
    for j, (addr, text, sets, _) in enumerate(turn):
        if text.split()[-4 if text.startswith('@') else -3:] and '.EF.128' in text:
            later = [a for a, _, _, waits in turn[j + 1:] if sets in waits]
            found.append((addr, f'in its turn at {later[0]:04x}' if later else 'next turn'))
    return len(turn), found


def main():
    tuning = yaml.safe_load(config_path('kernels.yaml').read_text())['NVIDIA H200']
    config = kernels.KernelConfig().with_tuning(tuning)
    ring = kernels_module(ring_source(), 'ring_kernels')
    for arch, (hidden, qkv, inter) in SHAPES.items():
        gemvs = [('QKV', 'rms_matvec', qkv, hidden, True, False),
                 ('o_proj', 'matvec_add', hidden, hidden, False, True),
                 ('gate/up', 'gate_up', inter, hidden, True, False),
                 ('down', 'matvec_add', hidden, inter, False, True)]
        for name, kind, n, k, norm, accumulate in gemvs:
            cfg = config.gemv(kind, n, k)
            for arm, module in (('package', kernels), ('v33', ring)):
                if kind == 'gate_up':
                    fn, sig = module._gate_up_kernel, GATE_UP
                    consts = {'ROW_BLOCK': gate_up_block(n), 'BLOCK_N': cfg.block_n,
                              'BLOCK_K': cfg.block_k, 'EVEN': True, 'STREAM': 'evict_first',
                              'PDL': True}
                else:
                    fn, sig = module._matvec_kernel, GEMV
                    consts = {'HAS_NORM': norm, 'HAS_BIAS': False, 'ACCUMULATE': accumulate,
                              'HAS_ARGMAX': False, 'BLOCK_N': cfg.block_n,
                              'BLOCK_K': cfg.block_k, 'SPLIT_K': cfg.split_k, 'EVEN': True,
                              'STREAM': 'evict_first', 'AHEAD': cfg.tiles_ahead, 'PDL': True}
                if module is ring:
                    consts['RING'] = True
                sass, usage = compile_sass(fn, sig, consts, cfg.num_warps)
                size, found = loop_waits(sass)
                own = sum(where != 'next turn' for _, where in found)
                print(f'{arch} {name} ({cfg.block_n}, {cfg.block_k}, {cfg.split_k}, '
                      f'{cfg.num_warps}, ahead {cfg.tiles_ahead}) {arm}: {usage}; loop of '
                      f'{size} instructions, {len(found)} weight loads, {own} waited for in '
                      f'their own turn', flush=True)
                for addr, where in found:
                    print(f'    load at {addr:04x}: waited {where}')


if __name__ == '__main__':
    main()
