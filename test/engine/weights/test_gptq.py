"""GPTQ 4-bit checkpoints: packing, quantisation, files, bytes per step, the dequantised path."""

import json

from physinf_ros.engine import load, Sampling
from physinf_ros.engine.model import llama
from physinf_ros.engine.weights import gptq, gptq_files
from physinf_ros.engine.weights.source import synthetic_config
from tiny_models import ARCHS, save_tiny, tiny_config
import torch

GEN = torch.Generator().manual_seed(0)


def test_codes_round_trip_and_sit_in_nibble_k_mod_8():
    codes = torch.randint(0, 16, (256, 96), generator=GEN, dtype=torch.int32)
    packed = gptq.pack_codes(codes)
    assert packed.dtype == torch.int32 and packed.shape == (32, 96)
    assert torch.equal(gptq.unpack_codes(packed), codes)
    # Input rows 0..7 of one column with codes 0..15 land in nibbles 0..7 of one word.
    column = torch.tensor([[1], [2], [3], [4], [5], [6], [7], [15]], dtype=torch.int32)
    assert gptq.pack_codes(column).item() & 0xFFFFFFFF == 0xF7654321


def test_zeros_are_stored_minus_one_as_gptq_v1():
    symmetric = torch.full((4, 64), gptq.SYMMETRIC_ZERO, dtype=torch.int32)
    qzeros = gptq.pack_zeros(symmetric)
    assert qzeros.shape == (4, 8)
    assert (qzeros == 0x77777777).all()
    zeros = torch.randint(1, 17, (3, 64), generator=GEN, dtype=torch.int32)
    assert torch.equal(gptq.unpack_zeros(gptq.pack_zeros(zeros)), zeros)


