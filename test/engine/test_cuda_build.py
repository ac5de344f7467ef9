"""Loading the package's CUDA libraries: one build per architecture, one lookup per device."""

from pathlib import Path

from physinf_ros.engine import attention_cuda, cuda_build, q4_cuda
import torch


def test_libraries_ask_torch_for_the_capability_once_per_device_and_source(monkeypatch):
    # Every eager launch looks its library up; the capability query is what costs there.
    asked, built = [], []
    capabilities = {0: (9, 0), 1: (9, 0), 2: (8, 9)}
    monkeypatch.setattr(torch.cuda, 'get_device_capability',
                        lambda index: asked.append(index) or capabilities[index])

    def fake_library(source, capability, what, declare):
        built.append((Path(source).name, capability))
        return (Path(source).name, capability)

    monkeypatch.setattr(cuda_build, 'Library', fake_library)
    monkeypatch.setattr(cuda_build, '_BUILT', {})
    monkeypatch.setattr(cuda_build, '_LOADED', {})
    for _ in range(3):
        for index in (0, 1, 2):
            q4_cuda.library(torch.device('cuda', index))
            attention_cuda.library(torch.device('cuda', index))
    assert asked == [0, 0, 1, 1, 2, 2]   # once per (source, device)
    # One build per source and architecture, shared by the devices that have it.
    assert built == [('q4_gemv.cu', (9, 0)), ('attention.cu', (9, 0)), ('q4_gemv.cu', (8, 9)),
                     ('attention.cu', (8, 9))]
    assert q4_cuda.library(torch.device('cuda', 1)) == ('q4_gemv.cu', (9, 0))


def test_a_missing_compiler_is_a_reason_not_an_error(monkeypatch, tmp_path):
    monkeypatch.setattr(cuda_build, 'nvcc', lambda: None)
    monkeypatch.setenv('PHYSINF_ROS_CACHE', str(tmp_path))
    library = cuda_build.Library(attention_cuda.SOURCE, (9, 0), 'the CUDA attention kernel',
                                 lambda handle: None)
    assert library.handle is None
    assert 'nvcc' in library.reason and 'the CUDA attention kernel' in library.reason
