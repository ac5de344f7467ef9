"""Roofline figures against numbers worked out by hand, and the compute-target table."""

import time

from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.weights.source import synthetic_config
from physinf_ros.measurement.roofline import (cost_per_mtok, Dense, Floor, kv_bytes, LiveFloor,
                                              r_floor, t_floor_s, tokens_per_s, weight_bytes_all,
                                              weight_bytes_per_step)
from physinf_ros.measurement.targets import detect, load_targets, match, measure_copy_bandwidth
import pytest
from tiny_models import tiny_config
import torch

BF16 = Dense(2)

# Worked out by hand from the published shapes (bf16, 2 bytes per element).
# Llama-3.1-8B: per layer 4096 x (4096 + 2 x 1024) qkv + 4096 x 4096 o + 3 x 4096 x 14336 mlp
# + 2 x 4096 norms = 218,112,000 params; x 32 layers = 6,979,584,000; embedding and lm_head
# 2 x 128256 x 4096 = 1,050,673,152; final norm 4096: 8,030,261,248 params = 16,060,522,496 B.
# W drops the embedding table but one row: 16,060,522,496 - 2 x (128256 - 1) x 4096.
# K(ctx) = 2 x 32 layers x 8 kv heads x 128 x ctx x 2 B = 131,072 B per token.
# Mistral-7B-v0.3: layer as Llama; vocab 32768: 7,248,023,552 params.
# Qwen2.5-7B: per layer 3584 x (3584 + 2 x 512) + (3584 + 2 x 512) bias + 3584 x 3584
# + 3 x 3584 x 18944 + 2 x 3584 = 233,057,792; x 28 = 6,525,618,176; 2 x 152064 x 3584
# = 1,089,994,752; + 3584 = 7,615,616,512 params. K per token: 2 x 28 x 4 x 128 x 2 = 57,344 B.
BY_HAND = {
    # arch: (W_all, W, K at 2048, K at 16384)
    'llama-3.1-8b': (16_060_522_496, 16_060_522_496 - 2 * 128_255 * 4096,
                     131_072 * 2048, 131_072 * 16384),
    'mistral-7b-v0.3': (14_496_047_104, 14_496_047_104 - 2 * 32_767 * 4096,
                        131_072 * 2048, 131_072 * 16384),
    'qwen2.5-7b': (15_231_233_024, 15_231_233_024 - 2 * 152_063 * 3584,
                   57_344 * 2048, 57_344 * 16384),
}


def config(arch):
    return ModelConfig.from_hf(synthetic_config(arch))


@pytest.mark.parametrize('arch', sorted(BY_HAND))
def test_bytes_of_the_paper_architectures(arch):
    w_all, w, k_2048, k_16384 = BY_HAND[arch]
    c = config(arch)
    assert weight_bytes_all(c, BF16) == w_all
    assert weight_bytes_per_step(c, BF16) == w
    assert kv_bytes(c, 2048, 2) == k_2048
    assert kv_bytes(c, 16384, 2) == k_16384


@pytest.mark.parametrize('arch, parameters, t_floor_ms', [
    ('llama-3.2-1b', 1_235_814_400, 0.529), ('qwen2.5-1.5b', 1_543_714_304, 0.655),
    ('llama-3.2-3b', 3_212_749_824, 1.388)])
def test_robot_size_shapes_have_the_published_parameter_counts(arch, parameters, t_floor_ms):
    # Tied embeddings: the table is read whole once (as the head), so W = W_all = 2 bytes each.
    c = config(arch)
    assert c.tie_word_embeddings
    assert weight_bytes_all(c, BF16) == weight_bytes_per_step(c, BF16) == 2 * parameters
    assert Floor(c, BF16, 2, 4800).t_floor_ms(2048) == pytest.approx(t_floor_ms, abs=5e-4)


def test_llama_8b_matches_the_design_figures():
    c = config('llama-3.1-8b')
    assert round(weight_bytes_all(c, BF16) / 1e9, 2) == 16.06
    assert round(weight_bytes_per_step(c, BF16) / 1e9, 2) == 15.01
    # (15,009,857,536 + 268,435,456) B / 4.8e12 B/s = 3.1830 ms; at 8192: 3.3507 ms.
    floor = Floor(c, BF16, 2, 4800)
    assert floor.t_floor_ms(2048) == pytest.approx(3.18298, abs=1e-5)
    assert floor.t_floor_ms(8192) == pytest.approx(3.35075, abs=1e-5)
    values = floor.at(2048, 9.07)
    assert values['R_floor'] == pytest.approx(3.18298 / 9.07, rel=1e-5)
    assert values['K_bytes'] == 268_435_456


