"""
One benchmark run end to end: find the target, run the protocol, turn cells into records.

Shared by physinf-bench and benchmark_node; each passes a BenchListener to show progress and
receive each cell's record as soon as it is measured.
"""

from datetime import date
from typing import Callable, Dict, List, Optional

from . import protocol, results
from .protocol import Cell, Plan, Stopped
from ..engine import Engine
from ..engine.device import pick_device
from ..measurement.roofline import decoder_floor, Floor
from ..measurement.targets import detect, Target


class BenchListener(protocol.Listener):
    """A protocol listener that also receives each finished cell's results record."""

    def result(self, record: Dict[str, object]) -> None:
        """Take the results record of a finished cell."""


class _Recorder(protocol.Listener):
    # Turns protocol cells into records (roofline included) and passes everything on.

    def __init__(self, benchmark: 'Benchmark', listener: BenchListener):
        self.benchmark = benchmark
        self.listener = listener

    def loaded(self, engine: Engine) -> None:
        self.benchmark.on_loaded(engine)
        self.listener.loaded(engine)

    def step(self, mode: str, ctx: int, step_ms: float) -> None:
        self.listener.step(mode, ctx, step_ms)

    def session(self, mode, ctx, session) -> None:
        self.listener.session(mode, ctx, session)

    def cell(self, cell: Cell, engine: Engine) -> None:
        record = self.benchmark.on_cell(cell, engine)
        self.listener.cell(cell, engine)
        self.listener.result(record)

    def unavailable(self, mode: str, reason: str) -> None:
        self.benchmark.unavailable.append({'mode': mode, 'reason': reason})
        self.listener.unavailable(mode, reason)


class Benchmark:
    """A plan on a target; run() measures it and returns the results document."""

    def __init__(self, plan: Plan, target: str = '', price_per_hour: Optional[float] = None,
                 log: Callable[[str], None] = lambda _: None):
        problems = plan.problems()
        if problems:
            raise ValueError('; '.join(problems))
        self.plan = plan
        self.log = log
        self.device = pick_device(plan.device)
        unrunnable = plan.unrunnable(self.device)
        if unrunnable and not plan.record_unavailable:   # before any weights load
            raise ValueError('; '.join(f'mode {mode}: {reason}'
                                       for mode, reason in unrunnable.items()))
        found = detect(self.device, target, log)
        if price_per_hour is not None:
            found = found.with_price(price_per_hour, 'given for this run',
                                     date.today().isoformat())
        self.target: Target = found
        self.records: List[Dict[str, object]] = []
        self.unavailable: List[Dict[str, str]] = []   # modes that did not run, with the reason
        self.model: Dict[str, object] = {'spec': plan.model}
        self._floor: Optional[Floor] = None

    def on_loaded(self, engine: Engine) -> None:
        """Work out the model's floor on this target when its weights are loaded."""
        try:
            self._floor = decoder_floor(engine.decoder, self.target.bandwidth_gbs)
        except (ValueError, KeyError) as exc:
            self._floor = None
            self.log(f'no roofline for {engine.info.model} ({exc}): R_floor left out')
        self.model = results.model_facts(self.plan.model, engine.info, self._floor)

    def on_cell(self, cell: Cell, engine: Engine) -> Dict[str, object]:
        record = results.cell_record(cell, self._floor, self.target, engine.info)
        if self.plan.draft:
            record['draft_model'] = self.plan.draft
        self.records.append(record)
        return record

    def run(self, listener: BenchListener = BenchListener(),
            stop: Callable[[], bool] = lambda: False) -> Dict[str, object]:
        """Measure the plan; a stopped run returns what it measured, with status 'stopped'."""
        status = 'complete'
        try:
            protocol.run(self.plan, _Recorder(self, listener), stop, self.log)
        except Stopped:
            status = 'stopped'
        return self.document(status)

    def document(self, status: str) -> Dict[str, object]:
        """Return the results document of the cells measured so far."""
        return results.document(protocol.describe(self.plan), self.target,
                                results.machine_facts(self.device), self.model,
                                self.records, status, self.unavailable)
