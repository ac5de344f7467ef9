"""benchmarks/slow_masks.py: where the slow grammar masks come, on the embedded tokenizer."""

import json

from benchmark_scripts import benchmark_script
from physinf_ros.engine.weights.resolve import resolve
from physinf_ros.structured import OutputFormat, Vocabulary
from physinf_ros.structured.examples import robot_schemas

slow_masks = benchmark_script('slow_masks')


def test_the_summary_counts_slow_masks_by_what_came_before():
    masks = [(10.0, 40000, False), (900.0, 30000, False), (700.0, 20, True), (20.0, 1, True)]
    found = slow_masks.summary(masks, slow_us=500.0)
    assert (found['masks'], found['slow'], found['slow_after_forced']) == (4, 2, 1)
    assert found['after_forced_share'] == 0.5
    assert found['slow_allowed_min'] == 20


def test_a_walk_records_every_mask_after_the_first_and_whether_its_token_was_forced():
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(str(resolve('embedded').path))
    vocabulary = Vocabulary(tokenizer, [tokenizer.eos_token_id])
    goto = next(s for s in robot_schemas() if s['name'] == 'goto')
    masks = slow_masks.walk(vocabulary, OutputFormat(json.dumps(goto['schema'])), walks=3,
                            max_tokens=20, seed=1)
    assert masks and all(allowed >= 1 for _, allowed, _ in masks)
    # A goto reply can begin only one way: the mask after its first token follows a forced one.
    assert masks[0][2] is True
    assert any(not forced for _, _, forced in masks)


def test_without_max_length_drops_only_the_strings_bounds():
    plan = next(s for s in robot_schemas() if s['name'] == 'plan')['schema']
    free = slow_masks.without_max_length(plan)
    argument = free['properties']['steps']['items']['properties']['argument']
    assert argument == {'type': 'string'}
    assert free['properties']['steps']['maxItems'] == plan['properties']['steps']['maxItems']
    assert 'maxLength' in json.dumps(plan)   # the schema itself is left as written
