"""Output constraints: what a schema or grammar allows, token by token (embedded tokenizer)."""

import copy
import json

from physinf_ros.engine.base import DeferredStep, Sampling
from physinf_ros.engine.generate import Generation
from physinf_ros.engine.weights.resolve import resolve
from physinf_ros.structured import compile_constraint, ConstraintError, OutputFormat, Vocabulary
from physinf_ros.structured.examples import robot_schemas
import pytest
from tokenizers import decoders

SCHEMAS = robot_schemas()


@pytest.fixture(scope='module')
def tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(resolve('embedded').path)


@pytest.fixture(scope='module')
def vocabulary(tokenizer):
    return Vocabulary(tokenizer, [tokenizer.eos_token_id])


def walk(constraint, tokenizer, text):
    """Feed text's tokens; return the index of the first refused one (None: all allowed)."""
    for index, token in enumerate(tokenizer.encode(text, add_special_tokens=False)):
        if not constraint.mask()[token] or not constraint.advance(token):
            return index
    return None


def test_a_byte_level_tokenizer_behind_sentencepiece_decoders_keeps_its_bytes(tokenizer):
    # The embedded GGUF as transformers 5.17 converts it: sentencepiece's decoder steps before
    # the ByteLevel one. Decoding is unchanged; the grammar must still see ' "' as ' "'.
    converted = copy.deepcopy(tokenizer)
    converted.backend_tokenizer.decoder = decoders.Sequence([
        decoders.ByteFallback(), decoders.Fuse(), decoders.Replace('\u2581', ' '),
        decoders.ByteLevel()])
    quote = tokenizer.convert_tokens_to_ids('\u0120"')
    assert converted.decode([quote]) == ' "'
    vocabulary = Vocabulary(converted, [converted.eos_token_id])
    assert vocabulary.tokens.decode_bytes([quote]) == b' "'
    goto = next(s for s in SCHEMAS if s['name'] == 'goto')
    constraint = compile_constraint(vocabulary, OutputFormat(json.dumps(goto['schema'])))
    assert walk(constraint, converted, '{"action": "goto", "room": "kitchen"}') is None


@pytest.mark.parametrize('response_format, grammar, words', [
    ('{"type": "object"', '', ['response_format is not JSON']),
    ('[1, 2]', '', ['must be a JSON object']),
    ('{"type": "object", "properties": {"a": {"type": "strin"}}}', '', ['strin']),
    ('{"type": "json_schema", "json_schema": {}}', '', ['json_schema', 'schema']),
    ('', 'start: greeting', ['grammar does not compile', 'greeting']),
    ('{"type": "json_object"}', 'start: "a"', ['not both']),
])
def test_bad_output_formats_are_refused_with_the_reason(vocabulary, response_format, grammar,
                                                        words):
    with pytest.raises(ConstraintError) as caught:
        compile_constraint(vocabulary, OutputFormat(response_format, grammar))
    for word in words:
        assert word in str(caught.value)


def test_free_text_has_no_constraint(vocabulary):
    assert not OutputFormat().constrained
    assert compile_constraint(vocabulary, OutputFormat('  ', '\n')) is None


@pytest.mark.parametrize('entry', SCHEMAS, ids=[s['name'] for s in SCHEMAS])
def test_each_robot_schema_allows_its_example_and_then_only_the_end(vocabulary, tokenizer, entry):
    constraint = compile_constraint(vocabulary, OutputFormat(json.dumps(entry['schema'])))
    assert walk(constraint, tokenizer, json.dumps(entry['example'])) is None
    allowed = constraint.mask()
    assert constraint.finished
    assert allowed.nonzero().flatten().tolist() == [tokenizer.eos_token_id]
    assert constraint.advance(tokenizer.eos_token_id)


def test_a_reply_outside_the_schema_is_refused_where_it_leaves_it(vocabulary, tokenizer):
    schema = next(s['schema'] for s in SCHEMAS if s['name'] == 'goto')
    constraint = compile_constraint(vocabulary, OutputFormat(json.dumps(schema)))
    text = '{"action": "goto", "room": "attic"}'
    refused = walk(constraint, tokenizer, text)
    assert refused is not None
    cut = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)[:refused])
    assert cut.startswith('{"action": "goto", "room": "')
    # The end of sequence is no way out of an unfinished object.
    assert not constraint.mask()[tokenizer.eos_token_id]
    assert not constraint.advance(tokenizer.eos_token_id)


