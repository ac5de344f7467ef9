"""
Where the split and reduce kernels' loads sit against their barriers, compiled for sm_90a.

No GPU needed. For this tree's kernels.py, or another given as the first argument (a base), at
head sizes 128 and 64: registers, and in SASS the barriers before the PDL wait (ACQBULK), the
loads between the wait and the first barrier after it (issued together, one round trip), and
the loads after that barrier and before the first matrix instruction (each a round trip more
behind a layout change). The reduce kernel: loads issued before its first shuffle. Then the
split kernel with session 16's register cap (Triton's maxnreg, 168): registers, instructions,
and whether its SASS is the uncapped one's. Compiled by session 14's static_sass.py.
Usage: python3 static_order.py [KERNELS_PY] (PYTHONPATH the repository root)
"""
import importlib.util
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..',
                                's14_attention'))
from static_sass import compiled_sass  # noqa: E402
import triton.language as tl  # noqa: E402


def module():
    if len(sys.argv) < 2:
        from physinf_ros.engine import kernels
        return kernels
    spec = importlib.util.spec_from_file_location('physinf_ros.engine.kernels_other',
                                                  sys.argv[1])
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    return other


def ops(fn, consts, **options):
    _, report, sass = compiled_sass(fn, consts, 4, **options)
    names = [m.group(1) for m in re.finditer(r'^\s+/\*[0-9a-f]+\*/\s+(?:@!?P\d\s+)?(\S+)', sass,
                                             re.M)]
    lines = [line.split('*/')[1].strip() for line in sass.splitlines()
             if re.match(r'^\s+/\*[0-9a-f]+\*/', line)]
    return re.search(r'Used (\d+) registers', report).group(1), names, lines


kernels = module()
for dim in (128, 64):
    split = {'D': dim, 'GROUP_P': 16, 'BLOCK_T': 64, 'SPLITS': 32, 'MIN_CHUNK': 128,
             'DOT': tl.bfloat16, 'PRECISION': 'tf32', 'PDL': True}
    registers, code, lines = ops(kernels._attn_split_kernel, split)
    wait = code.index('ACQBULK')
    bar = next(i for i in range(wait, len(code)) if code[i].startswith('BAR.SYNC'))
    mma = next(i for i in range(wait, len(code)) if code[i].startswith('HMMA'))
    loads = [op.startswith('LDG') for op in code]
    print(f'split kernel, D {dim}: {registers} registers; before the wait '
          f'{sum(op.startswith("BAR.SYNC") for op in code[:wait])} barriers; after it '
          f'{sum(loads[wait:bar])} loads before the first barrier, {sum(loads[bar:mma])} more '
          'before the first HMMA')
    capped, _, capped_lines = ops(kernels._attn_split_kernel, split, maxnreg=168)
    print(f'split kernel, D {dim}, maxnreg 168: {capped} registers, {len(capped_lines)} '
          f'instructions against {len(lines)}; SASS '
          + ('identical' if capped_lines == lines else 'differs'))
    registers, code, _ = ops(kernels._attn_reduce_kernel,
                             {'D': dim, 'GROUP_P': 16, 'SPLITS': 32, 'PDL': True})
    shuffle = next(i for i, op in enumerate(code) if op.startswith('SHFL'))
    print(f'reduce kernel, D {dim}: {registers} registers; '
          f'{sum(op.startswith("LDG") for op in code[:shuffle])} loads before its first '
          f'shuffle, {sum(op.startswith("LDG") for op in code[shuffle:])} after')
