"""benchmarks/kernel_sweep.py: every kind it sweeps names an op of both ops modules."""

from benchmark_scripts import benchmark_script
from physinf_ros.engine.kernels import ops_torch
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.kernels.ops_triton import KernelOps
from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.weights.resolve import resolve
import pytest

kernel_sweep = benchmark_script('kernel_sweep')


@pytest.mark.parametrize('kind', sorted(kernel_sweep.CANDIDATES))
def test_each_kind_runs_an_op_of_the_kernels_and_of_the_reference(kind):
    # The sweep times KernelOps' op and checks it against ops_torch's; at b9a969c the rows kinds
    # named a gate/up op that ops_torch lacks, which stopped rowsweep at its first shape.
    for ops in (ops_torch, KernelOps(KernelConfig())):
        assert callable(kernel_sweep.kind_op(ops, kind))


def test_a_model_step_has_a_gemv_of_every_kind_swept():
    # At 3553f77 the rows_*_q4 kinds had candidates but no GEMV, so rowsweep left them out.
    config = ModelConfig.from_hf(resolve('synthetic:llama-3.2-1b').hf_config)
    cases = kernel_sweep.gemv_cases(config)
    assert {kind for kind, *_ in cases} == set(kernel_sweep.CANDIDATES)
    assert ('rows_gate_up_q4', config.intermediate_size, config.hidden_size,
            config.num_layers) in cases


def test_an_unknown_kind_is_refused_before_any_gpu_work(capsys):
    with pytest.raises(SystemExit):
        kernel_sweep.main(['--model', 'synthetic:llama-3.2-1b', '--kinds', 'rows_gate_up_q8',
                           '--out', 'unused.json'])
    assert 'rows_gate_up_q8: not a GEMV kind' in capsys.readouterr().err
