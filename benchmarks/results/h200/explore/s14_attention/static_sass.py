"""
Compile attention's split kernel for sm_90a, no GPU needed, and count what it holds.

Registers, spills, shared memory and SASS instructions, for the package's kernel and
fma_kernels.py's, at the 8B's and 1B's head sizes.

The pointers and max_context get the 16-byte divisibility the JIT assumes at run time (without
it the cache loads compile to 2-byte loads and the counts mean nothing).
Usage: python3 static_sass.py (from this folder, PYTHONPATH the repository root)
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', '..', '..', '..', 'test', 'support'))
import fma_kernels  # noqa: E402
from kernel_aot import compile_sm90, cubin_text, TOOLS  # noqa: E402
from physinf_ros.engine import kernels  # noqa: E402
import triton.language as tl  # noqa: E402

TYPES = collections.defaultdict(lambda: '*fp32', {
    'KC': '*bf16', 'VC': '*bf16', 'POS': '*i32', 'max_context': 'i32', 'scale': 'fp32',
    'group': 'i32', 'num_heads': 'i32', 'kv_heads': 'i32'})


def compiled_sass(fn, consts, warps, **options):
    """Return (compiled, ptxas -v report, SASS) of fn for sm_90a, specialised as launched."""
    compiled = compile_sm90(fn, TYPES, consts, divisible=('max_context',), num_warps=warps,
                            **options)
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, 'k.ptx')
        with open(ptx, 'w') as f:
            f.write(compiled.asm['ptx'])
        report = subprocess.run([os.path.join(TOOLS, 'ptxas'), '-v', '-arch=sm_90a', ptx, '-o',
                                 os.path.join(tmp, 'again.cubin')],
                                capture_output=True, text=True).stderr
    return compiled, report, cubin_text(compiled, 'nvdisasm', '-c')


def facts(module, group_p, block_t, warps, dim):
    consts = {'D': dim, 'GROUP_P': group_p, 'BLOCK_T': block_t, 'SPLITS': 32, 'MIN_CHUNK': 128,
              'DOT': tl.bfloat16, 'PRECISION': 'tf32', 'PDL': True}
    compiled, report, sass = compiled_sass(module._attn_split_kernel, consts, warps)
    registers = re.search(r'Used (\d+) registers', report).group(1)
    spills = re.search(r'(\d+) bytes spill stores', report).group(1)
    instructions = len(re.findall(r'^\s+/\*[0-9a-f]+\*/\s+\S', sass, re.M))
    return (f'{module.__name__.rsplit(".", 1)[-1]:>12} D {dim:>3} query rows {group_p:>2} '
            f'tile {block_t:>2} warps {warps}: {registers} registers, {spills} bytes spilled, '
            f'{compiled.metadata.shared} bytes shared, {instructions} SASS instructions')


if __name__ == '__main__':
    fma = fma_kernels.module()
    for dim in (128, 64):
        print(facts(kernels, 16, 64, 4, dim))
        for block_t, warps in ((64, 4), (32, 4), (64, 8), (32, 8)):
            print(facts(fma, 4, block_t, warps, dim), flush=True)
