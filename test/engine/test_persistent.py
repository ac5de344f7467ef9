"""persistent_step.cu (every layer of a step in one kernel) against the per-op kernels."""

import subprocess

from physinf_ros.engine import cuda_build, persistent
from physinf_ros.engine.base import DecoderInfo, Sampling
from physinf_ros.engine.kernels import KernelConfig, KernelOps
from physinf_ros.engine.llama import (decode_layers, from_state_dict, KVCache, ModelConfig,
                                      rope_tables, synthetic_state_dict)
from physinf_ros.engine.models import synthetic_config
from physinf_ros.engine.native import NativeDecoder
import pytest
import torch

DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
# Both sum in float32 over the same rounded inputs, in another order, so they differ where a
# rounding to 16 bits falls the other way (2^-8 each, a few per layer), as the per-op kernels
# differ from ops_torch in test_kernels (whose bound this is). A wrong index, a missed tile or
# a stale row shows as an error of order one.
TOL = 3e-2


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def model(arch, dtype, layers=3, vocab=1000):
    """Return a few layers of a published shape (synthetic config) with random weights."""
    hf = synthetic_config(arch)
    hf.update(num_hidden_layers=layers, vocab_size=vocab)
    config = ModelConfig.from_hf(hf)
    return from_state_dict(config, synthetic_state_dict(config, DEVICE, dtype), DEVICE, dtype)


@pytest.mark.skipif(cuda_build.nvcc() is None, reason='needs nvcc (the CUDA toolkit)')
def test_source_compiles_for_hopper_without_spills(tmp_path):
    out = subprocess.run([cuda_build.nvcc(), *cuda_build.FLAGS, '-arch=sm_90', '-Xptxas', '-v',
                          '-o', str(tmp_path / 'p.so'), str(persistent.SOURCE)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.count('Compiling entry function') == 2   # bfloat16 and float16
    spills = [line for line in out.stderr.splitlines() if 'spill stores' in line]
    assert spills and all('0 bytes stack frame, 0 bytes spill stores' in s for s in spills)


def test_what_it_does_not_run_says_why():
    weights = model('llama-3.2-1b', torch.float32, layers=1, vocab=64)
    cache = KVCache.allocate(weights.config, 16, DEVICE, torch.float32)
    reason = persistent.unsupported(weights, cache, DEVICE)
    assert reason == ('not a CUDA device' if DEVICE.type == 'cpu'
                      else 'torch.float32 weights (it runs bfloat16 and float16)')
    # Switched off, or unsupported: the per-op step, whatever the GPU.
    layers = KernelOps(KernelConfig(persistent=False)).layers_for(weights, cache)
    assert layers.func is decode_layers
    on = KernelConfig(persistent=True)
    assert KernelOps(on).layers_for(weights, cache).func is decode_layers


@pytest.mark.gpu
@pytest.mark.parametrize('arch, dtype', [
    ('llama-3.1-8b', torch.bfloat16), ('llama-3.2-1b', torch.bfloat16),
    ('qwen2.5-1.5b', torch.bfloat16), ('llama-3.2-3b', torch.bfloat16),
    ('llama-3.2-1b', torch.float16), ('qwen2.5-7b', torch.float16)])
def test_layers_match_the_per_op_kernels(arch, dtype):
    weights = model(arch, dtype)
    config = weights.config
    max_context = 2200
    cos, sin = rope_tables(config, max_context, DEVICE)
    caches = [KVCache.allocate(config, max_context, DEVICE, dtype) for _ in range(2)]
    torch.manual_seed(0)
    caches[0].k.normal_()
    caches[0].v.normal_()
    assert persistent.unsupported(weights, caches[1], DEVICE) == ''
    step = persistent.PersistentLayers(weights, caches[1], DEVICE)
    per_op = KernelOps(KernelConfig(persistent=False))
    # Lengths within one attention tile (64 keys at head_dim 128, 128 at 64), just past one,
    # and many tiles, a head's split over several blocks.
    for length in (1, 2, 31, 32, 33, 64, 65, 130, 500, 2049, 2200):
        pos = torch.tensor([length - 1], dtype=torch.int32, device=DEVICE)
        token = torch.tensor([length % config.vocab_size], device=DEVICE)
        caches[1].k.copy_(caches[0].k)   # the same cache before each step
        caches[1].v.copy_(caches[0].v)
        ref = decode_layers(weights, caches[0], token, pos, cos, sin, per_op).clone()
        out = step(weights, caches[1], token, pos, cos, sin)
        assert rel(out, ref) < TOL, length
        rows = torch.arange(max_context, device=DEVICE) == length - 1
        for mine, theirs in ((caches[1].k, caches[0].k), (caches[1].v, caches[0].v)):
            assert rel(mine[:, :, rows], theirs[:, :, rows]) < TOL / 3, length
            assert torch.equal(mine[:, :, ~rows], theirs[:, :, ~rows]), length


@pytest.mark.gpu
def test_graphed_decoder_runs_it_and_agrees_with_the_per_op_graph():
    weights = model('qwen2.5-1.5b', torch.bfloat16, layers=2)
    info = DecoderInfo('graphed', 'cuda', 'bfloat16', 'synthetic', 600)
    logs = []
    decoders = [NativeDecoder(weights, info, DEVICE, graphed=True, log=logs.append,
                              kernel_config=KernelConfig(persistent=on)) for on in (True, False)]
    assert isinstance(decoders[0]._decode_layers, persistent.PersistentLayers)
    assert any('one persistent kernel per step' in line for line in logs)
    prompt = list(range(5, 400))
    for decoder in decoders:
        decoder.prefill(prompt, Sampling())
    for token in range(10, 60, 7):   # teacher-forced: both read the same tokens
        for decoder in decoders:
            decoder.step(token)
        assert rel(decoders[0].last_logits(), decoders[1].last_logits()) < TOL
    assert decoders[0].position == decoders[1].position == len(prompt) + 8


@pytest.mark.skipif(cuda_build.nvcc() is None, reason='needs nvcc (the CUDA toolkit)')
def test_build_names_the_library_by_source_and_arch(tmp_path, monkeypatch):
    monkeypatch.setenv('PHYSINF_ROS_CACHE', str(tmp_path))
    built = cuda_build.build(persistent.SOURCE, 'sm_90', 'the persistent decode kernel')
    assert built.parent == tmp_path and built.name.startswith('persistent_step_')
    assert built.name.endswith('_sm_90.so') and built.stat().st_size > 0
    assert cuda_build.build(persistent.SOURCE, 'sm_90', 'x') == built   # cached: built once
