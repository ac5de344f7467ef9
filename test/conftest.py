"""Shared fixtures, and the switch that runs the Triton kernels on the CPU where no GPU is."""

import os

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
