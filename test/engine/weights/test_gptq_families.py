"""
GPTQ round-to-nearest copies (`:gptq`) of Qwen3, SmolLM3, Phi-3 and Gemma 3, on CPU.

Each tiny checkpoint is quantised, and its exact float32 dequantisation saved beside it: our
eager backend on the 4-bit copy (dequantised once at load on a CPU) decodes like transformers
on those floats, and the packed linears the CUDA path keeps (Phi-3's fused QKV and gate/up split
and its heads laid out, in their 4-bit form) give the same step as the dequantised weights, in
ops_torch and in the Triton kernels (on the GPU where there is one, else in the interpreter).
"""

from decode_checks import assert_same_decode, assert_same_prompt_logits
from kernel_device import DEVICE
from physinf_ros.engine import load
from physinf_ros.engine.kernels import ops_torch, ops_triton
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.model import families
from physinf_ros.engine.model.llama import KVCache
from physinf_ros.engine.weights.gptq import PackedLinear
from physinf_ros.engine.weights.gptq_files import quantize_hf_dir
import pytest
from tiny_models import FAMILY_CASES, save_tiny_gptq
import torch


@pytest.fixture(scope='module', params=sorted(FAMILY_CASES))
def tiny_gptq(request, tmp_path_factory):
    arch, tie, sizes = FAMILY_CASES[request.param]
    return save_tiny_gptq(arch, tmp_path_factory.mktemp(request.param), tie=tie, sizes=sizes)


def test_gptq_copy_decodes_like_transformers_on_its_dequantised_floats(tiny_gptq):
    gptq_dir, float_dir = tiny_gptq
    reference = load(str(float_dir), backend='hf', device='cpu', max_context=256)
    ours = load(str(gptq_dir), backend='eager', device='cpu', max_context=256)
    assert ours.source.quant_method == 'gptq'
    prompt = torch.randint(3, 512, (11,), generator=torch.Generator().manual_seed(1)).tolist()
    assert_same_decode(reference, ours, prompt)
    ids = torch.randint(3, 512, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    assert_same_prompt_logits(reference, ours, ids)


@pytest.mark.parametrize('ops', [ops_torch, ops_triton.KernelOps(KernelConfig())],
                         ids=['torch', 'triton'])
def test_packed_linears_step_like_the_dequantised_ones(tiny_gptq, ops):
    gptq_dir, _ = tiny_gptq
    packed = families.load_hf_dir(gptq_dir, DEVICE, torch.float32, packed=True)
    floats = families.load_hf_dir(gptq_dir, DEVICE, torch.float32, packed=False)
    assert isinstance(packed.layers[0].wqkv, PackedLinear)
    assert isinstance(packed.layers[0].w_gate_up, PackedLinear)
    config = packed.config
    family = families.module(config)
    cos, sin = family.rope_tables(config, 64, DEVICE)
    caches = [KVCache.allocate(config, 64, DEVICE, torch.float32) for _ in range(2)]
    prompt = torch.arange(3, 24, device=DEVICE)
    for weights, cache in zip((floats, packed), caches):
        families.prefill(family, weights, cache, prompt, cos, sin)
    for step in range(3):
        token = torch.tensor([5 + step], device=DEVICE)
        pos = torch.tensor([len(prompt) + step], dtype=torch.int32, device=DEVICE)
        ref = family.decode_layers(floats, caches[0], token, pos, cos, sin, ops_torch)
        out = family.decode_layers(packed, caches[1], token, pos, cos, sin, ops)
        error = ((out - ref).norm() / ref.norm()).item()
        assert error < 1e-4, f'step {step}: relative error {error:.2e}'


def test_a_multimodal_gemma3_copy_is_refused_before_writing(tmp_path):
    source = tmp_path / 'gemma3'
    source.mkdir()
    (source / 'config.json').write_text('{"model_type": "gemma3", "text_config": {}}')
    with pytest.raises(ValueError, match='not gemma3'):
        quantize_hf_dir(source, tmp_path / 'out')
    assert not (tmp_path / 'out').exists()
