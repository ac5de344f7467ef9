"""The scripts under benchmarks/ (not a package), imported as modules for their tests."""

import importlib.util
from pathlib import Path
import sys

BENCHMARKS = Path(__file__).resolve().parents[2] / 'benchmarks'


def benchmark_script(name: str):
    """Import benchmarks/<name>.py and return the module."""
    if str(BENCHMARKS) not in sys.path:   # scripts import their siblings, as when run
        sys.path.append(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
