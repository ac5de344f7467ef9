"""Shared fixtures, and the switch that runs the Triton kernels on the CPU where no GPU is."""

import json
import os
from pathlib import Path

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    # Must be set before triton is imported: kernels then run in Triton's interpreter on
    # CPU tensors, so CI checks their logic without a GPU.
    os.environ.setdefault('TRITON_INTERPRET', '1')


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason='needs a CUDA GPU; run on the GPU machine '
                            '(benchmarks/run_device.sh records the outcome)')
    for item in items:
        if 'gpu' in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


@pytest.fixture(scope='session')
def embedded_engine():
    from physinf_ros.engine import load
    return load('embedded', backend='hf', device='cpu', dtype='float32', max_context=1024)


# Figures measured by the reliability tests, by test: printed as they come, listed again at the
# end of the run, and written to build/reliability_figures.json (or $PHYSINF_FIGURES).
FIGURES = {}


@pytest.fixture(scope='session')
def figures():
    """Return record(name, **values): keep a test's measured figures for the report."""
    def record(name, **values):
        FIGURES[name] = values
        print(f'FIGURES {name}: {json.dumps(values)}')
    return record


def pytest_terminal_summary(terminalreporter, config):
    if not FIGURES:
        return
    terminalreporter.section('reliability figures')
    for name, values in FIGURES.items():
        terminalreporter.write_line(f'{name}: {json.dumps(values)}')
    path = Path(os.environ.get('PHYSINF_FIGURES')
                or Path(str(config.rootpath)) / 'build' / 'reliability_figures.json')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(FIGURES, indent=2) + '\n')
    terminalreporter.write_line(f'written to {path}')
