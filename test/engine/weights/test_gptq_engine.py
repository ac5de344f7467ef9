"""GPTQ models in the engine on CPU: specs, the dequantised eager path, backend choice."""

import json

from physinf_ros.engine import EngineError, load, pick_backend
from physinf_ros.engine.decoders import exllama
from physinf_ros.engine.decoders.agreement import decoder_agreement, TEXT
from physinf_ros.engine.weights.resolve import resolve
import pytest
from tiny_models import tiny_config
import torch
import yaml

QUESTION = 'What is the capital of France?'


@pytest.fixture(scope='module')
def quantised():
    lines = []
    engine = load('embedded:gptq', device='cpu', max_context=1024, log=lines.append)
    return engine, lines


def test_auto_runs_gptq_dequantised_on_cpu_and_says_so(quantised):
    engine, lines = quantised
    assert engine.info.backend == 'eager'
    assert engine.info.model.endswith('GPTQ 4-bit g64')   # 576 wide: 128 does not divide it
    assert any('dequantised' in line for line in lines)
    config = json.loads((engine.source.path / 'config.json').read_text())
    assert config['quantization_config']['group_size'] == 64


def test_quantised_embedded_model_answers_paris(quantised):
    engine, _ = quantised
    generation = engine.generate(engine.encode(QUESTION), 48)
    list(generation)
    assert 'Paris' in generation.text


def test_top1_agreement_with_the_float_model(quantised):
    engine, _ = quantised
    reference = load('embedded', backend='eager', device='cpu', max_context=1024)
    ids = reference.tokenizer.encode(TEXT)
    agreement = decoder_agreement(reference.decoder, engine.decoder, ids)
    print(f'\nembedded model, 4-bit RTN g64 vs float32: teacher-forced top-1 agreement '
          f'{agreement:.3f} over {len(ids)} tokens')
    # Measured 0.58: a 135M model re-quantised from Q4_1 loses much; 0.5 leaves noise room.
    assert agreement >= 0.5


def test_synthetic_gptq_spec_is_written_once(tmp_path, monkeypatch):
    (tmp_path / 'config').mkdir()
    shapes = {'tiny-llama': tiny_config('llama-3.1-8b')}
    (tmp_path / 'config' / 'models.yaml').write_text(yaml.safe_dump(shapes))
    monkeypatch.setenv('PHYSINF_ROS_CONFIG', str(tmp_path / 'config'))
    monkeypatch.setenv('PHYSINF_ROS_CACHE', str(tmp_path / 'cache'))
    lines = []
    source = resolve('synthetic:tiny-llama:gptq', lines.append)
    assert source.path.parent == tmp_path / 'cache' / 'models'
    assert source.name == 'synthetic:tiny-llama, GPTQ 4-bit g32'
    assert len(lines) == 1 and 'writing random 4-bit weights' in lines[0]
    stamp = (source.path / 'model.safetensors').stat().st_mtime_ns
    again = resolve('synthetic:tiny-llama:gptq', lines.append)
    assert again.path == source.path and len(lines) == 1
    assert (source.path / 'model.safetensors').stat().st_mtime_ns == stamp
    assert resolve('synthetic:tiny-llama').hf_config is not None   # bf16 random stays as it was
    engine = load('synthetic:tiny-llama:gptq', device='cpu', max_context=32)
    assert engine.tokenizer is None and engine.info.backend == 'eager'
    assert engine.stop_ids == {2}


def test_quantising_twice_is_refused():
    with pytest.raises(EngineError, match='already quantised'):
        resolve('embedded:gptq:gptq')


def test_exllamav2_on_cpu_says_it_needs_cuda_and_how_to_install():
    with pytest.raises(EngineError) as err:
        load('embedded:gptq', backend='exllamav2', device='cpu')
    message = str(err.value)
    assert 'CUDA GPU' in message and 'pip install --no-deps exllamav2==0.3.2' in message
    assert 'backend eager' in message


def test_missing_exllamav2_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(exllama, 'find_spec', lambda name: None)
    with pytest.raises(EngineError) as err:
        exllama.import_exllamav2(torch.device('cuda'))
    message = str(err.value)
    assert 'needs the exllamav2 package' in message
    for words in ('pip install --no-deps exllamav2==0.3.2', 'tokenizers', 'nvcc'):
        assert words in message


@pytest.mark.parametrize('backend, quantization, words', [
    ('exllamav2', None, 'append :gptq'),
    ('exllamav2-q4', None, 'append :gptq'),
    ('hf', 'gptq', 'float checkpoints only'),
    ('hf-graphed', 'gptq', 'float checkpoints only'),
])
def test_backends_refuse_checkpoints_they_cannot_run(backend, quantization, words):
    with pytest.raises(EngineError, match=words):
        pick_backend(backend, torch.device('cpu'), quantization)


def test_auto_picks_the_4bit_kernels_for_gptq_and_exllamav2_for_exl2_on_cuda():
    cuda = torch.device('cuda')   # a device object only: nothing runs on it
    assert pick_backend('auto', cuda, 'gptq') == 'graphed'
    assert pick_backend('auto', cuda, 'exl2') == 'exllamav2'
    assert pick_backend('auto', cuda, None) == 'graphed'
    assert pick_backend('auto', torch.device('cpu'), 'gptq') == 'eager'
    with pytest.raises(EngineError, match='exl2 checkpoints run only on backend exllamav2'):
        pick_backend('auto', torch.device('cpu'), 'exl2')
