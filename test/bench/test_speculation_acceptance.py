"""benchmarks/speculation_acceptance.py: identical text, acceptance and speed-up, reduced set."""

import json

from benchmark_scripts import benchmark_script
from physinf_ros.bench import results
from physinf_ros.bench.protocol import Cell, describe, Plan, Session
from physinf_ros.engine import load, Sampling
from physinf_ros.engine.base import DecoderInfo
from physinf_ros.measurement.targets import load_targets
import pytest

acceptance = benchmark_script('speculation_acceptance')

PROMPTS = """
- name: rewrite_goto_room
  kind: rewrite
  prompt: >-
    Rewrite this JSON command with the room changed to "garage". Reply with the JSON only.
    {"action": "goto", "room": "kitchen", "speed_mps": 0.4}
- name: names_tools
  kind: names
  prompt: Tools are hammer, pliers, wrench. Which tool tightens a hex bolt? Answer with one name.
"""
# t_verify(k) / t_step of a made-up --verify-k file: k 2 costs 1.2 plain steps, k 4 costs 1.5.
RATIO = {2: 1.2, 4: 1.5}


def verify_file(path):
    """Write a physinf-bench --verify-k results file by the real record code (made-up times)."""
    cell = Cell('graphed', 'graphed', 2048)
    for slot in range(2):
        cell.sessions.append(Session(slot, 50.0, [10.0] * 5, verify_ms={
            k: [10.0 * ratio] * 5 for k, ratio in RATIO.items()}))
    target = load_targets()['h200']
    info = DecoderInfo('graphed', 'cuda:0 (fixture)', 'bfloat16', 'embedded', 2100)
    doc = results.document(describe(Plan(verify_ks=tuple(RATIO))), target,
                           {'packages': {}}, {'spec': 'embedded'},
                           [results.cell_record(cell, None, target, info)], 'complete')
    return results.write(doc, path)[0]


@pytest.fixture(scope='module')
def answered(tmp_path_factory):
    """Answer two prompts on the embedded model on the CPU: off, ngram:2 and ngram:4."""
    folder = tmp_path_factory.mktemp('acceptance')
    (folder / 'prompts.yaml').write_text(PROMPTS)
    out = folder / 'acceptance.json'
    code = acceptance.main(['--prompts', str(folder / 'prompts.yaml'), '--ks', '2,4',
                            '--max-new-tokens', '20', '--verify-costs',
                            str(verify_file(folder / 'verify.json')), '--out', str(out)])
    return code, json.loads(out.read_text())


def test_replies_are_identical_and_counted(answered):
    code, doc = answered
    assert code == 0 and doc['all_identical'] and doc['prompts'] == 2
    assert doc['settings'] == ['ngram:2', 'ngram:4'] and 'CPU timings' in doc['note']
    for reply in doc['replies']:
        assert reply['text'] and reply['off']['verify_steps'] == 0
        assert reply['off']['steps'] == reply['off']['decode_tokens']
        for setting in ('ngram:2', 'ngram:4'):
            run = reply[setting]
            assert run['identical'] and run['decode_tokens'] == reply['off']['decode_tokens']
            # Each step hands out its token and the drafted ones it kept, but a reply that
            # ends inside a verify step's kept tokens never hands out the rest.
            assert run['verify_steps'] <= run['steps'] <= run['decode_tokens'] \
                <= run['steps'] + run['accepted']
            assert len(run['draft_lengths']) == run['verify_steps']
            assert sum(run['draft_lengths']) == run['drafted'] >= run['accepted']
            assert max(run['draft_lengths'], default=0) <= int(setting[-1])


def test_overall_acceptance_and_speedup_from_the_verify_costs(answered):
    _, doc = answered
    assert doc['verify_costs']['ratio'] == {'2': 1.2, '4': 1.5}
    assert 'physinf-bench --verify-k' in doc['effective_speedup_source']
    # The rewrite copies its prompt's JSON: prompt lookup drafts and the model accepts.
    rewrite = doc['replies'][0]['ngram:4']['summary']
    assert rewrite['accepted'] > 0 and rewrite['tokens_per_step'] > 1.0
    for setting, overall in doc['overall'].items():
        runs = [reply[setting] for reply in doc['replies']]
        tokens = sum(r['decode_tokens'] for r in runs)
        assert overall['tokens_per_step'] == pytest.approx(
            tokens / sum(r['steps'] for r in runs))
        assert overall['acceptance'] == pytest.approx(
            sum(r['accepted'] for r in runs) / sum(r['drafted'] for r in runs))
        assert 0 < overall['acceptance'] <= 1
        # Each verify step costs its draft length's ratio (the next measured k), a plain one 1.
        cost = sum(r['steps'] - r['verify_steps'] + sum(
            RATIO[2] if n <= 2 else RATIO[4] for n in r['draft_lengths']) for r in runs)
        assert overall['effective_speedup'] == pytest.approx(tokens / cost)
        assert overall['wall_clock_speedup'] > 0


