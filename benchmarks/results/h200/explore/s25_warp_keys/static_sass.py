"""
Session 25: the split kernel compiled for sm_90a (no GPU), the package's against a base's.

Registers, spills, shared memory, SASS instructions, block-wide barriers and matrix-unit
instructions at the 8B's (head size 128) and the 1B's (64) shapes, as launched on the H200
(64-key tiles, 4 warps, 3 stages; the base's kernel takes no W). Compiles through session 14's
compiled_sass.
Usage: python3 static_sass.py BASE (PYTHONPATH the repository root, with v29.diff applied for
static_sass.log; BASE a copy of the package's physinf_ros/ and config/, as s21_start/inproc.py
takes it)
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, '..', 's14_attention'), os.path.join(HERE, '..', 's21_start')]
from inproc import base_module  # noqa: E402
from physinf_ros.engine import kernels  # noqa: E402
from static_sass import compiled_sass  # noqa: E402
import triton.language as tl  # noqa: E402


def facts(name, module, dim, warps=4, block_t=64):
    consts = {'D': dim, 'GROUP_P': 16, 'BLOCK_T': block_t, 'SPLITS': 32, 'MIN_CHUNK': 128,
              'DOT': tl.bfloat16, 'PRECISION': 'tf32', 'PDL': True}
    if 'W' in module._attn_split_kernel.arg_names:
        consts['W'] = min(warps, block_t // 16)
    compiled, report, sass = compiled_sass(module._attn_split_kernel, consts, warps,
                                           num_stages=3)
    count = {key: len(re.findall(pattern, sass, re.M)) for key, pattern in (
        ('SASS', r'^\s+/\*[0-9a-f]+\*/\s+\S'), ('BAR.SYNC', r'\bBAR\.SYNC'),
        ('HMMA', r'\bHMMA\b'), ('LDSM', r'\bLDSM\b'), ('LDGSTS', r'\bLDGSTS\b'),
        ('STS', r'\bSTS\b'), ('LDS', r'\bLDS\b'), ('SHFL', r'\bSHFL\b'))}
    registers = re.search(r'Used (\d+) registers', report).group(1)
    spills = re.search(r'(\d+) bytes spill stores', report).group(1)
    print(f'{name:>5} D {dim:>3}: {registers} registers, {spills} bytes spilled, '
          f'{compiled.metadata.shared} bytes shared, '
          + ', '.join(f'{n} {c}' for n, c in count.items()), flush=True)


if __name__ == '__main__':
    base = base_module(sys.argv[1], 'engine.kernels')
    for dim in (128, 64):
        facts('base', base, dim)
        facts('new', kernels, dim)
