"""Our forward (backend eager) against the transformers reference on the same weights."""

from decode_checks import assert_same_decode
from physinf_ros.engine import load, Sampling
from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.weights.source import synthetic_config
import pytest
from tiny_models import ARCHS, save_tiny
import torch


@pytest.mark.parametrize('arch, tie', [(a, False) for a in ARCHS] + [('llama-3.1-8b', True)])
def test_tiny_checkpoints_decode_like_transformers(tmp_path, arch, tie):
    folder = str(save_tiny(arch, tmp_path, tie=tie))
    reference = load(folder, backend='hf', device='cpu', max_context=256)
    ours = load(folder, backend='eager', device='cpu', max_context=256)
    assert ours.info.backend == 'eager'
    prompt = torch.randint(3, 512, (11,), generator=torch.Generator().manual_seed(1)).tolist()
    tokens = assert_same_decode(reference, ours, prompt)
    assert len(set(tokens)) > 3, 'a degenerate model would make this comparison weak'


def test_embedded_model_decodes_like_transformers(embedded_engine):
    ours = load('embedded', backend='eager', device='cpu', max_context=1024)
    prompt = ours.encode('Describe a robot arm in two sentences.')
    assert_same_decode(embedded_engine, ours, prompt)


def test_graphed_falls_back_to_eager_on_cpu():
    lines = []
    engine = load('embedded', backend='graphed', device='cpu', max_context=64, log=lines.append)
    assert engine.info.backend == 'eager'
    assert any('needs CUDA' in line and 'eager' in line for line in lines)


def test_auto_picks_eager_on_cpu():
    assert load('embedded', device='cpu', max_context=64).info.backend == 'eager'


@pytest.mark.parametrize('arch, params', [
    ('llama-3.1-8b', 8_030_261_248), ('mistral-7b-v0.3', 7_248_023_552),
    ('qwen2.5-7b', 7_615_616_512)])
def test_synthetic_shapes_are_the_published_ones(arch, params):
    c = ModelConfig.from_hf(synthetic_config(arch))
    layer = (c.hidden_size * (c.q_size + 2 * c.kv_size) + c.q_size * c.hidden_size
             + 3 * c.hidden_size * c.intermediate_size + 2 * c.hidden_size
             + (c.q_size + 2 * c.kv_size if c.qkv_bias else 0))
    total = (c.num_layers * layer + c.vocab_size * c.hidden_size * (1 if c.tie_word_embeddings
                                                                    else 2) + c.hidden_size)
    assert total == params


@pytest.mark.parametrize('backend', ['hf', 'eager'])
def test_seeded_sampling_repeats_and_differs_from_greedy(backend):
    engine = load('embedded', backend=backend, device='cpu', max_context=128)
    prompt = engine.encode('Write a sentence about robots.')

    def run(sampling):
        generation = engine.generate(prompt, 10, sampling)
        list(generation)
        return generation.token_ids

    hot = Sampling(temperature=1.3, top_p=0.95, seed=5)
    assert run(hot) == run(hot)
    assert run(hot) != run(Sampling())
