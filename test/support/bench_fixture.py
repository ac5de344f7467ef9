"""Results documents with made-up step times, built by the real record code, for report tests."""

from pathlib import Path

import numpy as np
from physinf_ros.bench import results
from physinf_ros.bench.protocol import Cell, compare, describe, Plan, Session
from physinf_ros.engine.base import DecoderInfo
from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.weights.source import synthetic_config
from physinf_ros.measurement.roofline import Dense, Floor
from physinf_ros.measurement.targets import load_targets

MODEL = 'synthetic:llama-3.1-8b'


def fake_cells(step_ms, contexts=(2048, 8192), sessions=4, steps=6, seed=0):
    """Cells of modes eager and graphed whose steps scatter around step_ms[mode] ms."""
    rng = np.random.default_rng(seed)
    cells = []
    for mode, ms in step_ms.items():
        for ctx in contexts:
            cell = Cell(mode, mode, ctx)
            for slot in range(sessions):
                samples = (ms * (1 + ctx / 65536) * rng.lognormal(0, 0.02, steps)).tolist()
                cell.sessions.append(Session(slot, 100.0, samples))
            cells.append(cell)
    baseline = {c.ctx: c for c in cells if c.mode == 'eager'}
    for cell in cells:
        if cell.mode != 'eager':
            cell.comparison = compare(baseline[cell.ctx], cell)
    return cells


def write_fixture(folder, target_key, step_ms, price=None):
    """Write one results file for target_key (price in USD/h, or none); return its path."""
    target = load_targets()[target_key]
    if price is not None:
        target = target.with_price(price, 'made up for a test', '2026-11-29')
    floor = Floor(ModelConfig.from_hf(synthetic_config('llama-3.1-8b')), Dense(2), 2,
                  target.bandwidth_gbs)
    info = DecoderInfo('graphed', 'cuda:0 (fixture)', 'bfloat16', MODEL, 8300)
    plan = Plan(model=MODEL, contexts=(2048, 8192), sessions=4, steps=6)
    records = [results.cell_record(c, floor, target, info) for c in fake_cells(step_ms)]
    doc = results.document(
        describe(plan), target,
        {'gpu': target.name, 'gpu_driver': 'fixture', 'cpu': 'fixture',
         'packages': {'torch': 'fixture'}}, results.model_facts(MODEL, info, floor), records,
        'complete')
    path = Path(folder) / f'{target_key}.json'
    results.write(doc, path)
    return path
