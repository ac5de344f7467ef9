"""
Qwen3, SmolLM3, Phi-3 and Gemma 3 on our forward (backend eager) against transformers.

Tiny random checkpoints made by transformers from the published configs (config/models.yaml),
shrunk but keeping what makes each family: q/k norms, a layer without RoPE, partial rotary with
longrope crossing its original length inside the test, sliding and global layers with a window
shorter than the prompt.
"""

from decode_checks import assert_same_decode, assert_same_prompt_logits
from physinf_ros.engine import load
import pytest
from tiny_models import FAMILY_CASES, save_tiny
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
