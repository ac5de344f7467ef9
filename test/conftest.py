"""Shared fixtures: the embedded model, loaded once per test session."""

import pytest


@pytest.fixture(scope='session')
def embedded_engine():
    from physinf_ros.engine import load
    return load('embedded', backend='hf', device='cpu', dtype='float32', max_context=1024)
