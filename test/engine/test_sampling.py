"""Sampling never produces NaN: tiny temperatures are greedy, on the host and in the graph."""

from physinf_ros.engine import load, Sampling
from physinf_ros.engine.base import MIN_TEMPERATURE
from physinf_ros.engine.sampling import choose, sample
import pytest
import torch

VOCAB = 1000
TINY = (1e-300, 1e-45)        # 1e-300 is 0 in float32, 1e-45 is subnormal
SMALL = (1e-6, 1e-3)
DRAWS = 200


def make_logits() -> torch.Tensor:
    """Logits near 30, as a model's are (logit / 1e-45 overflowed float32 here)."""
    logits = 30.0 + 3.0 * torch.randn(VOCAB, generator=torch.Generator().manual_seed(3))
    logits[0] = 0.0              # a NaN argmax lands on index 0: keep greedy elsewhere
    best = int(torch.argmax(logits))
    runner_up = (best + 1) % VOCAB or 1
    # A near tie: at temperature 1e-3 the runner-up has probability 1 / (1 + e) = 0.27.
    logits[runner_up] = logits[best] - 1e-3
    return logits


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Return the reference distribution, in float64 with the maximum shifted out."""
    shifted = logits.double() - logits.double().max()
    return torch.softmax(shifted / temperature, dim=-1)


def draws(logits: torch.Tensor, temperature: float, graphed: bool):
    """Tokens drawn with DRAWS seeds, by choose() or by sample() as the captured graph calls it."""
    tokens = []
    for seed in range(DRAWS):
        generator = torch.Generator().manual_seed(seed)
        if graphed:
            # The graph's state: float32 0-d tensors for temperature and top_p, a race buffer.
            race = torch.empty(VOCAB).exponential_(generator=generator)
            token = sample(logits, torch.tensor(temperature, dtype=torch.float32),
                           torch.tensor(1.0), race=race)
        else:
            token = choose(logits, Sampling(temperature, 1.0, seed), generator)
        tokens.append(int(token.reshape(-1)[0]))
    return tokens


@pytest.mark.parametrize('graphed', [False, True], ids=['eager', 'graphed'])
@pytest.mark.parametrize('temperature', TINY + SMALL)
def test_every_draw_has_nonzero_probability(temperature, graphed):
    logits = make_logits()
    reference = probabilities(logits, temperature)
    tokens = draws(logits, temperature, graphed)
    assert all(reference[token] > 0 for token in tokens), sorted(set(tokens))


@pytest.mark.parametrize('graphed', [False, True], ids=['eager', 'graphed'])
@pytest.mark.parametrize('temperature', TINY)
def test_tiny_temperatures_are_greedy(temperature, graphed):
    logits = make_logits()
    greedy = int(torch.argmax(logits))
    assert set(draws(logits, temperature, graphed)) == {greedy}


@pytest.mark.parametrize('graphed', [False, True], ids=['eager', 'graphed'])
def test_small_temperature_still_samples(graphed):
    logits = make_logits()
    best, runner_up = torch.topk(logits, 2).indices.tolist()
    tokens = draws(logits, 1e-3, graphed)
    assert set(tokens) == {best, runner_up}
    assert tokens.count(best) / DRAWS == pytest.approx(1 / (1 + torch.e ** -1), abs=0.1)


@pytest.mark.parametrize('temperature, greedy', [
    (0.0, True), (1e-300, True), (1e-45, True), (float('nan'), True),
    (MIN_TEMPERATURE, False), (1e-30, False), (0.7, False)])
def test_greedy_below_the_smallest_normal_float32(temperature, greedy):
    assert Sampling(temperature).greedy is greedy
    assert MIN_TEMPERATURE == 2.0 ** -126


def test_graph_body_with_zero_temperature_tensor_chooses_the_argmax():
    """The step as the graph runs it, with temperature 1e-300 as float32 holds it: 0."""
    engine = load('embedded', backend='eager', device='cpu', max_context=64)
    decoder = engine.decoder
    decoder.prefill(engine.encode('Name a fruit.'), Sampling(1.0, 1.0, seed=1))
    decoder.temperature.fill_(1e-300)
    assert float(decoder.temperature) == 0.0
    for _ in range(3):
        token = decoder.step()
        logits = decoder.last_logits()
        assert not torch.isnan(logits).any()
        assert token == int(torch.argmax(logits))


@pytest.mark.gpu
@pytest.mark.parametrize('temperature', TINY + SMALL)
def test_captured_sampler_replays_without_nan(temperature):
    """sample() captured in a CUDA graph, temperature set in its tensor before each replay."""
    device = torch.device('cuda')
    logits = make_logits().to(device)
    temp, top_p = torch.ones((), device=device), torch.ones((), device=device)
    race = torch.ones(VOCAB, device=device)
    token = torch.zeros(1, dtype=torch.long, device=device)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):   # warm up outside the capture, as native.py does
        token.copy_(sample(logits, temp, top_p, race=race))
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        token.copy_(sample(logits, temp, top_p, race=race))
    reference = probabilities(logits.cpu(), temperature)
    generator = torch.Generator(device=device).manual_seed(0)
    tokens = []
    for _ in range(DRAWS):
        temp.fill_(temperature)
        race.exponential_(generator=generator)
        graph.replay()
        tokens.append(int(token))
    assert all(reference[t] > 0 for t in tokens), sorted(set(tokens))
    if temperature in TINY:
        assert set(tokens) == {int(torch.argmax(logits))}
