"""
The 4-bit GPTQ GEMVs in CUDA (q4_gemv.cu): built once per machine with nvcc, launched by ctypes.

kernels.py routes a PackedLinear's GEMV here on a GPU when its KernelConfig has q4_cuda set
and the half2 sums apply; otherwise, or when this library cannot be built (no nvcc), the Triton
kernel runs, which is also what CI checks in the interpreter. The library is compiled for the
GPU's own architecture into the package's cache folder (models.cache_root: $PHYSINF_ROS_CACHE,
else ~/.cache/physinf_ros), named by a hash of the source and the flags, so an edited kernel is
rebuilt and an unchanged one is built once. Launches go on torch's current stream, with
programmatic dependent launch on Hopper and later, so they are captured into the decode step's
CUDA graph like the Triton ones.
"""

import ctypes
from dataclasses import dataclass
import hashlib
import os
from pathlib import Path
import shutil
import subprocess
import tempfile
from typing import Dict, Optional, Tuple

import torch

from .gptq import CODES_PER_WORD, PackedLinear
from .models import cache_root

SOURCE = Path(__file__).with_name('q4_gemv.cu')
THREADS = 256                      # per block, fixed in q4_gemv.cu
COLUMNS = (128, 64, 32, 16)        # columns per block that q4_gemv.cu instantiates
SPLITS = (1, 2, 4, 8, 16)          # K splits tried for residual GEMVs (float atomics)
BLOCKS_PER_SM = 1.5                # the launch shape's target: enough blocks to fill the GPU
_FLAGS = ('-O3', '-std=c++17', '-shared', '-Xcompiler', '-fPIC')
_BUILD_SECONDS = 600


