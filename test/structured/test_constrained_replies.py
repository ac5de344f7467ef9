"""Constrained replies through the generation loop: every one parses and follows its schema."""

from contextlib import contextmanager
import json
from types import SimpleNamespace

import jsonschema
import numpy as np
from physinf_ros.engine import load, Sampling
from physinf_ros.structured import ConstraintError, OutputFormat
from physinf_ros.structured.examples import robot_schemas, schema_prompt
import pytest

SCHEMAS = robot_schemas()
# The greedy replies fit well inside this. A sampled reply may take the whole context: the
# schemas bound characters, not tokens ('plan' and 'say' ran up to 187 and 216 tokens sampled,
# benchmarks/results/dev/sampled_reply_lengths.json).
MAX_NEW_TOKENS = 160


@pytest.fixture(scope='module')
def eager_engine():
    return load('embedded', backend='eager', device='cpu', dtype='float32', max_context=1024)


def reply(engine, entry, sampling=Sampling()):
    ids = engine.encode(schema_prompt(entry))
    budget = MAX_NEW_TOKENS if sampling.greedy else engine.info.max_context
    generation = engine.generate(ids, budget, sampling,
                                 output=OutputFormat(json.dumps(entry['schema'])))
    for _ in generation:
        pass
    return generation


@pytest.mark.parametrize('entry', SCHEMAS, ids=[s['name'] for s in SCHEMAS])
def test_every_greedy_reply_parses_and_follows_its_schema(eager_engine, entry):
    generation = reply(eager_engine, entry)
    assert generation.finish_reason == 'eos', generation.detail
    jsonschema.validate(json.loads(generation.text), entry['schema'])


@pytest.mark.parametrize('name', ['plan', 'detect', 'status_report'])
def test_sampled_replies_follow_their_schema_too(eager_engine, name):
    entry = next(s for s in SCHEMAS if s['name'] == name)
    for seed in range(3):
        generation = reply(eager_engine, entry, Sampling(temperature=1.0, top_p=0.95, seed=seed))
        assert generation.finish_reason == 'eos', generation.detail
        jsonschema.validate(json.loads(generation.text), entry['schema'])


@contextmanager
def forwards_queued_ahead(engine):
    # CUDA's way on the CPU: each step's forward queued behind the last choice.
    engine.decoder.mask_overlap = True
    try:
        yield engine
    finally:
        engine.decoder.mask_overlap = False


@pytest.mark.parametrize('name', ['plan', 'yes_no', 'place'])
def test_a_forward_queued_ahead_of_its_mask_changes_no_reply(eager_engine, name):
    entry = next(s for s in SCHEMAS if s['name'] == name)
    sampled = Sampling(temperature=1.0, top_p=0.95, seed=3)
    plain = [reply(eager_engine, entry), reply(eager_engine, entry, sampled)]
    with forwards_queued_ahead(eager_engine):
        ahead = [reply(eager_engine, entry), reply(eager_engine, entry, sampled)]
    for before, after in zip(plain, ahead):
        assert after.finish_reason == 'eos', after.detail
        assert after.token_ids == before.token_ids


def test_a_reply_after_a_constrained_one_reuses_only_what_its_forwards_wrote(eager_engine):
    # The constrained reply's last queued forward wrote one position past what the cache is
    # known to hold: the free reply that shares its prompt must equal one from a cold cache.
    engine = eager_engine
    entry = next(s for s in SCHEMAS if s['name'] == 'goto')
    with forwards_queued_ahead(engine):
        constrained = reply(engine, entry)
    ids = engine.encode(schema_prompt(entry)) + constrained.token_ids + engine.encode(' Why?')
    warm = engine.generate(ids, 12)
    list(warm)
    assert warm.cached_tokens > 0
    engine.decoder.reuse_prefix = False
    try:
        cold = engine.generate(ids, 12)
        list(cold)
    finally:
        engine.decoder.reuse_prefix = True
    assert warm.token_ids == cold.token_ids


def test_a_teacher_forced_step_replaces_the_forward_queued_for_another_token(eager_engine):
    decoder = eager_engine.decoder
    vocab = decoder.step_facts().config.vocab_size
    every_token = SimpleNamespace(bits=np.full((vocab + 31) // 32, -1, dtype=np.int32))
    ids = eager_engine.encode('The robot arm picks up')

    def steps():
        decoder.prefill(ids, Sampling(), every_token)
        return [decoder.step(), decoder.step(17), decoder.step(), decoder.step(42),
                decoder.step()]
    plain = steps()
    with forwards_queued_ahead(eager_engine):
        assert steps() == plain


@pytest.mark.parametrize('name', ['goto', 'velocity', 'handover'])
def test_transformers_backend_gives_the_same_constrained_reply(embedded_engine, eager_engine,
                                                               name):
    entry = next(s for s in SCHEMAS if s['name'] == name)
    ours, theirs = reply(eager_engine, entry), reply(embedded_engine, entry)
    assert theirs.finish_reason == 'eos', theirs.detail
    assert ours.text == theirs.text


def test_unconstrained_replies_to_the_same_prompts_mostly_do_not_parse(eager_engine):
    # Why the constraint exists: the embedded model, asked the same way, rarely gives valid JSON.
    valid = 0
    for entry in SCHEMAS[:6]:
        generation = eager_engine.generate(eager_engine.encode(schema_prompt(entry)), 48)
        for _ in generation:
            pass
        try:
            jsonschema.validate(json.loads(generation.text), entry['schema'])
            valid += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    assert valid < 3


def test_a_completed_grammar_ends_the_reply_without_a_step_for_the_stop_token(eager_engine):
    ids = eager_engine.encode('Is the door open? Answer yes or no.')
    generation = eager_engine.generate(ids, 32,
                                       output=OutputFormat(grammar='start: "yes" | "no"'))
    pieces = list(generation)
    assert generation.text in ('yes', 'no')
    assert (generation.finish_reason, generation.detail) == ('eos',
                                                             'the reply completed its grammar')
    assert len(generation.step_ms) == len(generation.token_ids) - 1
    assert ''.join(p.text for p in pieces) == generation.text


def test_a_reply_cut_by_max_new_tokens_says_its_grammar_is_unfinished(eager_engine):
    ids = eager_engine.encode('Count to fifty.')
    generation = eager_engine.generate(ids, 4, output=OutputFormat(grammar='start: /[a-z ]{40}/'))
    list(generation)
    assert generation.finish_reason == 'length'
    assert 'before the reply completed its grammar' in generation.detail


def test_a_bad_schema_is_refused_before_any_decoding(eager_engine):
    with pytest.raises(ConstraintError, match='response_format is not JSON'):
        eager_engine.generate([1, 2, 3], 8, output=OutputFormat('{"type": '))
