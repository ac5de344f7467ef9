"""The software stacks of the transformers backends: names, refusals, bytes and CPU results."""

import subprocess

from installed import installed_command
from physinf_ros.bench import Benchmark, Plan, protocol
from physinf_ros.engine import check_backend, EngineError, load, Sampling
from physinf_ros.engine.decoders import backends, stacks
from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.weights.source import synthetic_config
from physinf_ros.measurement.roofline import (
    Dense, Stacked, weight_bytes_per_step, weight_tensors)
import pytest
import torch

CPU = torch.device('cpu')
CUDA = torch.device('cuda')   # a device name only: nothing here runs on it


def test_every_stack_name_is_a_mode_of_the_transformers_backends_only():
    for name in stacks.STACKS:
        for backend in ('hf', 'hf-graphed'):
            assert check_backend(f'{backend}:{name}') is None
        assert 'only hf, hf-graphed take a stack' in check_backend(f'graphed:{name}')
    reason = check_backend('hf-graphed:sdpa-tpu')
    assert 'unknown stack' in reason
    for name in stacks.STACKS:
        assert name in reason   # the refusal lists every valid stack
    assert 'name a stack' in check_backend('hf:')


def test_a_stack_that_cannot_run_is_refused_with_what_to_install():
    with pytest.raises(EngineError, match='needs a CUDA GPU'):
        backends.pick('hf:bnb-nf4', CPU)
    for stack in stacks.QUANTIZATIONS + stacks.ATTENTIONS:
        if stack.package and stacks.find_spec(stack.package) is None:
            assert stack.install in stacks.missing(stack, CUDA)
    assert 'AutoAWQ is deprecated' in stacks.missing(stacks.STACKS['awq-marlin'], CUDA)


def test_attention_stacks_share_weights_and_quantisation_stacks_do_not():
    assert backends.weights_key('hf-graphed:sdpa-cudnn') == backends.weights_key('hf')
    assert backends.weights_key('hf:eager') == backends.weights_key('hf-graphed')
    assert backends.weights_key('hf:bnb-nf4') == backends.weights_key('hf-graphed:bnb-nf4')
    assert backends.weights_key('hf:bnb-nf4') != backends.weights_key('hf:torchao-int4')
    assert backends.weights_key('hf:bnb-nf4') != backends.weights_key('hf')
    assert backends.graph_of('hf-graphed:sdpa-math') == 'hf:sdpa-math'
    plan = Plan(modes=('hf-graphed', 'hf:eager', 'hf:bnb-nf4', 'hf-graphed:bnb-nf4'))
    assert plan.families() == [('hf-graphed', 'hf:eager'), ('hf:bnb-nf4', 'hf-graphed:bnb-nf4')]


def test_weight_bytes_follow_each_stacks_format():
    config = ModelConfig.from_hf(synthetic_config('llama-3.1-8b'))
    linear = sum(t.rows * t.cols for t in weight_tensors(config) if t.kind == 'linear')
    dense = weight_bytes_per_step(config, Dense(2))
    per_weight = {'bnb-nf4': 0.5 + 4 / 64, 'torchao-int4': 0.5 + 4 / 128, 'torchao-int8': 1.0}
    for name, bytes_per_weight in per_weight.items():
        stack = stacks.STACKS[name]
        counted = weight_bytes_per_step(config, Stacked(stack.weight_format, 2))
        rows = sum(t.rows for t in weight_tensors(config) if t.kind == 'linear')
        expected = dense - 2 * linear + bytes_per_weight * linear \
            + rows * stack.weight_format.row_bytes
        assert counted == pytest.approx(expected)
    # The 8B's linears are 6.98e9 weights: NF4 makes 15.0 GB of bf16 reads about 4.9 GB.
    nf4 = weight_bytes_per_step(config, Stacked(stacks.STACKS['bnb-nf4'].weight_format, 2))
    assert 4.5e9 < nf4 < 5.3e9 and 14.5e9 < dense < 15.5e9


def test_attention_stacks_give_the_reference_logits_on_a_cpu():
    # Same weights (one load), other attention code: logits of a short prompt must agree.
    engine = load('embedded', 'hf', 'cpu', 'float32', 64)
    prompt = engine.encode('Name the capital of France.')
    reference = None
    for mode in ('hf', 'hf:sdpa-math', 'hf:eager', 'hf-graphed:sdpa', 'hf:flex_attention'):
        decoder = engine.renew(mode)
        decoder.prefill(prompt, Sampling())
        decoder.step()
        logits = decoder.last_logits()
        if reference is None:
            reference = logits
        error = ((logits - reference).norm() / reference.norm()).item()
        assert error < 1e-4, (mode, error)   # float32: only the summation order differs


def test_the_protocol_records_a_mode_that_cannot_run_and_goes_on(monkeypatch):
    calls = []
    real = protocol.run_session

    def failing(engine, plan, mode, *args):
        calls.append(mode)
        if mode == 'hf:eager':
            raise RuntimeError('no kernel for this shape')
        return real(engine, plan, mode, *args)

    monkeypatch.setattr(protocol, 'run_session', failing)
    plan = Plan(modes=('hf', 'hf:eager', 'hf:bnb-nf4'), contexts=(16,), steps=2, warmup=0,
                sessions=2, device='cpu', record_unavailable=True)
    bench = Benchmark(plan)
    doc = bench.run()
    assert [c['mode'] for c in doc['cells']] == ['hf']
    assert doc['unavailable'] == [
        {'mode': 'hf:eager', 'reason': 'no kernel for this shape'},
        {'mode': 'hf:bnb-nf4', 'reason': 'stack bnb-nf4 needs a CUDA GPU (device is cpu)'}]
    assert calls.count('hf:eager') == 1   # given up after its first failure
    with pytest.raises(ValueError, match='bnb-nf4 needs a CUDA GPU'):
        Benchmark(Plan(modes=('hf', 'hf:bnb-nf4'), device='cpu'))   # before any load


def test_physinf_bench_refuses_a_stack_before_loading_and_lists_modes(tmp_path):
    command = installed_command('physinf-bench')
    result = subprocess.run(command + ['--modes', 'hf,hf:bnb-nf4', '--device', 'cpu',
                                       '--out', str(tmp_path / 'r.json')],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert 'bnb-nf4 needs a CUDA GPU' in result.stderr
    assert 'loaded' not in result.stderr and not (tmp_path / 'r.json').exists()
    result = subprocess.run(command + ['--modes', 'hf,hf:nf5', '--out', str(tmp_path / 'r.json')],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and 'unknown stack' in result.stderr
    assert 'sdpa-cudnn' in result.stderr and 'torchao-int4' in result.stderr
    help_text = subprocess.run(command + ['--help'], capture_output=True, text=True,
                               timeout=120).stdout
    assert 'NAME:STACK' in help_text and 'awq-marlin' in ' '.join(help_text.split())
