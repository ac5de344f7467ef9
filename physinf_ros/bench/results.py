"""
Results files: one record per cell with its roofline figures, the machine's facts, JSON + CSV.

The JSON document is versioned (`schema`, `schema_version`) and keeps every measured step, so
a later reader can recompute any statistic. The CSV beside it has one row per cell, without the
per-step samples, each row carrying the machine facts (GPU, driver, CPU, torch, commit).
"""

import csv
from dataclasses import asdict
from datetime import datetime, timezone
import importlib.metadata
import json
import math
import os
from pathlib import Path
import platform
import re
import statistics
import subprocess
from typing import Dict, List, Optional, Tuple

import torch

from .protocol import Cell
from ..engine.device import device_index
from ..engine.speculative import MAX_DRAFT
from ..measurement.roofline import cost_per_mtok, Floor, tokens_per_s
from ..measurement.stats import percentile
from ..measurement.targets import device_name, Target

SCHEMA = 'physinf_ros.bench'
SCHEMA_VERSION = 1
# A speculative plan's columns: per drafted-token count k, the verify step's p50 and p99, its
# ratio to the plain step, and (with a draft model) the tokens per step that pay for the pair.
VERIFY_FIELDS = tuple(f'{name}_k{k}' for k in range(1, MAX_DRAFT + 1) for name in (
    'verify_ms_p50', 'verify_ms_p99', 'verify_ratio', 'draft_break_even'))
CSV_FIELDS = (
    'model', 'target', 'B_peak_gbs', 'bandwidth_measured', 'mode', 'backend', 'device', 'dtype',
    'ctx', 'sessions', 'steps', 'step_ms_p50', 'step_ms_p10', 'step_ms_p90', 't_floor_ms',
    'R_floor', 'tokens_per_s', 'cost_per_mtok', 'price_per_hour', 'W_bytes', 'W_all_bytes',
    'K_bytes', 'baseline', 'speedup', 'ci95_lo', 'ci95_hi', 'launch_fraction', 'prefill_ms_median',
    # The file's facts, repeated on every row so a row read alone still says where it came from.
    'schema_version', 'created_utc', 'gpu', 'gpu_driver', 'cpu', 'torch', 'transformers',
    'physinf_ros_commit', 'draft_model', 'draft_step_ms_p50') + VERIFY_FIELDS


def _finite(value):
    # JSON has no NaN: an unknown figure is null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def cell_record(cell: Cell, floor: Optional[Floor], target: Target, info) -> Dict[str, object]:
    """Return the results record of a measured cell: latency, roofline, A/B and samples."""
    p50 = cell.percentile(50)
    if floor is not None:
        roof = floor.at(cell.ctx, p50)
    else:
        roof = dict.fromkeys(('W_bytes', 'W_all_bytes', 'K_bytes', 't_floor_ms', 'R_floor'))
    comparison = cell.comparison
    record = {
        'model': info.model, 'target': target.key, 'target_name': target.name,
        'B_peak_gbs': target.bandwidth_gbs, 'bandwidth_measured': target.measured,
        'mode': cell.mode, 'backend': cell.backend, 'device': info.device, 'dtype': info.dtype,
        'ctx': cell.ctx, 'sessions': len(cell.sessions),
        'steps': len(cell.sessions[0].step_ms) if cell.sessions else 0,
        'step_ms_p50': p50, 'step_ms_p10': cell.percentile(10),
        'step_ms_p90': cell.percentile(90), **roof,
        'tokens_per_s': tokens_per_s(p50),
        'cost_per_mtok': cost_per_mtok(p50, target.price_per_hour),
        'price_per_hour': target.price_per_hour,
        'baseline': comparison.baseline if comparison else None,
        'speedup': comparison.speedup if comparison else None,
        'ci95_lo': comparison.ci95_lo if comparison else None,
        'ci95_hi': comparison.ci95_hi if comparison else None,
        'launch_fraction': comparison.launch_fraction if comparison else None,
        'prefill_ms_median': statistics.median([s.prefill_ms for s in cell.sessions]),
        'session_median_ms': cell.session_medians,
        'prefill_ms': [s.prefill_ms for s in cell.sessions],
        'step_ms': [s.step_ms for s in cell.sessions],
    }
    if cell.constrained_samples:
        constrained = cell.constrained_samples
        record.update({
            'step_ms_p99': cell.percentile(99),
            'constrained_step_ms_p50': percentile(constrained, 50),
            'constrained_step_ms_p99': percentile(constrained, 99),
            'constrained_ratio_p50': percentile(constrained, 50) / p50,
            'constrained_ratio_p99': percentile(constrained, 99) / cell.percentile(99),
            'mask_us_p50': percentile(cell.mask_samples, 50),
            'mask_us_p99': percentile(cell.mask_samples, 99),
            'constrained_step_ms': [s.constrained_ms for s in cell.sessions],
            'mask_us': [s.mask_us for s in cell.sessions]})
    if cell.verify_ks:
        record.update(verify_fields(cell, p50))
    return {key: _finite(value) for key, value in record.items()}