@dataclass(frozen=True)
class Q4Shape:
    """Launch shape of one CUDA 4-bit GEMV: columns per block, word rows per step, K splits."""

    cols: int
    unit: int
    split_k: int

    def as_gemv(self):
        """Return this shape as kernels.yaml spells it (block_n, block_k inputs, split_k)."""
        from .kernels import GemvConfig
        return GemvConfig(self.cols, self.unit * CODES_PER_WORD, self.split_k, THREADS // 32)

    @classmethod
    def from_gemv(cls, shape) -> 'Q4Shape':
        """Read a kernels.yaml (GemvConfig) shape."""
        return cls(shape.block_n, shape.block_k // CODES_PER_WORD, shape.split_k)


def unit_rows(group_rows: int, gate_up: bool) -> int:
    """
    Return the word rows a thread takes per step.

    4 for gate/up (its two tiles are live at once), else 8 where a group holds 8 rows; a step
    stays within one group, so one scale serves it.
    """
    return 4 if gate_up or group_rows % 8 else 8


def launch_shape(n: int, k: int, group_rows: int, gate_up: bool, accumulate: bool,
                 sms: int) -> Q4Shape:
    """
    Return the default launch shape of a CUDA 4-bit GEMV.

    The widest column block, then the fewest K splits, that gives BLOCKS_PER_SM blocks per SM
    without idle row lanes (each of a block's 256 / (cols / 4) row lanes gets a step); else the
    shape with the most blocks. K splits only where y accumulates.
    """
    unit = unit_rows(group_rows, gate_up)
    steps = k // CODES_PER_WORD // unit
    best: Tuple[int, Q4Shape] = (0, Q4Shape(COLUMNS[-1], unit, 1))
    for cols in COLUMNS:
        lanes = THREADS // (cols // 4)
        for split in SPLITS if accumulate else (1,):
            per_split = -(-steps // split)
            if per_split < lanes and split > 1:
                break
            blocks = -(-n // cols) * -(-steps // per_split)
            if blocks >= BLOCKS_PER_SM * sms:
                return Q4Shape(cols, unit, split)
            best = max(best, (blocks, Q4Shape(cols, unit, split)), key=lambda b: b[0])
    return best[1]


def supported(w: PackedLinear, x: torch.Tensor, norm_w: Optional[torch.Tensor]) -> bool:
    """
    Say whether q4_gemv.cu takes this linear and input.

    It needs a 16-bit model, a float32 input, and tensors whose rows start on 16 bytes (its
    vector loads).
    """
    n_all = w.codes.shape[1]
    tensors = [w.codes, w.scales, x] + ([norm_w] if norm_w is not None else [])
    return (w.dtype in (torch.float16, torch.bfloat16) and n_all % 4 == 0
            and w.group_size % CODES_PER_WORD == 0 and x.dtype == torch.float32
            and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in tensors))


class _Library:
    """The built q4_gemv.cu of one GPU architecture, or the reason it could not be had."""

    def __init__(self, capability: Tuple[int, int]):
        self.arch = f'sm_{capability[0]}{capability[1]}'
        self.pdl = capability[0] >= 9
        self.handle = None
        self.reason = ''
        try:
            self.handle = ctypes.CDLL(str(self._build()))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            self.reason = str(exc)
            return
        fn = self.handle.physinf_q4_gemv
        fn.restype = ctypes.c_int
        # (cols, unit, gate_up, bf16; 7 pointers; n, k, n_all, group_rows, split_k; eps,
        # accumulate, stream, pdl, device), as physinf_q4_gemv declares them.
        fn.argtypes = ([ctypes.c_int] * 4 + [ctypes.c_void_p] * 7 + [ctypes.c_int] * 5
                       + [ctypes.c_float, ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int] * 2)
        self.handle.physinf_cuda_error.restype = ctypes.c_char_p
        self.handle.physinf_cuda_error.argtypes = [ctypes.c_int]

    def _build(self) -> Path:
        flags = _FLAGS + (f'-arch={self.arch}',)
        digest = hashlib.sha256(SOURCE.read_bytes() + ' '.join(flags).encode()).hexdigest()
        cache = cache_root()
        target = cache / f'q4_gemv_{digest[:16]}_{self.arch}.so'
        if target.is_file():
            return target
        nvcc = _nvcc()
        if nvcc is None:
            raise RuntimeError('nvcc (the CUDA toolkit) was not found: set CUDA_HOME or put nvcc '
                               'on PATH to build the CUDA 4-bit kernels')
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            out = Path(tmp) / target.name
            done = subprocess.run([nvcc, *flags, '-o', str(out), str(SOURCE)],
                                  capture_output=True, text=True, timeout=_BUILD_SECONDS)
            if done.returncode != 0:
                raise RuntimeError(f'nvcc failed to build {SOURCE.name}: '
                                   + (done.stderr or done.stdout).strip()[-2000:])
            os.replace(out, target)   # atomic: a concurrent build finds a whole file or none
        return target


def _nvcc() -> Optional[str]:
    for home in (os.environ.get('CUDA_HOME'), os.environ.get('CUDA_PATH'), '/usr/local/cuda'):
        if home and (Path(home) / 'bin' / 'nvcc').is_file():
            return str(Path(home) / 'bin' / 'nvcc')
    return shutil.which('nvcc')


_LIBRARIES: Dict[Tuple[int, int], _Library] = {}   # architecture -> its build
_DEVICE_LIBRARIES: Dict[int, _Library] = {}         # device index -> its architecture's build


def library(device: torch.device) -> _Library:
    """Return the library of device's architecture, built on first use (.reason if it failed)."""
    # Kept per device index: every eager 4-bit launch looks the library up, and asking torch for
    # the capability was about half of that check's 12.6 us (PERF.md, sessions 11 and 12).
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _DEVICE_LIBRARIES:
        capability = torch.cuda.get_device_capability(index)
        if capability not in _LIBRARIES:
            _LIBRARIES[capability] = _Library(capability)
        _DEVICE_LIBRARIES[index] = _LIBRARIES[capability]
    return _DEVICE_LIBRARIES[index]


def unavailable(device: torch.device) -> str:
    """Return why the CUDA 4-bit kernels cannot run on device ('' when they can)."""
    if device.type != 'cuda':
        return 'not a CUDA device'
    return library(device).reason


def gemv(w: PackedLinear, x: torch.Tensor, y: torch.Tensor, norm_w: Optional[torch.Tensor],
         bias: Optional[torch.Tensor], eps: float, gate_up: bool, accumulate: bool,
         shape: Q4Shape) -> None:
    """
    Write y = w @ x (+ bias), or add w @ x into y (accumulate), in q4_gemv.cu.

    norm_w makes the input rms_norm(x) * norm_w; gate_up takes w's two halves as gate and up and
    writes silu(gate) * up: the contract of the Triton kernel in kernels._q4_gemv.
    """
    lib = library(x.device)
    n, k = w.shape
    if gate_up:
        n //= 2
    code = lib.handle.physinf_q4_gemv(
        shape.cols, shape.unit, int(gate_up), int(w.dtype == torch.bfloat16), w.codes.data_ptr(),
        w.scales.data_ptr(), w.zeros.data_ptr() if w.zeros is not None else None, x.data_ptr(),
        norm_w.data_ptr() if norm_w is not None else None,
        bias.data_ptr() if bias is not None else None, y.data_ptr(), n, k, w.codes.shape[1],
        w.group_size // CODES_PER_WORD, shape.split_k, eps, int(accumulate),
        torch.cuda.current_stream(x.device).cuda_stream, int(lib.pdl), x.device.index or 0)
    if code:
        raise RuntimeError(f'q4_gemv launch failed: {lib.handle.physinf_cuda_error(code).decode()}'
                           f' (cuda error {code}; shape {shape}, N {n}, K {k})')
