"""
Qwen3, SmolLM3, Phi-3 and Gemma 3 on our forward (backend eager) against transformers.

Tiny random checkpoints made by transformers from the published configs (config/models.yaml),
shrunk but keeping what makes each family: q/k norms, a layer without RoPE, partial rotary with
longrope crossing its original length inside the test, sliding and global layers with a window
shorter than the prompt.
"""

import math

from decode_checks import assert_same_decode, assert_same_prompt_logits
from physinf_ros.engine import EngineError, load, pick_backend, Sampling
from physinf_ros.engine.decoders.native import PREFILL_ROWS
from physinf_ros.engine.model.config import ModelConfig, tensor_inventory
from physinf_ros.engine.weights.source import synthetic_config
import pytest
from tiny_models import FAMILY_CASES, save_tiny, tiny_config
import torch


@pytest.fixture(scope='module', params=sorted(FAMILY_CASES))
def tiny(request, tmp_path_factory):
    arch, tie, sizes = FAMILY_CASES[request.param]
    folder = str(save_tiny(arch, tmp_path_factory.mktemp(request.param), tie=tie, sizes=sizes))
    reference = load(folder, backend='hf', device='cpu', max_context=256)
    ours = load(folder, backend='eager', device='cpu', max_context=256)
    return request.param, reference, ours


def test_greedy_decode_matches_transformers(tiny):
    name, reference, ours = tiny
    assert ours.info.backend == 'eager'
    prompt = torch.randint(3, 512, (11,), generator=torch.Generator().manual_seed(1)).tolist()
    tokens = assert_same_decode(reference, ours, prompt)
    assert len(set(tokens)) > 3, 'a degenerate model would make this comparison weak'