def test_qwen_and_mistral_floor_on_an_h100():
    # Qwen2.5-7B: (14,141,245,440 + 117,440,512) / 3.35e12 = 4.25632 ms.
    assert Floor(config('qwen2.5-7b'), BF16, 2, 3350).t_floor_ms(2048) == pytest.approx(
        4.25632, abs=1e-5)
    # Mistral-7B-v0.3 at 16384: (14,227,619,840 + 2,147,483,648) / 3.35e12 = 4.88809 ms.
    assert Floor(config('mistral-7b-v0.3'), BF16, 2, 3350).t_floor_ms(16384) == pytest.approx(
        4.88809, abs=1e-5)


def test_tied_embedding_counts_once():
    # tiny shape: V 512, H 64, I 160, 2 layers, 4 heads / 2 kv heads of 16: q 64, kv 32.
    c = ModelConfig.from_hf(tiny_config('llama-3.1-8b', tie=True))
    layer = 64 * (64 + 2 * 32) + 64 * 64 + 3 * 64 * 160 + 2 * 64
    params = 2 * layer + 512 * 64 + 64      # one table serves embedding and lm_head
    assert weight_bytes_all(c, Dense(4)) == 4 * params
    assert weight_bytes_per_step(c, Dense(4)) == 4 * params
    untied = ModelConfig.from_hf(tiny_config('llama-3.1-8b', tie=False))
    assert weight_bytes_all(untied, Dense(4)) == 4 * (params + 512 * 64)
    assert weight_bytes_per_step(untied, Dense(4)) == 4 * (params + 64)


def test_a_byte_accounting_plugs_in():
    # The extension point a quantised format uses: price linear matrices differently.
    class HalfLinear:

        def tensor_bytes(self, tensor, rows):
            width = 1 if tensor.kind == 'linear' else 2
            return rows * tensor.cols * width

    c = config('llama-3.1-8b')
    linear = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    assert weight_bytes_all(c, HalfLinear()) == weight_bytes_all(c, BF16) - linear


def test_rates_and_cost():
    assert t_floor_s(3e9, 1e9, 4000) == pytest.approx(1e-3)
    assert r_floor(3.0, 12.0) == 0.25 and r_floor(3.0, 0.0) is None
    assert tokens_per_s(12.5) == 80.0 and tokens_per_s(float('nan')) is None
    # 10 ms per token = 100 tokens/s = 360,000 tokens/h; at 3.6 USD/h: 10 USD per million.
    assert cost_per_mtok(10.0, 3.6) == pytest.approx(10.0)
    assert cost_per_mtok(10.0, None) is None


def test_the_target_table_has_the_datasheet_bandwidths():
    targets = load_targets()
    bandwidth = {key: t.bandwidth_gbs for key, t in targets.items()}
    assert bandwidth == {'h100-sxm5': 3350, 'a100-80gb-sxm4': 2039, 'l40s': 864, 'l4': 300,
                         'h200': 4800, 'jetson-agx-orin': 204.8, 'rtx-4090': 1008}
    for target in targets.values():
        assert target.memory_gb and target.bandwidth_source and not target.measured
        assert target.price_per_hour is None or (target.price_source and target.price_date)


def test_gpus_are_found_by_their_exact_name():
    targets = load_targets()
    assert match('NVIDIA H200', targets).key == 'h200'
    assert match('nvidia h100 80gb hbm3', targets).key == 'h100-sxm5'
    assert match('NVIDIA A100-SXM4-80GB', targets).key == 'a100-80gb-sxm4'
    # Cards of the same family with other memory systems must not borrow these figures.
    assert match('NVIDIA H100 PCIe', targets) is None
    assert match('NVIDIA A100 80GB PCIe', targets) is None
    assert match('Orin', targets) is None


def test_a_price_needs_its_source_and_date():
    entry = ('x:\n  name: X\n  aliases: []\n  bandwidth_gbs: 100\n  bandwidth_source: sheet\n'
             '  price_per_hour: 1.5\n')
    with pytest.raises(ValueError, match='price_source'):
        load_targets(entry)
    dated = load_targets(entry + '  price_source: a price list\n  price_date: 2026-05-01\n')
    assert dated['x'].price_per_hour == 1.5 and dated['x'].price_date == '2026-05-01'


