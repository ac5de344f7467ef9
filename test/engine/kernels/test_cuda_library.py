"""The build of the engine's CUDA sources (cuda_library), checked without a GPU."""

from physinf_ros.engine.kernels import attention_cuda, cuda_library, q4_cuda
import pytest


@pytest.mark.parametrize('module', [q4_cuda, attention_cuda], ids=['q4_gemv', 'attention_split'])
def test_a_missing_compiler_is_a_reason_not_an_error(monkeypatch, tmp_path, module):
    monkeypatch.setattr(cuda_library, 'nvcc', lambda: None)
    monkeypatch.setenv('PHYSINF_ROS_CACHE', str(tmp_path))
    library = cuda_library.Library(module.SOURCE, (9, 0), module._declare)
    assert library.handle is None
    assert 'nvcc' in library.reason and 'CUDA_HOME' in library.reason
    assert module.SOURCE.name in library.reason
