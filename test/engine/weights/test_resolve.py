"""Model specs: each kind resolves, and each failure says what to do."""

import json
import os

from physinf_ros.engine import EngineError
from physinf_ros.engine.weights.resolve import resolve
from physinf_ros.engine.weights.source import cache_root
import pytest


def test_embedded_resolves_to_a_cached_conversion():
    source = resolve('embedded')
    assert (source.path / 'config.json').is_file()
    assert (source.path / 'model.safetensors').is_file()
    assert (source.path / 'tokenizer.json').is_file()
    assert str(source.path).startswith(str(cache_root()))
    config = json.loads((source.path / 'config.json').read_text())
    assert config['model_type'] == 'llama' and 'quantization_config' not in config
    # The second resolve finds the conversion instead of redoing it.
    assert resolve('embedded').path == source.path


def test_model_directory_resolves_to_itself():
    source = resolve('embedded')
    assert resolve(str(source.path)).path == source.path


@pytest.mark.parametrize('spec, words', [
    ('/nonexistent/model.gguf', ['GGUF file not found', '/nonexistent/model.gguf']),
    ('./no/such/dir', ['not found', 'hub id']),
])
def test_missing_models_name_the_path(spec, words):
    with pytest.raises(EngineError) as err:
        resolve(spec)
    for word in words:
        assert word in str(err.value)


def test_directory_without_config_is_refused(tmp_path):
    with pytest.raises(EngineError, match='no config.json'):
        resolve(str(tmp_path))


def test_hub_id_comes_from_the_local_cache(tmp_path, monkeypatch):
    # Lay out a hub cache entry the way huggingface_hub does, pointing at the embedded files.
    embedded = resolve('embedded').path
    repo = tmp_path / 'models--acme--tiny-robot'
    snapshot = repo / 'snapshots' / ('0' * 40)
    snapshot.mkdir(parents=True)
    (repo / 'refs').mkdir()
    (repo / 'refs' / 'main').write_text('0' * 40)
    for name in os.listdir(embedded):
        (snapshot / name).symlink_to(embedded / name)
    monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path))
    import huggingface_hub.constants as constants
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path))
    assert resolve('acme/tiny-robot').path == snapshot


def test_offline_missing_hub_id_is_a_clear_error(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', True)
    with pytest.raises(EngineError) as err:
        resolve('acme/not-downloaded')
    message = str(err.value)
    assert 'acme/not-downloaded' in message and 'HF_HUB_OFFLINE' in message
    assert 'hf download acme/not-downloaded' in message
