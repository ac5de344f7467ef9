"""The scripts under benchmarks/ (not a package), imported as modules for their tests."""

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / 'benchmarks'


def benchmark_script(name: str):
    """Import benchmarks/<name>.py and return the module."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
