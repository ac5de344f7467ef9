"""benchmarks/kernel_sweep.py: every kind it sweeps names an op of both ops modules."""

from benchmark_scripts import benchmark_script
from physinf_ros.engine.kernels import ops_torch
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.kernels.ops_triton import KernelOps
import pytest

kernel_sweep = benchmark_script('kernel_sweep')


@pytest.mark.parametrize('kind', sorted(kernel_sweep.CANDIDATES))
def test_each_kind_runs_an_op_of_the_kernels_and_of_the_reference(kind):
    # The sweep times KernelOps' op and checks it against ops_torch's; at b9a969c the rows kinds
    # named a gate/up op that ops_torch lacks, which stopped rowsweep at its first shape.
    for ops in (ops_torch, KernelOps(KernelConfig())):
        assert callable(kernel_sweep.kind_op(ops, kind))