def test_any_json_object_starts_with_a_brace(vocabulary, tokenizer):
    constraint = compile_constraint(vocabulary, OutputFormat('{"type": "json_object"}'))
    allowed = constraint.mask().nonzero().flatten().tolist()
    assert allowed and all(tokenizer.decode([t]).lstrip().startswith('{') for t in allowed)
    assert walk(constraint, tokenizer, '{"anything": [1, 2.5, null, "x"]}') is None
    assert constraint.finished


def test_a_lark_grammar_and_a_regex(vocabulary, tokenizer):
    choice = compile_constraint(vocabulary, OutputFormat(grammar='start: "yes" | "no"'))
    assert walk(choice, tokenizer, 'maybe') == 0
    digits = compile_constraint(vocabulary, OutputFormat(grammar='start: /[0-9]{2,3}/'))
    assert walk(digits, tokenizer, '42') is None
    assert digits.mask()[tokenizer.eos_token_id]   # two digits may end the reply
    assert walk(digits, tokenizer, '7') is None
    assert digits.finished   # three digits must


def test_a_keyword_the_grammar_cannot_enforce_is_a_warning(vocabulary):
    schema = {'type': 'array', 'items': {'type': 'integer'}, 'uniqueItems': True}
    constraint = compile_constraint(vocabulary, OutputFormat(json.dumps(schema)))
    assert any('uniqueItems' in w for w in constraint.warnings)


def test_logits_outside_the_grammar_become_minus_infinity(tokenizer):
    # The decoders' own masking (engine.sampling.mask_logits) of the constraint's bits, with a
    # head wider than the tokenizer, as a model's padded one is: the padding is never allowed.
    import torch
    from physinf_ros.engine.sampling import mask_logits
    padded = Vocabulary(tokenizer, [tokenizer.eos_token_id], len(tokenizer) + 64)
    constraint = compile_constraint(padded, OutputFormat(grammar='start: "yes" | "no"'))
    masked = mask_logits(torch.zeros(padded.n_vocab), torch.from_numpy(constraint.fill_bitmask()))
    finite = torch.isfinite(masked).nonzero().flatten().tolist()
    assert finite and all(t < len(tokenizer) for t in finite)
    assert all(tokenizer.decode([t]) in ('yes', 'no', 'y', 'n', 'ye') for t in finite)


class _IgnoresItsMask:
    """A decoder fault: it answers the script's token whatever the mask allows."""

    def __init__(self, script):
        self.script, self.position, self.cached_tokens = list(script), 0, 0

    def prefill(self, token_ids, sampling, allowed=None) -> int:
        return self.script.pop(0)

    def launch(self):
        return DeferredStep(lambda: self.script.pop(0))


def test_a_token_outside_its_mask_ends_the_reply_naming_the_decoder(vocabulary, tokenizer):
    # The mask a token was chosen under tells the two failures apart: a decoder that ignored
    # it (here), or a grammar that refuses what its own mask allowed.
    schema = next(s['schema'] for s in SCHEMAS if s['name'] == 'goto')
    allowed_first = tokenizer.encode('{"', add_special_tokens=False)
    stray = tokenizer.encode(' hello', add_special_tokens=False)
    assert len(allowed_first) == 1 and len(stray) == 1
    for script, token in ((allowed_first + stray, 2), (stray, 1)):
        generation = Generation(_IgnoresItsMask(script), None, frozenset(), [5, 6], 8, Sampling(),
                                constraint=compile_constraint(vocabulary,
                                                              OutputFormat(json.dumps(schema))))
        list(generation)
        assert generation.finish_reason == 'error'
        assert generation.detail == (f'the reply left its grammar at reply token {token} (id '
                                     f'{stray[0]}): the decoder chose a token its mask did not '
                                     'allow (a decoder fault)')
