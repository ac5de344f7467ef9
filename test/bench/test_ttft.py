"""physinf-bench --ttft: the compute floor's FLOPs and a measured table on a tiny checkpoint."""

import json

from physinf_ros.bench import cli, report, ttft
from physinf_ros.engine import load
from physinf_ros.engine.model.config import ModelConfig
from tiny_models import save_tiny, tiny_config


def test_prefill_flops_count_linears_per_token_lm_head_once_and_causal_attention():
    config = ModelConfig.from_hf(tiny_config('llama-3.1-8b'))
    h, q, kv, i = (config.hidden_size, config.q_size, config.kv_size,
                   config.intermediate_size)
    per_layer = h * (q + 2 * kv) + q * h + 3 * i * h
    assert ttft.linear_params(config) == config.num_layers * per_layer
    head = 2.0 * config.vocab_size * h
    attention_unit = 4.0 * config.num_layers * config.num_heads * config.head_dim
    # One token from scratch attends to itself; 32 after 100 cached see 100 + 1..32 keys each.
    assert ttft.prefill_flops(config, 1) == 2.0 * ttft.linear_params(config) + head \
        + attention_unit
    assert ttft.prefill_flops(config, 32, 100) == 2.0 * ttft.linear_params(config) * 32 + head \
        + attention_unit * (32 * 100 + 32 * 33 / 2)
    assert ttft.floor_ms(1e12, 1000.0) == 1.0 and ttft.floor_ms(1e12, None) is None


def test_measure_reuses_each_history_and_the_cli_writes_the_table(tmp_path):
    folder = str(save_tiny('llama-3.1-8b', tmp_path / 'model'))
    engine = load(folder, backend='eager', device='cpu', max_context=64)
    rows = ttft.measure(engine, [0, 16, 40], turn=8, repeats=2, tflops=1.0)
    assert [row.cached_tokens for row in rows] == [0, 16, 40]
    alone = rows[0].record()   # history 0: a short prompt cold, nothing to reuse
    assert alone['cold_ms'] > 0 and alone['reused_ms'] is None and alone['speedup'] is None
    assert '| 0 | 8 |' in ttft.table([alone])
    record = rows[2].record()
    assert record['history'] == 40 and len(record['cold_ms_all']) == 2
    assert record['cold_fraction_of_peak'] == record['cold_floor_ms'] / record['cold_ms']
    assert record['same_first_token']   # float32: reuse changes nothing
    out = tmp_path / 'ttft.json'
    assert cli.bench_main(['--ttft', '16,24', '--ttft-turn', '4', '--ttft-repeats', '1',
                           '--model', folder, '--device', 'cpu', '--backend', 'eager',
                           '--out', str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc['schema'] == ttft.SCHEMA and [r['history'] for r in doc['rows']] == [16, 24]
    assert doc['command'].startswith('physinf-bench --ttft 16,24')
    assert '| 24 | 4 |' in doc['table'] and doc['peak_tflops'] is None   # no peak on a CPU
    # physinf-report puts the table in its report, beside the step cells of other files.
    rendered = report.render([out], tmp_path / 'report').read_text()
    assert '## Time to first token' in rendered and doc['table'] in rendered
