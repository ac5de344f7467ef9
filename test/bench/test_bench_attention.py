"""physinf-attention on the CPU: outputs against float32, the JSON's cells and refusals."""

from contextlib import redirect_stdout
import io
import json

from kernel_device import DEVICE
from physinf_ros.bench import attention
from physinf_ros.bench.matrix import ATTENTION_SCHEMA
from physinf_ros.engine.decoders.stacks import ATTENTIONS
from physinf_ros.engine.kernels.config import KernelConfig
import pytest
import torch

CONTEXTS = (64, 128)
CPU = torch.device('cpu')
# Backends the CPU runs: the attention stacks that need neither CUDA nor a package.
CPU_BACKENDS = [a.name for a in ATTENTIONS if not a.needs_cuda and a.package is None]


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    """Run the CLI once on the CPU, every backend; return (its JSON document, its stdout)."""
    out = tmp_path_factory.mktemp('attention') / 'attention.json'
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert attention.main(['--contexts', ','.join(map(str, CONTEXTS)), '--calls', '3',
                               '--replays', '4', '--device', 'cpu', '--out', str(out)]) == 0
    return json.loads(out.read_text()), printed.getvalue()


def cells_of(doc, backend):
    return [c for c in doc['cells'] if c['backend'] == backend]


def unavailable_of(doc, backend):
    return [u for u in doc['unavailable'] if u['backend'] == backend]


def test_document_says_what_ran_and_where(run):
    doc, _ = run
    assert doc['schema'] == ATTENTION_SCHEMA and doc['schema_version'] == 1
    assert doc['created_utc'] and doc['method'] and doc['machine']['cpu_count']
    assert doc['device'] == 'cpu' and doc['graphed'] is False
    assert doc['shape'] == {'model': 'llama-3.1-8b', 'batch': 1, 'query_tokens': 1,
                            'num_heads': 32, 'num_kv_heads': 8, 'head_dim': 128, 'layers': 32,
                            'dtype': 'bfloat16'}
    assert doc['settings']['contexts'] == list(CONTEXTS)


def test_cpu_backends_match_float32_in_a_cell_per_context(run):
    doc, _ = run
    for name in CPU_BACKENDS:
        if name == 'flex_attention' and unavailable_of(doc, name):
            # Compiling FlexAttention for the CPU may fail where inductor has no toolchain.
            assert all(u['reason'] for u in unavailable_of(doc, name))
            continue
        cells = cells_of(doc, name)
        assert [c['ctx'] for c in cells] == list(CONTEXTS), name
        for cell in cells:
            assert 0 <= cell['max_abs_err'] <= cell['tolerance'], cell
            assert cell['graphed'] is False
            assert cell['calls_per_graph'] == 3 and cell['replays'] == 4
            assert len(cell['us_per_layer']) == 4
    assert {c['backend'] for c in doc['cells']} <= set(CPU_BACKENDS)


def test_sdpa_uses_enable_gqa_where_torch_has_it(run):
    doc, _ = run
    assert all(c['gqa'] == 'enable_gqa=True' for c in cells_of(doc, 'sdpa'))


def test_percentiles_are_ordered(run):
    doc, _ = run
    assert doc['cells']
    for c in doc['cells']:
        assert 0 < c['us_per_layer_p10'] <= c['us_per_layer_p50'] <= c['us_per_layer_p90']
        assert min(c['us_per_layer']) <= c['us_per_layer_p10']
        assert c['us_per_layer_p90'] <= max(c['us_per_layer'])


def test_cuda_only_and_missing_packages_are_unavailable_with_the_reason(run):
    doc, _ = run
    needs = {a.name: [a.package or 'CUDA', 'CUDA'] for a in ATTENTIONS
             if a.needs_cuda or a.package}
    needs.update(flashinfer=['flashinfer', 'CUDA'], physinf=['needs CUDA (Triton kernels)'])
    for name, words in needs.items():
        (entry,) = unavailable_of(doc, name)
        assert 'ctx' not in entry and not cells_of(doc, name)
        assert any(word in entry['reason'] for word in words), entry


