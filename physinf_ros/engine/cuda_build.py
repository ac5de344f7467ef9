"""
Build and load the package's CUDA sources (q4_gemv.cu, attention.cu): nvcc once per machine.

A library is compiled for the GPU's own architecture into models.cache_root
($PHYSINF_ROS_CACHE, else ~/.cache/physinf_ros), named by a hash of the source and the flags,
so an edited kernel is rebuilt and an unchanged one is built once, then loaded with ctypes.
q4_cuda.py and attention_cuda.py declare their entry points and launch from it.
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


def nvcc() -> Optional[str]:
    """Return the nvcc of CUDA_HOME, CUDA_PATH, /usr/local/cuda or PATH, if there is one."""
    for home in (os.environ.get('CUDA_HOME'), os.environ.get('CUDA_PATH'), '/usr/local/cuda'):
        if home and (Path(home) / 'bin' / 'nvcc').is_file():
            return str(Path(home) / 'bin' / 'nvcc')
    return shutil.which('nvcc')


def build(source: Path, arch: str, what: str) -> Path:
    """
    Return the shared library of source for arch (sm_90), building it if it is not cached.

    what names the kernels in the error raised when nvcc is missing or fails (RuntimeError).
    """
    flags = FLAGS + (f'-arch={arch}',)
    digest = hashlib.sha256(source.read_bytes() + ' '.join(flags).encode()).hexdigest()
    cache = cache_root()
    target = cache / f'{source.stem}_{digest[:16]}_{arch}.so'
    if target.is_file():
        return target
    compiler = nvcc()
    if compiler is None:
        raise RuntimeError('nvcc (the CUDA toolkit) was not found: set CUDA_HOME or put nvcc '
                           f'on PATH to build {what}')
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        out = Path(tmp) / target.name
        done = subprocess.run([compiler, *flags, '-o', str(out), str(source)],
                              capture_output=True, text=True, timeout=BUILD_SECONDS)
        if done.returncode != 0:
            raise RuntimeError(f'nvcc failed to build {source.name}: '
                               + (done.stderr or done.stdout).strip()[-2000:])
        os.replace(out, target)   # atomic: a concurrent build finds a whole file or none
    return target


class Library:
    """A CUDA source built for one GPU architecture and loaded, or the reason it could not be."""

    def __init__(self, source: Path, capability: Tuple[int, int], what: str,
                 declare: Callable[[ctypes.CDLL], None]):
        self.arch = f'sm_{capability[0]}{capability[1]}'
        self.pdl = capability[0] >= 9   # programmatic dependent launch: Hopper and later
        self.handle = None
        self.reason = ''
        try:
            self.handle = ctypes.CDLL(str(build(source, self.arch, what)))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            self.reason = str(exc)
            return
        declare(self.handle)


_BUILT: Dict[Tuple[Path, Tuple[int, int]], Library] = {}   # (source, architecture) -> build
_LOADED: Dict[Tuple[Path, int], Library] = {}              # (source, device index) -> build


def load(source: Path, device: torch.device, what: str,
         declare: Callable[[ctypes.CDLL], None]) -> Library:
    """Return source's library for device's architecture, built on first use."""
    # Kept per device index: asking torch for the capability costs ~12 us on the host, and every
    # eager launch looks its library up (PERF.md, session 11, run 13).
    index = device.index if device.index is not None else torch.cuda.current_device()
    if (source, index) not in _LOADED:
        capability = torch.cuda.get_device_capability(index)
        if (source, capability) not in _BUILT:
            _BUILT[source, capability] = Library(source, capability, what, declare)
        _LOADED[source, index] = _BUILT[source, capability]
    return _LOADED[source, index]