def verify_fields(cell: Cell, step_p50: float) -> Dict[str, object]:
    """
    Return a speculative plan's fields of a cell: per k its verify step and the break-even.

    'verify' lists k = 0 (the plain step, ratio 1 by definition) then each measured k: ms_p50,
    ms_p99, ratio = t_verify(k) / t_step (p50s), break_even_tokens_per_step (the same number)
    and, with a draft model, draft_break_even_tokens_per_step = (t_verify(k) + k * t_draft) /
    t_step. The flat verify_*_k<k> fields carry them into the CSV.
    """
    draft = cell.draft_samples
    t_draft = percentile(draft, 50) if draft else None
    rows = [{'k': 0, 'rows': 1, 'ms_p50': step_p50, 'ms_p99': cell.percentile(99),
             'ratio': 1.0, 'break_even_tokens_per_step': 1.0,
             'draft_break_even_tokens_per_step': None}]
    fields = {'step_ms_p99': cell.percentile(99)}
    for k in cell.verify_ks:
        samples = cell.verify_samples(k)
        p50, p99 = percentile(samples, 50), percentile(samples, 99)
        ratio = p50 / step_p50
        paired = (p50 + k * t_draft) / step_p50 if t_draft is not None else None
        rows.append({'k': k, 'rows': k + 1, 'ms_p50': p50, 'ms_p99': p99, 'ratio': ratio,
                     'break_even_tokens_per_step': ratio,
                     'draft_break_even_tokens_per_step': paired})
        fields.update({f'verify_ms_p50_k{k}': p50, f'verify_ms_p99_k{k}': p99,
                       f'verify_ratio_k{k}': ratio, f'draft_break_even_k{k}': paired})
    fields.update({
        'verify': rows,
        'verify_ms': {str(k): [s.verify_ms[k] for s in cell.sessions] for k in cell.verify_ks}})
    if draft:
        fields.update({'draft_step_ms_p50': t_draft, 'draft_step_ms_p99': percentile(draft, 99),
                       'draft_step_ms': [s.draft_ms for s in cell.sessions]})
    return fields


def model_facts(spec: str, info, floor: Optional[Floor]) -> Dict[str, object]:
    """Return the model's identity, dtype and (when modelled) its geometry and weight bytes."""
    facts = {'spec': spec, 'name': info.model, 'dtype': info.dtype, 'device': info.device}
    if floor is not None:
        facts.update(W_bytes=floor.weight_bytes, W_all_bytes=floor.weight_bytes_all,
                     kv_bytes_per_element=floor.kv_bytes_per_element,
                     accounting=type(floor.accounting).__name__,
                     config=asdict(floor.config))
    return facts


def _version(package: str) -> Optional[str]:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _command(*args: str) -> Optional[str]:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def machine_facts(device: torch.device) -> Dict[str, object]:
    """Return what a reader needs to know about the machine a result came from."""
    here = str(Path(__file__).resolve().parent)
    commit = _command('git', '-C', here, 'rev-parse', 'HEAD')
    dirty = _command('git', '-C', here, 'status', '--porcelain') if commit else None
    gpu = device_name(device) if device.type == 'cuda' else None
    driver = None
    if gpu is not None:
        index = device_index(device)
        driver = _command('nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader',
                          '-i', str(index))
    return {
        'gpu': gpu, 'gpu_driver': driver, 'cuda_runtime': torch.version.cuda,
        'cpu': device_name(torch.device('cpu')), 'cpu_count': os.cpu_count(),
        'python': platform.python_version(), 'platform': platform.platform(),
        'packages': {name: _version(name) for name in (
            'physinf_ros', 'torch', 'transformers', 'triton', 'numpy', 'bitsandbytes', 'torchao',
            'exllamav2')},
        'physinf_ros_commit': commit + ('-dirty' if dirty else '') if commit else None,
    }


def document(protocol: Dict[str, object], target: Target, machine: Dict[str, object],
             model: Dict[str, object], records: List[Dict[str, object]],
             status: str, unavailable: List[Dict[str, str]] = ()) -> Dict[str, object]:
    """Assemble the versioned results document; unavailable: modes that did not run, and why."""
    return {'schema': SCHEMA, 'schema_version': SCHEMA_VERSION,
            'created_utc': datetime.now(timezone.utc).isoformat(timespec='seconds'),
            'status': status, 'machine': machine, 'target': target.facts(), 'model': model,
            'protocol': protocol, 'cells': records, 'unavailable': list(unavailable)}


def default_path(target: Target, model: str, folder: str = 'benchmarks/results') -> Path:
    """Return benchmarks/results/<target>/<model>-<UTC time>.json."""
    slug = re.sub(r'[^A-Za-z0-9.-]+', '-', model).strip('-').lower() or 'model'
    stamp = datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')
    return Path(folder) / target.key / f'{slug}-{stamp}.json'


def write(doc: Dict[str, object], json_path: Path) -> Tuple[Path, Path]:
    """Write the document as JSON and its cells as CSV beside it; return both paths."""
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(doc, indent=1, allow_nan=False) + '\n')
    csv_path = json_path.with_suffix('.csv')
    machine = doc['machine']
    facts = {'schema_version': doc['schema_version'], 'created_utc': doc['created_utc'],
             'gpu': machine.get('gpu'), 'gpu_driver': machine.get('gpu_driver'),
             'cpu': machine.get('cpu'), 'torch': machine['packages'].get('torch'),
             'transformers': machine['packages'].get('transformers'),
             'physinf_ros_commit': machine.get('physinf_ros_commit')}
    with open(csv_path, 'w', newline='') as out:
        writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction='ignore')
        writer.writeheader()
        for record in doc['cells']:
            row = {**facts, **record}
            writer.writerow({k: '' if row.get(k) is None else row[k] for k in CSV_FIELDS})
    return json_path, csv_path


def read(path: Path) -> Dict[str, object]:
    """Read a results document, refusing files of another schema or a newer version."""
    doc = json.loads(Path(path).read_text())
    if doc.get('schema') != SCHEMA:
        raise ValueError(f'{path} is not a physinf_ros benchmark results file')
    if doc.get('schema_version', 0) > SCHEMA_VERSION:
        raise ValueError(f'{path} has schema version {doc["schema_version"]}; this '
                         f'physinf_ros reads up to {SCHEMA_VERSION}: update it')
    return doc
