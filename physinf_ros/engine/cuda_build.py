"""
Build a CUDA source of the package with nvcc, once per machine, into the package's cache.

The library is compiled for the GPU's own architecture into models.cache_root
($PHYSINF_ROS_CACHE, else ~/.cache/physinf_ros), named by a hash of the source and the flags,
so an edited kernel is rebuilt and an unchanged one is built once. q4_cuda.py and
persistent.py load what this builds with ctypes.
"""

import hashlib
import os
from pathlib import Path
import shutil
import subprocess
import tempfile
from typing import Optional

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
