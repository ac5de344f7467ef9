"""physinf-bench --verify-k: verify steps per k beside the plain step, a draft model's step."""

import csv

from physinf_ros.bench import report, results
from physinf_ros.bench.cli import bench_main
from physinf_ros.bench.protocol import Plan, verify_session
from physinf_ros.engine import EngineError
import pytest
from tiny_models import save_tiny
import torch

KS = (1, 2, 4)


@pytest.fixture(scope='module')
def verified(tmp_path_factory):
    """Run on a tiny checkpoint on the CPU: verify k 1, 2, 4, the same checkpoint drafting."""
    folder = tmp_path_factory.mktemp('verify')
    model = str(save_tiny('llama-3.1-8b', folder / 'model'))
    out = folder / 'verify.json'
    code = bench_main(['--model', model, '--device', 'cpu', '--modes', 'eager,graphed',
                       '--contexts', '16,24', '--steps', '4', '--warmup', '1', '--sessions', '2',
                       '--verify-k', ','.join(map(str, KS)), '--draft', model,
                       '--out', str(out)])
    assert code == 0
    return out


def test_each_cell_has_its_verify_steps_next_to_the_plain_step(verified):
    doc = results.read(verified)
    assert doc['protocol']['verify_ks'] == list(KS)
    assert len(doc['cells']) == 4
    for cell in doc['cells']:
        rows = cell['verify']
        assert [row['k'] for row in rows] == [0, *KS]
        assert [row['rows'] for row in rows] == [1, 2, 3, 5]
        # k 0 is the protocol's own plain step: the ratio's denominator, 1 by definition.
        assert rows[0]['ms_p50'] == cell['step_ms_p50'] and rows[0]['ratio'] == 1.0
        assert rows[0]['ms_p99'] == cell['step_ms_p99']
        for row in rows[1:]:
            samples = [ms for session in cell['verify_ms'][str(row['k'])] for ms in session]
            assert len(samples) == 2 * 4 and min(samples) > 0   # sessions x measured steps
            assert 0 < row['ms_p50'] <= row['ms_p99'] <= max(samples)
            assert row['ratio'] == pytest.approx(row['ms_p50'] / cell['step_ms_p50'])
            assert row['ratio'] > 0 and row['break_even_tokens_per_step'] == row['ratio']
            paired = (row['ms_p50'] + row['k'] * cell['draft_step_ms_p50']) / cell['step_ms_p50']
            assert row['draft_break_even_tokens_per_step'] == pytest.approx(paired)
            assert row['draft_break_even_tokens_per_step'] > row['ratio']
            assert cell[f'verify_ratio_k{row["k"]}'] == row['ratio']
        assert [len(s) for s in cell['draft_step_ms']] == [4, 4]
        assert cell['draft_model'].endswith('model')


def test_csv_and_report_carry_the_verify_steps(verified, tmp_path):
    with open(verified.with_suffix('.csv')) as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) == set(results.CSV_FIELDS)
    for k in KS:
        assert float(rows[0][f'verify_ratio_k{k}']) > 0
        assert float(rows[0][f'draft_break_even_k{k}']) > float(rows[0][f'verify_ratio_k{k}'])
    assert rows[0]['verify_ratio_k8'] == ''   # not measured
    assert report.main([str(verified), '--out', str(tmp_path)]) == 0
    text = (tmp_path / 'report.md').read_text()
    section = text.split('## Speculative decoding: verify steps')[1].split('##')[0]
    assert section.count('| eager |') == 2 * 4 and section.count('| graphed (eager) |') == 2 * 4


def test_a_plan_checks_its_verify_ks_and_makes_room_for_them():
    assert Plan(verify_ks=(1, 8)).problems() == []
    assert Plan(contexts=(32,), steps=3, warmup=1, verify_ks=(2, 8)).max_context(32) == \
        32 + 1 + 3 + 1 + 8 + 2
    for bad in ((0,), (9,), (2, 2)):
        assert 'verify k must be' in Plan(verify_ks=bad).problems()[0]
    assert 'give verify k' in Plan(draft='embedded').problems()[0]


class _Info:
    backend = 'fake'


class _VerifyingDecoder:
    """Records steps, verifies and rewinds; its position moves as a decoder's does."""

    info = _Info()

    def __init__(self):
        self.position, self.calls = 40, []

    def step(self):
        self.position += 1
        self.calls.append('step')
        return 7

    def verify(self, draft):
        self.position += len(draft) + 1
        self.calls.append(('verify', len(draft)))
        return torch.zeros(len(draft) + 1, 16)

    def rewind(self, length, token):
        self.position = length
        self.calls.append(('rewind', length, token))


def test_each_verify_is_rewound_to_the_same_position_and_warmed_up_at_least_once():
    decoder = _VerifyingDecoder()
    timed = verify_session(decoder, Plan(steps=3, warmup=0, verify_ks=(2, 5)), 100, 0)
    assert sorted(timed) == [2, 5] and [len(timed[k]) for k in (2, 5)] == [3, 3]
    assert decoder.calls[0] == 'step'   # the pending token the verifies feed first
    verifies = decoder.calls[1:]
    # One warm-up (a graph's capture) then three timed, each rewound to position 41, token 7.
    assert verifies == [c for k in (2, 5) for _ in range(4)
                        for c in (('verify', k), ('rewind', 41, 7))]


def test_a_decoder_that_cannot_verify_is_refused():
    class Plain:
        info = _Info()
    with pytest.raises(EngineError, match='cannot verify drafts'):
        verify_session(Plain(), Plan(verify_ks=(2,)), 100, 0)


@pytest.mark.parametrize('args, message', [
    (['--verify-k', '2,x'], '--verify-k must be comma-separated integers'),
    (['--verify-k', '0,4'], 'verify k must be distinct drafted-token counts from 1 to 8'),
    (['--verify-k', '16'], 'verify k must be'),
    (['--draft', 'embedded'], 'give verify k'),
])
def test_bad_verify_arguments_are_clear_errors(args, message, capsys):
    with pytest.raises(SystemExit) as error:
        bench_main(args + ['--device', 'cpu'])
    assert error.value.code == 2 and message in capsys.readouterr().err


def test_a_draft_of_another_vocabulary_is_refused(tmp_path, capsys):
    model = str(save_tiny('llama-3.1-8b', tmp_path / 'model'))
    other = str(save_tiny('llama-3.1-8b', tmp_path / 'other', sizes={'vocab_size': 256}))
    code = bench_main(['--model', model, '--device', 'cpu', '--modes', 'eager', '--contexts',
                       '8', '--steps', '1', '--sessions', '1', '--verify-k', '2', '--draft',
                       other, '--out', str(tmp_path / 'x.json')])
    assert code == 2 and not (tmp_path / 'x.json').exists()
    assert 'has a vocabulary of 256 tokens' in capsys.readouterr().err
