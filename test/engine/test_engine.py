"""The hf backend on the embedded model: right answers, and the same tokens as generate()."""

from physinf_ros.engine.generate import FINISH_EOS, FINISH_LENGTH
import torch

QUESTION = 'What is the capital of France?'


def test_greedy_reply_names_paris(embedded_engine):
    generation = embedded_engine.generate(embedded_engine.encode(QUESTION), 48)
    pieces = [piece.text for piece in generation]
    assert 'Paris' in generation.text
    assert ''.join(pieces) == generation.text
    assert generation.finish_reason == FINISH_EOS
    # One timed step per token after the first, which comes from the prefill.
    assert len(generation.step_ms) == len(generation.token_ids)
    assert generation.ttft_ms > 0 and all(ms > 0 for ms in generation.step_ms)


def test_greedy_tokens_match_transformers_generate(embedded_engine):
    prompt_ids = embedded_engine.encode('Name three colours of the rainbow.')
    model = embedded_engine.decoder.model
    with torch.inference_mode():
        reference = model.generate(torch.tensor([prompt_ids]), max_new_tokens=32,
                                   do_sample=False)[0, len(prompt_ids):].tolist()
    generation = embedded_engine.generate(prompt_ids, 32)
    list(generation)
    ours = generation.token_ids + ([reference[-1]] if generation.finish_reason == FINISH_EOS
                                   else [])
    assert ours == reference


def test_max_new_tokens_ends_with_length(embedded_engine):
    generation = embedded_engine.generate(embedded_engine.encode('Tell me a long story.'), 5)
    list(generation)
    assert generation.finish_reason == FINISH_LENGTH
    assert len(generation.token_ids) == 5


def test_cancel_stops_within_a_step(embedded_engine):
    steps = []
    generation = embedded_engine.generate(embedded_engine.encode('Tell me a long story.'), 64,
                                          cancelled=lambda: len(steps) >= 3)
    for piece in generation:
        steps.append(piece)
    assert generation.finish_reason == 'cancelled'
    assert len(generation.token_ids) == 3


def test_context_limit_finishes_with_length(embedded_engine):
    from physinf_ros.engine import load
    small = load('embedded', backend='hf', device='cpu', max_context=48)
    prompt_ids = small.encode('Tell me a long story about a robot.')
    generation = small.generate(prompt_ids, 200)
    list(generation)
    assert generation.finish_reason == FINISH_LENGTH
    assert len(prompt_ids) + len(generation.token_ids) == 48
