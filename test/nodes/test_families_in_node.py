"""decoder_node serving each family of issue 53 on our engine, with a real tokenizer."""

import json
import os
import shutil

from physinf_ros.engine.weights.resolve import resolve
import pytest
from ros_harness import serving_decoder, TEST_DEVICE
from tiny_models import FAMILY_CASES, save_tiny

NAMESPACE = f'/fam{os.getpid()}'
FAMILIES = ('qwen3', 'smollm3', 'phi3', 'gemma3')


def tiny_with_tokenizer(name, folder):
    """Write a tiny random checkpoint of the family with the embedded model's tokenizer."""
    arch, tie, sizes = FAMILY_CASES[name]
    embedded = resolve('embedded').path
    # The tokenizer's ids: vocabulary size and special tokens come from the embedded model.
    own = json.loads((embedded / 'config.json').read_text())
    ids = {k: own[k] for k in ('vocab_size', 'bos_token_id', 'eos_token_id')}
    save_tiny(arch, folder, tie=tie, sizes={**sizes, **ids})
    for file in os.listdir(embedded):
        if file.startswith(('tokenizer', 'chat_template')):
            shutil.copy(embedded / file, folder / file)
    return folder


@pytest.fixture(scope='module', params=FAMILIES)
def served(request, tmp_path_factory):
    folder = tiny_with_tokenizer(request.param, tmp_path_factory.mktemp(request.param))
    log = folder / 'decoder.log'
    for harness in serving_decoder(f'{NAMESPACE}_{request.param}', log, model=str(folder),
                                   device=TEST_DEVICE, max_new_tokens=8, max_context=256):
        yield request.param, harness


def test_each_family_streams_a_reply_from_our_engine(served):
    name, harness = served
    probe = harness.probe
    mark = probe.mark()
    request_id = harness.send('Where is the kitchen?')
    finished = harness.wait_end(request_id)
    assert finished['event'] == 'finished', (name, finished)
    assert len(harness.step_latencies(mark, finished['steps'])) == finished['steps'] > 0
    harness.wait_for(lambda: probe.since(mark, 'response'), 10, 'the response')
    response, = probe.since(mark, 'response')
    assert harness.streamed(mark, response) == response
    status = harness.wait_for(lambda: probe.since(mark, 'diagnostics'), 5, 'diagnostics')[-1]
    # Our engine, not transformers: auto picks eager on a CPU, graphed on CUDA.
    assert status['backend'] == ('graphed' if TEST_DEVICE.startswith('cuda') else 'eager')
