"""
v22, attention's reduce kernel with every load before its max's shuffles (compiled, not run).

The reduce kernel loads SPLITS maxima, sums and partial outputs, takes the maxima's max across
threads (shuffles) and weighs the rest. Session 17 found ptxas issuing only 7 of its 18 loads
at head size 128 (6 of 10 at 64) before that max, so the rest wait one L2 round trip more.
This derives v22 from this tree's kernels.py as text (nothing is committed twice): the partial
outputs and sums loaded before the maxima, and 8 warps instead of 4. It compiles both kernels
for sm_90a here, no GPU, in both source orders and at 4 and 8 warps, and prints for each the
order of its SASS loads (L), shuffles (S), exponentials (E) and barriers (B), and how many
loads come before the first shuffle or exponential, the first instruction that waits for one.
`--write PATH` writes v22's kernels.py there, for probe.py's KERNELS arms on the GPU.
Usage: python3 reduce_order.py [--write PATH] (PYTHONPATH the repository root)
"""
import importlib.util
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..',
                                's14_attention'))
from physinf_ros.engine import kernels  # noqa: E402
from static_sass import compiled_sass  # noqa: E402

LOADS = ("""    m = tl.load(MAXS + index)
    weight = tl.exp(m - tl.max(m, axis=0))
    total = tl.sum(tl.load(SUMS + index) * weight, axis=0)
    acc = tl.load(ACCS + index[:, None] * D + d[None, :])
""", """    acc = tl.load(ACCS + index[:, None] * D + d[None, :])
    sums = tl.load(SUMS + index)
    m = tl.load(MAXS + index)
    weight = tl.exp(m - tl.max(m, axis=0))
    total = tl.sum(sums * weight, axis=0)
""")
WARPS = ('SPLITS=splits, num_warps=4, **pdl)', 'SPLITS=splits, num_warps=8, **pdl)')


def source(order: bool, warps: bool) -> str:
    """kernels.py with the loads in v22's order and/or the reduce launched with 8 warps."""
    with open(kernels.__file__) as f:
        text = f.read()
    for (old, new), apply in ((LOADS, order), (WARPS, warps)):
        assert text.count(old) == 1, f'kernels.py has changed: {old.strip()[:40]}'
        text = text.replace(old, new) if apply else text
    return text


def module(text: str, name: str):
    """Import the text as a module of the package (Triton reads its source file)."""
    path = os.path.join(tempfile.mkdtemp(), f'{name}.py')
    with open(path, 'w') as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(f'physinf_ros.engine.{name}', path)
    derived = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(derived)
    return derived


def order(fn, dim: int, warps: int) -> str:
    consts = {'D': dim, 'GROUP_P': 16, 'SPLITS': 32, 'PDL': True}
    _, report, sass = compiled_sass(fn, consts, warps)
    ops = [line.split('*/')[1] for line in sass.splitlines()
           if re.match(r'^\s+/\*[0-9a-f]+\*/', line)]
    names = (('LDG', 'L'), ('SHFL', 'S'), ('MUFU.EX2', 'E'), ('BAR', 'B'))
    marks = ''.join(next((mark for op_name, mark in names if op_name in op), '')
                    for op in ops)
    first_wait = min(marks.find(mark) for mark in 'SE')
    registers = re.search(r'Used (\d+) registers', report).group(1)
    return (f'{marks[:first_wait].count("L"):>2} of {marks.count("L"):>2} loads before the '
            f'first wait, {registers} registers, {len(ops)} instructions: {marks}')


if __name__ == '__main__':
    if sys.argv[1:2] == ['--write']:
        with open(sys.argv[2], 'w') as f:
            f.write(source(True, True))
        sys.exit(0)
    derived = module(source(True, False), 'kernels_v22_order')
    for dim in (128, 64):
        for name, fn in (('kernels.py', kernels._attn_reduce_kernel),
                         ('v22 order', derived._attn_reduce_kernel)):
            for warps in (4, 8):
                print(f'D {dim:>3} {name:>10} {warps} warps: {order(fn, dim, warps)}',
                      flush=True)