def test_table_lists_every_backend(run):
    doc, printed = run
    assert 'cpu (no graphs' in printed
    for name in attention.BACKEND_NAMES:
        assert name in printed


def test_unknown_backend_is_refused_with_the_valid_names(capsys):
    with pytest.raises(SystemExit) as exit_info:
        attention.main(['--backends', 'sdpa,flash_attention_9', '--device', 'cpu'])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert 'flash_attention_9' in err
    for name in attention.BACKEND_NAMES:
        assert name in err


def test_bad_contexts_are_refused(capsys):
    with pytest.raises(SystemExit):
        attention.main(['--contexts', '64,zero', '--device', 'cpu'])
    assert '--contexts' in capsys.readouterr().err


def test_a_wrong_backend_is_recorded_not_timed():
    def off_by_a_scale(inputs):
        sdpa = next(b for b in attention.BACKENDS if b.name == 'sdpa').prepare(inputs)
        return attention.Prepared(lambda layer: sdpa.call(layer) * 1.5, sdpa.expected, {})
    wrong = attention.Backend('wrong', off_by_a_scale)
    run = attention.measure([wrong], [64], calls=2, replays=2, device=CPU)
    assert run.cells == []
    (entry,) = run.unavailable
    assert entry['backend'] == 'wrong' and entry['ctx'] == 64
    assert entry['reason'].startswith('wrong result')
    assert entry['max_abs_err'] > entry['tolerance']


def test_a_failing_backend_is_recorded_with_the_exception():
    def broken(inputs):
        raise RuntimeError('no kernel for this shape')
    run = attention.measure([attention.Backend('broken', broken)], [64], calls=2, replays=2,
                            device=CPU)
    assert run.cells == []
    assert run.unavailable == [{'backend': 'broken', 'ctx': 64,
                                'reason': 'RuntimeError: no kernel for this shape'}]


def test_sdpa_without_enable_gqa_repeats_the_kv_heads(monkeypatch):
    monkeypatch.setattr(attention, 'SDPA_GQA', False)
    sdpa = [b for b in attention.BACKENDS if b.name == 'sdpa']
    (cell,) = attention.measure(sdpa, [64], calls=2, replays=2, device=CPU).cells
    assert 'repeat_kv' in cell['gqa']
    assert cell['max_abs_err'] <= cell['tolerance']


def test_physinf_kernel_matches_its_float32_reference():
    # On a GPU natively; elsewhere in Triton's interpreter (conftest sets TRITON_INTERPRET).
    inputs = attention.make_inputs(attention.model_config(), 64, DEVICE, seed=0)
    prepared = attention.physinf_kernel(inputs, KernelConfig())
    out = prepared.call(0).float().view(prepared.expected.shape)
    scale = prepared.expected.abs().max()
    assert (out - prepared.expected).abs().max() <= attention.TOLERANCE * scale
    # The reference rotated q and k: unrotated attention over the same cache is far from it.
    assert (out - inputs.expected).abs().max() > 4 * attention.TOLERANCE * scale


@pytest.mark.gpu
def test_graphed_on_cuda(tmp_path):
    out = tmp_path / 'attention.json'
    assert attention.main(['--contexts', '256', '--calls', '10', '--replays', '3',
                           '--backends', 'sdpa,eager,physinf', '--device', 'cuda',
                           '--out', str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc['graphed'] is True
    assert [c['backend'] for c in doc['cells']] == ['sdpa', 'eager', 'physinf']
    for cell in doc['cells']:
        assert cell['graphed'] is True and cell['max_abs_err'] <= cell['tolerance']
        assert cell['us_per_layer_p10'] <= cell['us_per_layer_p50'] <= cell['us_per_layer_p90']
