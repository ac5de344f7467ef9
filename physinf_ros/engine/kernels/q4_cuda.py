"""
The 4-bit GPTQ GEMVs in CUDA (q4_gemv.cu), built and loaded by cuda_library.

ops_triton.py routes a PackedLinear's GEMV here on a GPU when its KernelConfig has q4_cuda set
and the half2 sums apply; otherwise, or when this library cannot be built (no nvcc), the Triton
kernel runs, which is also what CI checks in the interpreter.
"""

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

import torch

from .cuda_library import Libraries, Library
from .shapes import GemvConfig
from ..weights.gptq import CODES_PER_WORD, PackedLinear

SOURCE = Path(__file__).with_name('q4_gemv.cu')
THREADS = 256                      # per block, fixed in q4_gemv.cu
COLUMNS = (128, 64, 32, 16)        # columns per block that q4_gemv.cu instantiates
SPLITS = (1, 2, 4, 8, 16)          # K splits tried for residual GEMVs (float atomics)
BLOCKS_PER_SM = 1.5                # the launch shape's target: enough blocks to fill the GPU


@dataclass(frozen=True)
class Q4Shape:
    """Launch shape of one CUDA 4-bit GEMV: columns per block, word rows per step, K splits."""

    cols: int
    unit: int
    split_k: int

    def as_gemv(self):
        """Return this shape as kernels.yaml spells it (block_n, block_k inputs, split_k)."""
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


def supported(w: PackedLinear, x: torch.Tensor, norm_w: Optional[torch.Tensor],
              gate_up: bool = False) -> bool:
    """
    Say whether q4_gemv.cu takes this linear and input.

    It needs a 16-bit model, a float32 input, a norm weight in the model's dtype or, but for
    gate/up, in float32 (Gemma 3's (1 + weight): q4_gemv.cu builds that variant for its QKV only,
    its gate/up being GeGLU, which the Triton kernel fuses), and tensors whose rows start on 16
    bytes (its vector loads).
    """
    n_all = w.codes.shape[1]
    tensors = [w.codes, w.scales, x] + ([norm_w] if norm_w is not None else [])
    norm_dtypes = (w.dtype,) if gate_up else (w.dtype, torch.float32)
    return (w.dtype in (torch.float16, torch.bfloat16) and n_all % 4 == 0
            and (norm_w is None or norm_w.dtype in norm_dtypes)
            and w.group_size % CODES_PER_WORD == 0 and x.dtype == torch.float32
            and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in tensors))


def _declare(handle: ctypes.CDLL) -> None:
    fn = handle.physinf_q4_gemv
    fn.restype = ctypes.c_int
    # (cols, unit, gate_up, bf16, norm_f32; 7 pointers; n, k, n_all, group_rows, split_k; eps,
    # accumulate, stream, pdl, device), as physinf_q4_gemv declares them.
    fn.argtypes = ([ctypes.c_int] * 5 + [ctypes.c_void_p] * 7 + [ctypes.c_int] * 5
                   + [ctypes.c_float, ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int] * 2)
    handle.physinf_cuda_error.restype = ctypes.c_char_p
    handle.physinf_cuda_error.argtypes = [ctypes.c_int]


LIBRARIES = Libraries(lambda capability: Library(SOURCE, capability, _declare))


def library(device: torch.device) -> Library:
    """Return the library of device's architecture, built on first use (.reason if it failed)."""
    return LIBRARIES.get(device)


def unavailable(device: torch.device) -> str:
    """Return why the CUDA 4-bit kernels cannot run on device ('' when they can)."""
    return LIBRARIES.unavailable(device)


def gemv(w: PackedLinear, x: torch.Tensor, y: torch.Tensor, norm_w: Optional[torch.Tensor],
         bias: Optional[torch.Tensor], eps: float, gate_up: bool, accumulate: bool,
         shape: Q4Shape) -> None:
    """
    Write y = w @ x (+ bias), or add w @ x into y (accumulate), in q4_gemv.cu.

    norm_w (the model's dtype, or float32 as supported() allows) makes the input
    rms_norm(x) * norm_w; gate_up takes w's two halves as gate and up and writes
    silu(gate) * up: the contract of the Triton kernel in ops_triton._q4_gemv.
    """
    lib = library(x.device)
    n, k = w.shape
    if gate_up:
        n //= 2
    norm_f32 = norm_w is not None and norm_w.dtype == torch.float32
    code = lib.handle.physinf_q4_gemv(
        shape.cols, shape.unit, int(gate_up), int(w.dtype == torch.bfloat16), int(norm_f32),
        w.codes.data_ptr(), w.scales.data_ptr(),
        w.zeros.data_ptr() if w.zeros is not None else None, x.data_ptr(),
        norm_w.data_ptr() if norm_w is not None else None,
        bias.data_ptr() if bias is not None else None, y.data_ptr(), n, k, w.codes.shape[1],
        w.group_size // CODES_PER_WORD, shape.split_k, eps, int(accumulate),
        torch.cuda.current_stream(x.device).cuda_stream, int(lib.pdl), x.device.index or 0)
    if code:
        raise RuntimeError(f'q4_gemv launch failed: {lib.handle.physinf_cuda_error(code).decode()}'
                           f' (cuda error {code}; shape {shape}, N {n}, K {k})')
