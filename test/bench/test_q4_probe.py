"""benchmarks/q4_probe.py: both arms of the layer probe read every code word once."""

import sys

from benchmark_scripts import benchmark_script, BENCHMARKS
from kernel_device import DEVICE
import numpy as np
import torch

sys.path.insert(0, str(BENCHMARKS))   # q4_probe imports kernel_sweep, beside it
q4_probe = benchmark_script('q4_probe')


def test_four_kernels_and_one_read_the_same_words():
    # The xor of each column's words: a tile skipped, read twice or read from the wrong matrix
    # changes it. Shapes as the layer's: matrices of different depths and widths.
    gen = torch.Generator().manual_seed(0)
    codes = [torch.randint(-2 ** 31, 2 ** 31 - 1, shape, dtype=torch.int32, generator=gen)
             for shape in ((224, 64), (64, 160), (64, 96), (64, 32))]
    width = max(c.shape[1] for c in codes)
    expected = np.zeros(width, dtype=np.int32)
    for c in codes:
        expected[:c.shape[1]] ^= np.bitwise_xor.reduce(c.numpy(), axis=0)
    launch = {'BLOCK_R': 32, 'BLOCK_N': 32, 'PDL': False}
    codes = [c.to(DEVICE) for c in codes]
    separate = torch.zeros(width, dtype=torch.int32, device=DEVICE)
    for c in codes:
        q4_probe._columns_kernel[(c.shape[1] // 32,)](c, separate, c.shape[0], c.shape[1],
                                                      **launch)
    fused = torch.zeros(width, dtype=torch.int32, device=DEVICE)
    q4_probe._layer_kernel[(sum(c.shape[1] // 32 for c in codes),)](
        *codes, fused, *(c.shape[0] for c in codes), *(c.shape[1] for c in codes), **launch)
    assert np.array_equal(separate.cpu().numpy(), expected)
    assert np.array_equal(fused.cpu().numpy(), expected)
