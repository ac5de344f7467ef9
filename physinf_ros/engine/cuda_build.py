"""
The package's CUDA kernels (q4_gemv.cu, gemv16.cu): built once per machine with nvcc, loaded.

Each source is compiled for the GPU's own architecture into the package's cache folder
(models.cache_root: $PHYSINF_ROS_CACHE, else ~/.cache/physinf_ros), named by a hash of the
source and the flags, so an edited kernel is rebuilt and an unchanged one is built once. A
source that cannot be built (no nvcc, a compiler error) gives its reason instead of a library,
and the kernels that use it fall back to Triton.
"""

import ctypes
import hashlib
import os
from pathlib import Path
import shutil
import subprocess
import tempfile
from typing import Callable, Dict, Optional, Tuple

import torch

from .models import cache_root

FLAGS = ('-O3', '-std=c++17', '-shared', '-Xcompiler', '-fPIC')
BUILD_SECONDS = 600


class Library:
    """One source built for one GPU architecture: its ctypes handle, or the reason it failed."""

    def __init__(self, source: Path, capability: Tuple[int, int],
                 declare: Callable[[ctypes.CDLL], None]):
        self.source = source
        self.arch = f'sm_{capability[0]}{capability[1]}'
        self.pdl = capability[0] >= 9   # programmatic dependent launch: Hopper and later
        self.handle = None
        self.reason = ''
        try:
            self.handle = ctypes.CDLL(str(self._build()))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            self.reason = str(exc)
            return
        declare(self.handle)

    def _build(self) -> Path:
        flags = FLAGS + (f'-arch={self.arch}',)
        digest = hashlib.sha256(self.source.read_bytes() + ' '.join(flags).encode()).hexdigest()
        cache = cache_root()
        target = cache / f'{self.source.stem}_{digest[:16]}_{self.arch}.so'
        if target.is_file():
            return target
        compiler = nvcc()
        if compiler is None:
            raise RuntimeError('nvcc (the CUDA toolkit) was not found: set CUDA_HOME or put nvcc '
                               f'on PATH to build the CUDA kernels of {self.source.name}')
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            out = Path(tmp) / target.name
            done = subprocess.run([compiler, *flags, '-o', str(out), str(self.source)],
                                  capture_output=True, text=True, timeout=BUILD_SECONDS)
            if done.returncode != 0:
                raise RuntimeError(f'nvcc failed to build {self.source.name}: '
                                   + (done.stderr or done.stdout).strip()[-2000:])
            os.replace(out, target)   # atomic: a concurrent build finds a whole file or none
        return target


def nvcc() -> Optional[str]:
    """Return the nvcc to build with: $CUDA_HOME's, $CUDA_PATH's, /usr/local/cuda's or PATH's."""
    for home in (os.environ.get('CUDA_HOME'), os.environ.get('CUDA_PATH'), '/usr/local/cuda'):
        if home and (Path(home) / 'bin' / 'nvcc').is_file():
            return str(Path(home) / 'bin' / 'nvcc')
    return shutil.which('nvcc')


_LIBRARIES: Dict[Tuple[str, Tuple[int, int]], Library] = {}


def library(source: Path, device: torch.device,
            declare: Callable[[ctypes.CDLL], None]) -> Library:
    """Return source's library for device's architecture, built on first use (.reason if not)."""
    capability = torch.cuda.get_device_capability(device)
    key = (str(source), capability)
    if key not in _LIBRARIES:
        _LIBRARIES[key] = Library(source, capability, declare)
    return _LIBRARIES[key]


def unavailable(source: Path, device: torch.device,
                declare: Callable[[ctypes.CDLL], None]) -> str:
    """Return why source's kernels cannot run on device ('' when they can)."""
    if device.type != 'cuda':
        return 'not a CUDA device'
    return library(source, device, declare).reason
