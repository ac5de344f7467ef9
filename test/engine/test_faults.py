"""Engine faults: an empty reply, broken model files, and out-of-memory at graph capture."""

import json

from known_prompts import EOS_FIRST_PROMPT
from physinf_ros.engine import EngineError, load, Sampling
from physinf_ros.engine.base import DecoderInfo
from physinf_ros.engine.decoders import native
from physinf_ros.engine.generate import FINISH_EOS, Generation
from physinf_ros.engine.weights.resolve import resolve
import pytest
from tiny_models import save_tiny
import torch


class FirstTokenDecoder:
    """A decoder whose prefill chooses a given token; enough to drive the generation loop."""

    info = DecoderInfo('fake', 'cpu', 'float32', 'fake', 64)
    position = 0
    reuse_prefix, cached_tokens = True, 0

    def __init__(self, first):
        self.first = first

    def prefill(self, token_ids, sampling, allowed=None):
        return self.first

    def step(self):
        raise AssertionError('no step may follow an end-of-sequence prefill')


def test_end_of_sequence_first_gives_an_empty_reply_without_steps():
    generation = Generation(FirstTokenDecoder(2), None, frozenset({2}), [5, 6], 16, Sampling())
    pieces = list(generation)
    assert generation.finish_reason == FINISH_EOS
    assert generation.token_ids == [] and generation.text == '' and generation.step_ms == []
    assert [p.text for p in pieces] == ['']
    assert 'first token' in generation.detail


def test_a_real_prompt_ends_at_once_on_the_embedded_model(embedded_engine):
    ids = embedded_engine.encode(EOS_FIRST_PROMPT, use_chat_template=False)
    generation = embedded_engine.generate(ids, 16)
    list(generation)
    assert generation.finish_reason == FINISH_EOS and generation.token_ids == []
    assert generation.text == ''


def test_missing_model_file_names_the_path():
    with pytest.raises(EngineError, match='/nonexistent/x.gguf'):
        resolve('/nonexistent/x.gguf')


@pytest.mark.parametrize('content, words', [
    ('{"model_type": "llama", "hidden_size": ', ['could not be read as JSON']),
    ('[1, 2, 3]', ['JSON list, not an object']),
    (b'\xff\xfe\x00garbage', ['could not be read as JSON']),
])
def test_corrupt_config_names_the_file(tmp_path, content, words):
    config = tmp_path / 'config.json'
    config.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(EngineError) as error:
        resolve(str(tmp_path))
    assert str(config) in str(error.value)
    for word in words:
        assert word in str(error.value)


def greedy_tokens(decoder, prompt=(5, 17, 42, 99), steps=6):
    return [decoder.prefill(list(prompt), Sampling())] + [decoder.step() for _ in range(steps)]


def raise_oom(*args, **kwargs):
    raise torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB (forced)')


def test_capture_out_of_memory_falls_back_to_eager_logic_on_cpu(tmp_path, monkeypatch):
    # No CUDA here: drive NativeDecoder's fallback branch with a capture that fails the way
    # torch fails. The GPU test below forces the same failure inside a real capture.
    engine = load(str(save_tiny('llama-3.1-8b', tmp_path)), backend='eager', device='cpu',
                  max_context=64)
    reference = engine.decoder
    lines = []
    decoder = native.NativeDecoder(reference.weights, reference.info, reference.device,
                                   graphed=False, log=lines.append)
    decoder.graphed = True
    monkeypatch.setattr(decoder, '_graph', raise_oom)
    decoder._warm_up()
    assert not decoder.graphed and decoder.info.backend == 'eager'
    assert 'out of memory' in decoder.info.note and 'eager' in decoder.info.note
    assert any(line.startswith('warning:') and 'out of memory' in line for line in lines)
    assert greedy_tokens(decoder) == greedy_tokens(reference)


@pytest.mark.gpu
def test_capture_out_of_memory_falls_back_to_eager_on_cuda(tmp_path, monkeypatch):
    folder = str(save_tiny('llama-3.1-8b', tmp_path))
    eager = load(folder, backend='eager', device='cuda', max_context=128)
    assert load(folder, backend='graphed', device='cuda', max_context=128).decoder.graphed
    body = native.NativeDecoder._body

    def body_or_oom(self, greedy):
        # Out of memory exactly where a real one strikes: inside the capture, not the warm-up.
        if torch.cuda.is_current_stream_capturing():
            raise_oom()
        return body(self, greedy)

    monkeypatch.setattr(native.NativeDecoder, '_body', body_or_oom)
    lines = []
    engine = load(folder, backend='graphed', device='cuda', max_context=128, log=lines.append)
    info = engine.info
    print(json.dumps({'backend': info.backend, 'note': info.note, 'log': lines}))
    assert engine.decoder.graphed is False and engine.decoder._graphs == {}
    assert info.backend == 'eager' and 'out of memory' in info.note
    assert any(line.startswith('warning:') and 'decoding eager' in line for line in lines)
    assert greedy_tokens(engine.decoder) == greedy_tokens(eager.decoder)
