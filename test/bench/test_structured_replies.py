"""benchmarks/structured_replies.py: sampled replies recorded seed by seed, bad names refused."""

import json
import sys
from types import SimpleNamespace

from benchmark_scripts import benchmark_script
from physinf_ros.engine import load
from physinf_ros.structured.examples import robot_schemas
import pytest

structured_replies = benchmark_script('structured_replies')


def test_an_unknown_schema_is_refused_before_the_model_loads(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(structured_replies, 'load', lambda *_, **__: pytest.fail('it loaded'))
    monkeypatch.setattr(sys, 'argv', ['structured_replies.py', '--schemas', 'plan,fly',
                                      '--out', str(tmp_path / 'replies.json')])
    with pytest.raises(SystemExit) as stopped:
        structured_replies.main()
    assert stopped.value.code == 2
    assert "unknown schemas ['fly']" in capsys.readouterr().err


def test_sampled_replies_are_recorded_seed_by_seed(tmp_path):
    engine = load('embedded', backend='eager', device='cpu', dtype='float32', max_context=1024)
    choice = [entry for entry in robot_schemas() if entry['name'] == 'choice']
    out = tmp_path / 'sampled.json'
    structured_replies.sampled(engine, choice,
                               SimpleNamespace(sampled=3, max_new_tokens=40, out=str(out)))
    result = json.loads(out.read_text())
    assert [reply['seed'] for reply in result['replies']] == [0, 1, 2]
    assert all(reply['finish_reason'] == 'eos' and reply['valid'] for reply in result['replies'])
    assert result['max_new_tokens'] == 40 and result['decoding'].endswith('seeds 0 to 2')