def test_prompt_logits_match_transformers(tiny):
    # 40 tokens: past the tiny Gemma 3 window and Phi-3's original length (longrope's long
    # factors for the whole prompt).
    name, reference, ours = tiny
    ids = torch.randint(3, 512, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    assert_same_prompt_logits(reference, ours, ids)


@pytest.fixture(scope='module')
def olmo2_dir(tmp_path_factory):
    # A family our engine does not decode (OLMo 2), tiny and random.
    from transformers import AutoModelForCausalLM, Olmo2Config
    folder = tmp_path_factory.mktemp('olmo2')
    config = Olmo2Config(vocab_size=128, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, pad_token_id=0,
                         bos_token_id=1, eos_token_id=2)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


def test_auto_runs_an_unsupported_family_on_hf_with_one_line_saying_why(olmo2_dir):
    lines = []
    engine = load(olmo2_dir, device='cpu', max_context=64, log=lines.append)
    assert engine.info.backend == 'hf'
    why = [line for line in lines if line.startswith('auto:')]
    assert len(why) == 1 and "'olmo2'" in why[0] and 'backend hf' in why[0]
    assert engine.decoder.prefill([3, 4, 5], Sampling()) in range(128)


@pytest.mark.parametrize('backend', ['eager', 'graphed'])
def test_our_backends_asked_by_name_refuse_an_unsupported_family(olmo2_dir, backend):
    with pytest.raises(EngineError, match=f'backend {backend} cannot run this model: '
                                          'model_type .olmo2.'):
        load(olmo2_dir, backend=backend, device='cpu', max_context=64)


def test_auto_picks_exllamav2_for_a_gptq_checkpoint_of_an_unsupported_family():
    hf = {'model_type': 'olmo2', 'quantization_config': {'quant_method': 'gptq'}}
    lines = []
    assert pick_backend('auto', torch.device('cuda'), 'gptq', lines.append, hf) == 'exllamav2'
    assert len(lines) == 1
    with pytest.raises(EngineError, match='no backend here runs this gptq model'):
        pick_backend('auto', torch.device('cpu'), 'gptq', hf_config=hf)


@pytest.mark.parametrize('name', sorted(FAMILY_CASES))
def test_auto_picks_our_engine_for_each_family(name):
    arch, tie, sizes = FAMILY_CASES[name]
    lines = []
    config = tiny_config(arch, tie, sizes)
    assert pick_backend('auto', torch.device('cpu'), None, lines.append, config) == 'eager'
    assert pick_backend('auto', torch.device('cuda'), None, lines.append, config) == 'graphed'
    assert not lines


# Parameter counts of the published models, from the shapes in config/models.yaml: Qwen3's
# model cards give totals and non-embedding counts (0.6B/0.44B, 1.7B/1.4B, 4.0B/3.6B,
# 8.2B/6.95B); Gemma 3 270M and 1B are 268,098,176 and 999,885,952 parameters, 4B's language
# model 3.88B; SmolLM3 3.08B; Phi-4-mini 3.84B.
@pytest.mark.parametrize('arch, total, non_embedding', [
    ('qwen3-0.6b', (0.6, 1), (0.44, 2)), ('qwen3-1.7b', (1.7, 1), (1.4, 1)),
    ('qwen3-4b', (4.0, 1), (3.6, 1)), ('qwen3-8b', (8.2, 1), (6.95, 2)),
    ('smollm3-3b', (3.08, 2), None), ('phi-4-mini', (3.84, 2), None),
    ('gemma-3-270m', (0.268098176, 9), None), ('gemma-3-1b', (0.999885952, 9), None),
    ('gemma-3-4b', (3.88, 2), None)])
def test_synthetic_shapes_are_the_published_ones(arch, total, non_embedding):
    # (billions, decimals as published)
    config = ModelConfig.from_hf(synthetic_config(arch))
    sizes = {name: math.prod(shape) for name, shape in tensor_inventory(config)}
    embedding = sum(n for name, n in sizes.items() if 'embed' in name or 'lm_head' in name)
    assert round(sum(sizes.values()) / 1e9, total[1]) == total[0]
    if non_embedding is not None:
        assert round((sum(sizes.values()) - embedding) / 1e9, non_embedding[1]) == \
            non_embedding[0]


def test_synthetic_gemma_3_270m_decodes_like_transformers():
    # The smallest published shape, random weights (synthetic:): head size 256, one kv head,
    # a 262k vocabulary, five sliding layers to a global one.
    reference = load('synthetic:gemma-3-270m', backend='hf', device='cpu', max_context=64)
    ours = load('synthetic:gemma-3-270m', backend='eager', device='cpu', max_context=64)
    assert_same_decode(reference, ours, [2, 1000, 2000, 3000, 4000, 5000], steps=4)


def test_the_language_model_of_a_multimodal_gemma3_checkpoint(tmp_path):
    # `gemma3` (Gemma 3 4B and up) keeps its language model under model.language_model. and
    # its config in text_config: the same weights as a gemma3_text checkpoint decode alike.
    import json
    from safetensors.torch import load_file, save_file
    arch, tie, sizes = FAMILY_CASES['gemma3']
    text = save_tiny(arch, tmp_path / 'text', tie=tie, sizes=sizes)
    multimodal = tmp_path / 'multimodal'
    multimodal.mkdir()
    state = load_file(str(text / 'model.safetensors'))
    state = {name.replace('model.', 'model.language_model.', 1): t for name, t in state.items()}
    state['model.vision_tower.patch_embedding.weight'] = torch.zeros(4, 4)
    save_file(state, str(multimodal / 'model.safetensors'))
    text_config = json.loads((text / 'config.json').read_text())
    (multimodal / 'config.json').write_text(json.dumps(
        {'model_type': 'gemma3', 'text_config': text_config, 'tie_word_embeddings': tie}))
    ids = torch.randint(3, 512, (20,), generator=torch.Generator().manual_seed(3)).tolist()
    logits = [load(str(folder), backend='eager', device='cpu', max_context=64
                   ).decoder.prompt_logits(ids) for folder in (text, multimodal)]
    assert torch.equal(logits[0], logits[1])


@pytest.mark.parametrize('arch', ['qwen3-0.6b', 'qwen3-8b', 'smollm3-3b', 'phi-4-mini',
                                  'gemma-3-270m', 'gemma-3-4b'])
def test_our_reading_of_each_published_config_is_transformers(arch):
    # The layer kinds, head size, rotary part and attention scale as transformers' config
    # classes work them out from the same config.json keys.
    from transformers import AutoConfig
    hf = synthetic_config(arch)
    keys = {k: v for k, v in hf.items() if k != 'model_type'}
    theirs = AutoConfig.for_model(hf['model_type'], **keys)
    ours = ModelConfig.from_hf(hf)
    assert ours.head_dim == (getattr(theirs, 'head_dim', None)
                             or theirs.hidden_size // theirs.num_attention_heads)
    kinds = getattr(theirs, 'layer_types', None) or ['full_attention'] * ours.num_layers
    assert ours.sliding_layers == tuple(i for i, kind in enumerate(kinds)
                                        if kind == 'sliding_attention')
    assert ours.nope_layers == tuple(i for i, use in enumerate(
        getattr(theirs, 'no_rope_layers', None) or [1] * ours.num_layers) if not use)
    rope = theirs.rope_parameters
    full = rope.get('full_attention', rope)
    assert ours.rope_theta == full['rope_theta']
    assert ours.rotary_dim == int(ours.head_dim * full.get('partial_rotary_factor', 1.0))
    assert ours.attention_scale == pytest.approx(
        getattr(theirs, 'query_pre_attn_scalar', ours.head_dim) ** -0.5)
    if 'sliding_attention' in rope:
        assert ours.local_rope_theta == rope['sliding_attention']['rope_theta']


def test_the_roofline_counts_a_sliding_layers_window_of_keys():
    from physinf_ros.measurement.roofline import kv_bytes
    config = ModelConfig.from_hf(synthetic_config('gemma-3-1b'))   # 22 sliding layers of 26
    assert len(config.sliding_layers) == 22 and config.sliding_window == 512
    per_key = 2 * config.num_kv_heads * config.head_dim * 2   # keys and values, bf16
    assert kv_bytes(config, 2048, 2) == per_key * (4 * 2048 + 22 * 512)
    assert kv_bytes(config, 300, 2) == per_key * 26 * 300


@pytest.mark.parametrize('key, value', [('final_logit_softcapping', 30.0),
                                        ('attn_logit_softcapping', 50.0),
                                        ('use_bidirectional_attention', True)])
def test_gemma_settings_our_forward_lacks_are_refused(key, value):
    hf = dict(synthetic_config('gemma-3-1b'), **{key: value})
    with pytest.raises(ValueError, match=key):
        ModelConfig.from_hf(hf)


def test_a_head_size_our_kernels_lack_is_refused_and_auto_runs_it_on_hf():
    # Phi-3.5-mini's shape: 3072 wide, 32 heads of 96; the kernels' tiles take powers of two.
    hf = dict(synthetic_config('phi-4-mini'), num_attention_heads=32, num_key_value_heads=32,
              hidden_size=3072, head_dim=96)
    with pytest.raises(ValueError, match='head size 96 is not supported'):
        ModelConfig.from_hf(hf)
    lines = []
    assert pick_backend('auto', torch.device('cuda'), None, lines.append, hf) == 'hf'
    assert len(lines) == 1 and 'head size 96' in lines[0]
    with pytest.raises(EngineError, match='head size 96'):
        pick_backend('graphed', torch.device('cuda'), None, hf_config=hf)


def test_a_short_prompt_over_rows_gives_the_op_by_op_prefills_choice(tiny):
    # decoder.prefill_rows (graphed CUDA's default, here on the CPU un-captured): a prompt of up
    # to 128 new tokens runs as one forward over padded rows, cold and after a kept prefix. The
    # same float32 weights give the op-by-op prefill's logits to float32 sums. (Phi-3, whose
    # prompt table follows the prompt's length, keeps the op-by-op prefill.)
    name, _, ours = tiny
    decoder = ours.decoder
    prompt = torch.randint(3, 512, (40,), generator=torch.Generator().manual_seed(4)).tolist()
    follow_up = prompt + [7, 8, 9, 10, 11]
    logits = {}
    for rows in ((), PREFILL_ROWS):
        decoder.prefill_rows = rows
        for label, ids, reuse in (('cold', prompt, False), ('turn', follow_up, True)):
            decoder.reuse_prefix = reuse
            decoder.prefill(ids, Sampling())
            logits[rows, label] = decoder.last_logits().clone()
            # The follow-up keeps the prompt's cache where the family reuses prefixes.
            assert decoder.cached_tokens == (len(prompt) if reuse and decoder.family.REUSES_PREFIX
                                             else 0), label
            decoder.step()   # a step after a rows prefill reads the cache it filled
    decoder.prefill_rows, decoder.reuse_prefix = (), True
    for label in ('cold', 'turn'):
        ref, out = logits[(), label], logits[PREFILL_ROWS, label]
        assert (out - ref).norm() <= 1e-4 * ref.norm(), (name, label)