def test_rtn_error_is_at_most_half_a_step():
    weight = torch.randn(96, 512, generator=GEN) * 0.02
    weight[3, 7] = 0.5   # an outlier widens only its own group
    for group in (128, 64, 32):
        q = gptq.quantize(weight, group)
        assert q['scales'].dtype == torch.float16 and q['scales'].shape == (512 // group, 96)
        assert (q['qzeros'] == 0x77777777).all()
        step = q['scales'].float().T.repeat_interleave(group, dim=1)       # [N, K]
        error = (weight - gptq.dequantize(**q)).abs()
        assert (error <= step / 2).all()
        assert error.max() > step.min() / 8   # a real rounding happened


def test_dequantize_follows_g_idx_and_matches_fp16_reconstruction():
    codes = torch.randint(0, 16, (256, 32), generator=GEN, dtype=torch.int32)
    zeros = torch.randint(1, 17, (4, 32), generator=GEN, dtype=torch.int32)
    scales = (torch.rand(4, 32, generator=GEN) * 0.01).half()
    qweight, qzeros = gptq.pack_codes(codes), gptq.pack_zeros(zeros)
    g_idx = torch.randperm(256, generator=GEN).to(torch.int32) % 4      # act order
    expected = (scales.float()[g_idx.long()] * (codes - zeros[g_idx.long()])).T
    assert torch.equal(gptq.dequantize(qweight, qzeros, scales, g_idx), expected)
    plain = gptq.dequantize(qweight, qzeros, scales)
    trivial = torch.arange(256, dtype=torch.int32) // 64
    assert torch.equal(plain, gptq.dequantize(qweight, qzeros, scales, trivial))
    # exllamav2's reconstruct: fp16(scale * (q - z)), one rounding of the exact product.
    half = gptq.dequantize(qweight, qzeros, scales, dtype=torch.float16)
    assert torch.equal(half, plain.half())


def test_float_checkpoints_quantise_into_what_exllamav2_reads(tmp_path):
    for arch in ARCHS:
        src, out = tmp_path / arch, tmp_path / f'{arch}-gptq'
        save_tiny(arch, src)
        spec = gptq_files.quantize_hf_dir(src, out)
        config = json.loads((out / 'config.json').read_text())
        assert config['architectures'] == [gptq.ARCHITECTURES[config['model_type']]]
        assert 'rope_parameters' not in config and config['rope_theta'] > 0
        assert config['quantization_config']['quant_method'] == 'gptq'
        assert config['quantization_config']['group_size'] == spec.group_size == 32
        if arch == 'llama-3.1-8b':
            assert config['rope_scaling']['rope_type'] == 'llama3'
        model_config = llama.ModelConfig.from_hf(config)
        plan = gptq.checkpoint_plan(model_config, spec)
        written = llama.read_state(out)
        assert sorted(written) == sorted(t.name for t in plan)
        for t in plan:
            assert written[t.name].dtype == t.dtype and tuple(written[t.name].shape) == t.shape
        if arch == 'qwen2.5-7b':
            assert written['model.layers.0.self_attn.q_proj.bias'].abs().sum() > 0
        # The dequantised load, and the 4-bit one, are exactly the RTN of the float weights.
        source = llama.read_state(src)
        cpu = torch.device('cpu')
        weights = llama.load_hf_dir(out, cpu, torch.float32, packed=False)
        q_proj = source['model.layers.1.self_attn.q_proj.weight']
        expected = gptq.dequantize(**gptq.quantize(q_proj, spec.group_size))
        assert torch.equal(weights.layers[1].wqkv[:model_config.q_size], expected)
        packed = llama.load_hf_dir(out, cpu, torch.float32, packed=True).layers[1].wqkv
        assert torch.equal(packed.dense()[:model_config.q_size], expected)
        assert torch.equal(weights.embed, source['model.embed_tokens.weight'].half().float())


def test_synthetic_checkpoint_is_streamed_into_shards(tmp_path):
    hf = tiny_config('qwen2.5-7b')
    spec = gptq_files.write_synthetic(hf, tmp_path, seed=3, device=torch.device('cpu'),
                                      shard_bytes=40_000)
    config = llama.ModelConfig.from_hf(hf)
    plan = gptq.checkpoint_plan(config, spec)
    index = json.loads((tmp_path / 'model.safetensors.index.json').read_text())
    assert len(set(index['weight_map'].values())) > 2
    assert sorted(index['weight_map']) == sorted(t.name for t in plan)
    assert index['metadata']['total_size'] == gptq.weight_bytes(config, spec)[1]
    written = llama.read_state(tmp_path)
    for t in plan:
        assert written[t.name].dtype == t.dtype and tuple(written[t.name].shape) == t.shape
    qweight = written['model.layers.1.mlp.up_proj.qweight']
    codes = gptq.unpack_codes(qweight)
    assert codes.min() == 0 and codes.max() == 15
    assert (written['model.layers.1.mlp.up_proj.qzeros'] == 0x77777777).all()
    scales = written['model.layers.0.self_attn.o_proj.scales'].float()
    assert (scales > 0.7 * gptq_files.SYNTHETIC_SCALE).all()
    assert (scales < 1.3 * gptq_files.SYNTHETIC_SCALE).all()
    assert written['model.layers.0.self_attn.k_proj.bias'].abs().min() > 0
    # It decodes: the dequantised weights have the spread of the bf16 synthetic ones.
    engine = load(str(tmp_path), backend='eager', device='cpu', max_context=64)
    std = engine.decoder.weights.layers[0].w_down.std().item()
    assert 0.015 < std < 0.025
    engine.decoder.prefill([5, 6, 7], Sampling())
    for _ in range(4):
        engine.decoder.step()
    assert torch.isfinite(engine.decoder.last_logits()).all()


def test_llama_8b_bytes_match_the_hand_count():
    config = llama.ModelConfig.from_hf(synthetic_config('llama-3.1-8b'))
    spec = gptq.GptqSpec(128)
    # Per layer, sum of K * N over q, k, v, o (4096 in) and gate, up (4096 in), down (14336 in).
    kn = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336
    assert kn == 218_103_808
    # Bytes per weight: 4-bit code 1/2, fp16 scale per 128 = 2/128, 4-bit zero per 128 = 1/256.
    linear = 32 * (kn // 2 + kn * 2 // 128 + kn // 256)
    assert linear == 3_625_975_808
    head = 128256 * 4096 * 2                     # fp16 lm_head, read whole every step
    norms = (2 * 32 + 1) * 4096 * 2
    row = 4096 * 2                               # one fp16 embedding row per step
    w, w_all = gptq.weight_bytes(config, spec)
    assert w == linear + head + norms + row == 4_677_189_632
    assert w_all == linear + 2 * head + norms == 5_727_854_592
    plan = gptq.checkpoint_plan(config, spec)
    assert sum(t.nbytes for t in plan) == w_all
    assert len(plan) == 1 + 32 * (2 + 7 * 3) + 1 + 1
    # The floor on an H200 (4.8 TB/s) at ctx 2048, fp16 KV: 1.03 ms with W, 1.25 ms with W_all.
    kv = 2 * 32 * 8 * 128 * 2048 * 2
    assert round((w + kv) / 4.8e12 * 1e3, 2) == 1.03
    assert round((w_all + kv) / 4.8e12 * 1e3, 2) == 1.25


def test_tied_models_count_the_table_once():
    config = llama.ModelConfig.from_hf(tiny_config('llama-3.1-8b', tie=True))
    w, w_all = gptq.weight_bytes(config, gptq.GptqSpec(32))
    assert w == w_all
    untied = llama.ModelConfig.from_hf(tiny_config('llama-3.1-8b'))
    w_u, w_all_u = gptq.weight_bytes(untied, gptq.GptqSpec(32))
    assert w_all_u - w_all == 512 * 64 * 2 and w_u - w == 64 * 2
