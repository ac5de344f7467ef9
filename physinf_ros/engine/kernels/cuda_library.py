"""
The engine's CUDA sources, built once per machine with nvcc and loaded by ctypes.

The sources are q4_gemv.cu (q4_cuda.py) and attention_split.cu (attention_cuda.py). Each is
compiled for the GPU's own architecture into the package's cache folder (models.cache_root:
$PHYSINF_ROS_CACHE, else ~/.cache/physinf_ros), named by a hash of the source and the flags, so
an edited kernel is rebuilt and an unchanged one is built once. A source that cannot be built
(no nvcc, a compiler error) leaves its reason, and the Triton kernels run in its place. Launches
go on torch's current stream, with programmatic dependent launch on Hopper and later, so they
are captured into the decode step's CUDA graph like the Triton ones.
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

from ..device import device_index
from ..weights.source import cache_root

FLAGS = ('-O3', '-std=c++17', '-shared', '-Xcompiler', '-fPIC')
BUILD_SECONDS = 600


def nvcc() -> Optional[str]:
    """Return the path of nvcc: under $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, else on PATH."""
    for home in (os.environ.get('CUDA_HOME'), os.environ.get('CUDA_PATH'), '/usr/local/cuda'):
        if home and (Path(home) / 'bin' / 'nvcc').is_file():
            return str(Path(home) / 'bin' / 'nvcc')
    return shutil.which('nvcc')


class Library:
    """One source built for one GPU architecture (handle), or the reason it could not be had."""

    def __init__(self, source: Path, capability: Tuple[int, int],
                 declare: Callable[[ctypes.CDLL], None]):
        self.source = source
        self.arch = f'sm_{capability[0]}{capability[1]}'
        self.pdl = capability[0] >= 9
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
            raise RuntimeError(f'nvcc (the CUDA toolkit) was not found: set CUDA_HOME or put nvcc '
                               f'on PATH to build {self.source.name}')
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


class Libraries:
    """
    The builds of one source, one per architecture, looked up by device.

    make(capability) returns the build (a Library). Kept per device index: every eager launch
    looks its library up, and asking torch for the capability was about half of that check's
    12.6 us (docs/PERF.md, commits 2531d40 and b889ad1).
    """

    def __init__(self, make: Callable[[Tuple[int, int]], Library]):
        self.make = make
        self.by_arch: Dict[Tuple[int, int], Library] = {}
        self.by_device: Dict[int, Library] = {}

    def get(self, device: torch.device) -> Library:
        """Return the library of device's architecture, built on first use."""
        index = device_index(device)
        if index not in self.by_device:
            capability = torch.cuda.get_device_capability(index)
            if capability not in self.by_arch:
                self.by_arch[capability] = self.make(capability)
            self.by_device[index] = self.by_arch[capability]
        return self.by_device[index]

    def unavailable(self, device: torch.device) -> str:
        """Return why this source's kernels cannot run on device ('' when they can)."""
        if device.type != 'cuda':
            return 'not a CUDA device'
        return self.get(device).reason
