"""
benchmarks/kernel_sweep.py: its kinds run ops, and it tunes the launch shapes the kernels use.

Every kind it sweeps names an op of both ops modules, and every launch shape a step or a verify
step looks up is one it tunes.
"""

from benchmark_scripts import benchmark_script
from kernel_device import DEVICE
from physinf_ros.engine.kernels import ops_torch
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.kernels.ops_triton import KernelOps
from physinf_ros.engine.kernels.rows import RowOps
from physinf_ros.engine.kernels.shapes import GemvConfig
from physinf_ros.engine.model import families
from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.model.llama import KVCache
from physinf_ros.engine.weights.resolve import resolve
import pytest
from tiny_models import FAMILY_CASES, tiny_config
import torch

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


@pytest.mark.parametrize('name', sorted(FAMILY_CASES) + ['llama'])
def test_every_launch_shape_a_step_looks_up_is_one_the_sweep_tunes(monkeypatch, name):
    # A 16-bit step and a verify step of 3 drafted tokens on the kernels, each GEMV's lookup
    # of its launch shape recorded. At 43fa301 the rows gate/up looked up 2 I outputs where
    # the sweep and kernels.yaml key I, so rowsweep timed the default shape at every candidate
    # and its rows never ran; Gemma 3's rows residuals looked up a kind the sweep did not time.
    arch, tie, sizes = FAMILY_CASES.get(name, ('llama-3.2-1b', False, {}))
    config = ModelConfig.from_hf(tiny_config(arch, tie, sizes))
    family = families.module(config)
    weights = families.synthetic_weights(config, DEVICE, torch.float32)
    cos, sin = family.rope_tables(config, 16, DEVICE)
    cache = KVCache.allocate(config, 16, DEVICE, torch.float32)
    looked_up = set()
    gemv = KernelConfig.gemv

    def recording(self, kind, n, k):
        looked_up.add((kind, n, k))
        return gemv(self, kind, n, k)

    monkeypatch.setattr(KernelConfig, 'gemv', recording)
    ops = KernelOps(KernelConfig())
    for step_ops, tokens in ((ops, [5]), (RowOps(ops), [5, 9, 2, 11])):
        pos = torch.arange(len(tokens), dtype=torch.int32, device=DEVICE)
        x = family.decode_layers(weights, cache, torch.tensor(tokens, device=DEVICE), pos, cos,
                                 sin, step_ops)
        step_ops.rms_matvec(x, weights.norm, weights.lm_head, None, config.rms_norm_eps)
    tuned = {(kind, n, k) for kind, n, k, _ in kernel_sweep.gemv_cases(config)
             if '_q4' not in kind}
    assert looked_up - tuned == set(), 'looked up by a kernel, never swept'
    assert tuned - looked_up == set(), 'swept, never looked up'


def test_every_tuned_row_of_kernels_yaml_is_a_gemv_of_a_published_shape():
    # A row whose (kind, N, K) no model looks up never runs, silently: a shape typed wrong, or
    # keyed otherwise than the kernels key it (72cf15a's H200 gate/up rows were swept under a
    # key the kernel never asked for). Nor may an entry list one key twice (the later wins).
    import yaml
    from physinf_ros.resources import config_path
    shapes = yaml.safe_load(config_path('models.yaml').read_text())
    published = {(kind, n, k) for name in shapes for kind, n, k, _ in kernel_sweep.gemv_cases(
        ModelConfig.from_hf(resolve(f'synthetic:{name}').hf_config))}
    entries = yaml.safe_load(config_path('kernels.yaml').read_text())
    for gpu, entry in entries.items():
        keys = [(row['kind'], row['n'], row['k']) for row in entry.get('gemv', [])]
        assert len(keys) == len(set(keys)), f'{gpu}: a GEMV listed twice'
        assert set(keys) - published == set(), f'{gpu}: rows no published shape looks up'


@pytest.mark.parametrize('head', [True, False])
def test_the_lm_head_is_swept_as_the_greedy_step_runs_it(monkeypatch, head):
    # At eb11d9b three lm_head rows that won their sweep as rms_matvec lengthened the greedy
    # step, which runs greedy_head: its argmax epilogue costs 1.3 to 14 us a call by the rows a
    # program (docs/PERF.md, 7313861). Each candidate must run in it, its argmax checked.
    n, k = 300, 128
    timing, timed_shapes, greedy = [], [], KernelOps.greedy_head

    def recording(self, *args):
        if timing:
            timed_shapes.append(self.config.tuned[('rms_matvec', n, k)])
        return greedy(self, *args)

    def timed(fn):   # runs what the sweep would time, once, without a GPU
        timing.append(fn)
        fn()
        timing.pop()
        return 1.0

    monkeypatch.setattr(KernelOps, 'greedy_head', recording)
    monkeypatch.setattr(kernel_sweep, 'timed', timed)
    candidates = [GemvConfig(8, 64, 1, 4), GemvConfig(16, 64, 1, 4)]
    monkeypatch.setitem(kernel_sweep.CANDIDATES, 'rms_matvec', candidates)
    row = kernel_sweep.sweep_gemv('rms_matvec', n, k, 1, DEVICE, torch.float32, KernelConfig(),
                                  head=head)
    assert row['head'] == head
    assert [r.get('error') for r in row['all']] == [None, None]
    assert set(timed_shapes) == (set(candidates) if head else set())