def test_cpu_gets_a_quick_measured_bandwidth():
    start = time.perf_counter()
    target = detect(torch.device('cpu'))
    assert time.perf_counter() - start < 10.0   # generous: a loaded 2-core machine
    assert target.measured and target.bandwidth_gbs > 0
    assert target.bandwidth_source.startswith('measured')
    assert measure_copy_bandwidth(torch.device('cpu'), repeats=2) > 0


def test_an_explicit_target_wins_and_an_unknown_one_is_refused():
    assert detect(torch.device('cpu'), 'l4').bandwidth_gbs == 300
    with pytest.raises(ValueError, match='h200'):
        detect(torch.device('cpu'), 'a-gpu-that-does-not-exist')


def test_live_floor_of_the_embedded_decoder(embedded_engine):
    live = LiveFloor(embedded_engine.decoder)
    # SmolLM2-135M float32, tied: per layer 576 x (576 + 2 x 192) + 576 x 576 + 3 x 576 x 1536
    # + 2 x 576 = 3,540,096; x 30 + 49152 x 576 + 576 = 134,515,008 params x 4 B.
    # K per token: 2 x 30 layers x 3 kv heads x 64 x 4 B = 46,080 B.
    assert live.floor.weight_bytes == 134_515_008 * 4
    assert live.floor.kv_bytes(100) == 2 * 30 * 3 * 64 * 4 * 100
    values = live.values(100, 50.0)
    expected = (134_515_008 * 4 + 46_080 * 100) / (live.target.bandwidth_gbs * 1e9) * 1e3
    assert values['t_floor_ms'] == pytest.approx(expected)
    assert values['R_floor'] == pytest.approx(expected / 50.0)
    assert values['B_peak_source'] == 'measured'
    empty = live.values(0, float('nan'))
    assert empty['t_floor_ms'] != empty['t_floor_ms']   # NaN before any context


def test_gptq_accounting_matches_the_checkpoint_and_what_our_kernels_read(tmp_path):
    from physinf_ros.engine.base import DecoderInfo
    from physinf_ros.engine.decoders.native import NativeDecoder
    from physinf_ros.engine.model.llama import load_hf_dir
    from physinf_ros.engine.weights import gptq
    from physinf_ros.measurement.roofline import decoder_floor, Gptq4
    from tiny_models import save_tiny_gptq
    config = ModelConfig.from_hf(synthetic_config('llama-3.1-8b'))
    # As stored (zeros packed 8 to a word): exactly the checkpoint's own byte count.
    w, w_all = gptq.weight_bytes(config, gptq.GptqSpec(128))
    assert weight_bytes_per_step(config, Gptq4(128, 0.5)) == w == 4_677_189_632
    assert weight_bytes_all(config, Gptq4(128, 0.5)) == w_all
    # Our kernels read no zeros for a symmetric checkpoint: 0.5 B less per group of 128.
    linears = 6_979_584_000 - 32 * 2 * 4096   # the per-layer norms are not linears
    assert w - weight_bytes_per_step(config, Gptq4(128, 0.0)) == linears // 128 * 0.5
    # A loaded 4-bit decoder prices itself so.
    gptq_dir, _ = save_tiny_gptq('llama-3.1-8b', tmp_path)
    cpu = torch.device('cpu')
    decoder = NativeDecoder(load_hf_dir(gptq_dir, cpu, torch.float32, packed=True),
                            DecoderInfo('eager', 'cpu', 'float32', 'tiny', 64), cpu,
                            graphed=False)
    floor = decoder_floor(decoder, 100.0)
    assert floor.accounting == Gptq4(32, 0.0, 4)   # float32 norms, embeddings and head
    tiny = decoder.weights
    read = sum(t.nbytes for layer in tiny.layers
               for t in (layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down))
    norms = 2 * tiny.config.num_layers * tiny.config.hidden_size + tiny.config.hidden_size
    head = tiny.lm_head.numel() + tiny.config.hidden_size   # lm_head and one embedding row
    assert floor.weight_bytes == read + 4 * (norms + head)


def test_exl2_checkpoints_get_no_made_up_floor():
    from types import SimpleNamespace
    from physinf_ros.engine.base import StepFacts
    from physinf_ros.measurement.roofline import decoder_accounting
    decoder = SimpleNamespace(step_facts=lambda: StepFacts(None, 2.0, 2.0, quant_method='exl2'))
    with pytest.raises(ValueError, match='exl2 checkpoint are not modelled'):
        decoder_accounting(decoder)
