"""The one backend table and the one model-spec grammar, read by everything that names them."""

import argparse

from physinf_ros import cli
from physinf_ros.bench import cli as bench_cli, params, protocol
from physinf_ros.engine import BACKENDS, MODEL_SPEC_HELP, pick_backend
from physinf_ros.engine.decoders import backends
from physinf_ros.serving import params as decoder_params
import pytest
import torch


def test_every_backend_name_has_one_record():
    assert BACKENDS == ('auto',) + tuple(b.name for b in backends.TABLE)
    assert len(set(BACKENDS)) == len(BACKENDS)
    for record in backends.TABLE:
        assert backends.BY_NAME[record.name] is record
        assert record.without_cuda is None or record.without_cuda in backends.BY_NAME
        assert record.family.checkpoints <= {'float', 'gptq', 'exl2'}


@pytest.mark.parametrize('quantization', [None, 'gptq', 'exl2'])
def test_auto_picks_a_backend_that_takes_the_checkpoint(quantization):
    name = pick_backend('auto', torch.device('cuda'), quantization)
    assert backends.BY_NAME[name].takes(quantization)


def test_families_share_weights_and_graph_pairs_fall_back_within_them():
    for record in backends.TABLE:
        assert record.name in backends.family(record.name)
        if record.without_cuda:
            assert record.without_cuda in backends.family(record.name)
    assert protocol.Plan(modes=('hf', 'eager', 'graphed', 'hf-graphed')).families() == [
        ('hf', 'hf-graphed'), ('eager', 'graphed')]


def test_parameters_and_command_lines_use_the_one_spec_grammar():
    assert decoder_params.PARAMS_BY_NAME['model'].description == MODEL_SPEC_HELP
    assert params.PARAMS_BY_NAME['model'].description == MODEL_SPEC_HELP
    parser = bench_cli.bench_parser()
    assert next(a for a in parser._actions if a.dest == 'model').help == MODEL_SPEC_HELP
    parser = argparse.ArgumentParser()
    cli.add_model_args(parser)
    assert next(a for a in parser._actions if a.dest == 'model').help == MODEL_SPEC_HELP
    for words in ('embedded', '.gguf', 'ORG/NAME', 'synthetic:ARCH', ':gptq'):
        assert words in MODEL_SPEC_HELP