def test_step_cost_takes_the_next_measured_k_and_refuses_a_longer_draft():
    assert acceptance.step_cost([1, 3, 4], 2, {2: 1.2, 4: 1.5}) == pytest.approx(
        2 + 1.2 + 1.5 + 1.5)
    with pytest.raises(ValueError, match='stop at k 4'):
        acceptance.step_cost([5], 0, {2: 1.2, 4: 1.5})


def test_without_verify_costs_the_speedup_is_the_wall_clock_ratio():
    off = {'decode_tokens': 10, 'steps': 10, 'verify_steps': 0, 'drafted': 0, 'accepted': 0,
           'decode_ms': 100.0, 'identical': True, 'draft_lengths': []}
    spec = dict(off, steps=5, verify_steps=5, drafted=10, accepted=5, decode_ms=80.0,
                draft_lengths=[2] * 5)
    summary = acceptance.summary([spec], [off], None)
    assert summary['tokens_per_step'] == 2.0 and summary['acceptance'] == 0.5
    assert summary['effective_speedup'] == summary['wall_clock_speedup'] == pytest.approx(1.25)
    assert 'cost_in_plain_steps' not in summary
    # Overall, the median prompt's ratio: one slowed by another job does not sway it.
    slowed = dict(spec, decode_ms=800.0)
    overall = acceptance.summary([spec, slowed, spec], [off] * 3, None)
    assert overall['wall_clock_speedup'] == pytest.approx(1.25)
    assert overall['tokens_per_step'] == 2.0 and overall['decode_tokens'] == 30


class _Info:
    model, backend, device, dtype = 'fake', 'eager', 'cpu', 'float32'


class _Engine:
    info = _Info()

    def encode(self, text):
        return [1, 2, 3]


def test_a_reply_that_differs_is_reported_loudly(monkeypatch, tmp_path, capsys):
    def answer(engine, ids, max_new_tokens, speculation):
        tokens = [5, 6] if speculation.on else [5, 7]
        return {'token_ids': tokens, 'text': str(tokens), 'finish_reason': 'stop',
                'decode_tokens': 1, 'steps': 1, 'verify_steps': int(speculation.on),
                'draft_lengths': [1] if speculation.on else [], 'drafted': int(speculation.on),
                'accepted': 0, 'tokens_per_step': 1.0, 'decode_ms': 1.0}
    monkeypatch.setattr(acceptance, 'load', lambda *args, **kwargs: _Engine())
    monkeypatch.setattr(acceptance, 'answer', answer)
    (tmp_path / 'prompts.yaml').write_text(PROMPTS)
    out = tmp_path / 'out.json'
    for near_tie, code in ((False, 1), (True, 0)):
        monkeypatch.setattr(acceptance, 'parting', lambda *args: {
            'token': 1, 'top2_gap': 0.01 if near_tie else 0.5, 'bf16_ulp': 0.0078,
            'near_tie': near_tie})
        assert acceptance.main(['--prompts', str(tmp_path / 'prompts.yaml'), '--ks', '2',
                                '--out', str(out)]) == code
        err = capsys.readouterr().err
        assert ('SPECULATION CHANGED THE TEXT' in err) is not near_tie
        assert 'parts from the one without speculation at token 1' in err
        doc = json.loads(out.read_text())
        assert doc['all_identical'] is False and not doc['replies'][0]['ngram:2']['identical']
        assert doc['near_ties'] == (2 if near_tie else 0)
        assert 'wall-clock' in doc['effective_speedup_source']


def test_a_parting_reply_is_a_near_tie_only_in_16_bit_at_a_close_pair():
    # Where two replies part, the plain step's top-2 gap decides: float32 weights never excuse
    # a difference, and the gap is the plain path's logits at the first differing token.
    engine = load('embedded', backend='eager', device='cpu', dtype='float32', max_context=256)
    ids = engine.encode('Name a fruit.')
    plain = [engine.decoder.prefill(ids, Sampling())]
    plain.append(engine.decoder.step())
    parted = acceptance.parting(engine, ids, plain, plain[:1] + [plain[1] + 1])
    assert parted['token'] == 1 and parted['top2_gap'] >= 0.0 and not parted['near_tie']
    assert acceptance.bf16_ulp(1.5) == 2.0 ** -7 and acceptance.bf16_ulp(-3.0) == 2.0 ** -6
