"""The protocol's comparison of two cells, its plan of modes and sessions, its prompts."""

import gc

from physinf_ros.bench.protocol import (Cell, compare, Plan, prompt_ids, Session, Stopped,
                                        timed_session)
import pytest


def _cell(mode, backend, medians):
    cell = Cell(mode, backend, 2048)
    cell.sessions = [Session(i, 1.0, [m, m, m]) for i, m in enumerate(medians)]
    return cell


def test_launch_fraction_only_for_a_real_graph_pair():
    eager = _cell('eager', 'eager', [10.0, 11.0, 10.5])
    graphed = _cell('graphed', 'graphed', [8.0, 8.8, 8.4])
    comparison = compare(eager, graphed)
    assert comparison.speedup == pytest.approx(31.5 / 25.2)
    assert comparison.launch_fraction == pytest.approx(1 - 25.2 / 31.5)
    # On a CPU 'graphed' ran as eager: same forward, no graph, no launch fraction.
    fallback = compare(eager, _cell('graphed', 'eager', [10.1, 10.9, 10.4]))
    assert fallback.launch_fraction is None and fallback.baseline == 'eager'
    assert compare(_cell('hf', 'hf', [20.0] * 3), graphed).launch_fraction is None


def test_plan_groups_modes_by_shared_weights_and_checks_itself():
    plan = Plan(modes=('hf', 'eager', 'graphed', 'hf-graphed'), contexts=(32, 64), steps=3,
                warmup=1, sessions=2)
    assert plan.families() == [('hf', 'hf-graphed'), ('eager', 'graphed')]
    assert plan.max_context(32) == 32 + 1 + 3 + 1
    assert plan.session_count() == 4 * 2 * 2
    assert plan.problems() == []
    bad = Plan(modes=('eager', 'warp'), contexts=(0,), steps=0)
    assert len(bad.problems()) == 3


def test_prompts_repeat_per_slot_and_rotate_between_slots():
    assert prompt_ids(1000, 64, 0, 3) == prompt_ids(1000, 64, 0, 3)
    assert prompt_ids(1000, 64, 0, 3) != prompt_ids(1000, 64, 0, 4)
    ids = prompt_ids(1000, 64, 0, 0)
    assert len(ids) == 64 and 0 <= min(ids) and max(ids) < 1000


class _CountingDecoder:
    """Records what a session asks of it, and whether the collector ran during its steps."""

    def __init__(self):
        self.calls, self.gc_during_steps = [], set()

    def prefill(self, ids, sampling, allowed=None):
        self.calls.append(('prefill', len(ids)))

    def step(self):
        self.calls.append('step')
        self.gc_during_steps.add(gc.isenabled())


def test_a_session_prefills_warms_up_then_times_each_step():
    decoder, seen = _CountingDecoder(), []
    plan = Plan(steps=4, warmup=2)
    prefill_ms, samples = timed_session(decoder, [1, 2, 3], plan, on_step=seen.append)
    assert decoder.calls == [('prefill', 3)] + ['step'] * 6
    assert len(samples) == 4 and seen == samples and prefill_ms >= 0.0
    assert decoder.gc_during_steps == {True, False}   # on while warming up, off while timed
    assert gc.isenabled()


def test_a_session_stops_between_steps_and_turns_the_collector_back_on():
    decoder = _CountingDecoder()
    asked = iter([False, False, True])
    with pytest.raises(Stopped):
        timed_session(decoder, [1], Plan(steps=5, warmup=0), stop=lambda: next(asked))
    assert decoder.calls.count('step') == 2 and gc.isenabled()
