"""
The 16-bit (bf16, fp16) GEMVs in CUDA (gemv16.cu): built once per machine, launched by ctypes.

kernels.py routes a 16-bit model's QKV, o_proj, gate/up and down GEMVs here on a GPU when its
KernelConfig has gemv16_cuda set; the lm_head keeps the Triton kernel, whose epilogue takes
the argmax. Otherwise, or when this library cannot be built (no nvcc), the Triton kernels
run, which is also what CI checks in the interpreter. cuda_build compiles the library once per
machine and GPU architecture. Launches go on torch's current stream, with programmatic
dependent launch on Hopper and later, so they are captured into the decode step's CUDA graph
like the Triton ones.
"""

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

import torch

from . import cuda_build

SOURCE = Path(__file__).with_name('gemv16.cu')
WARPS = 8           # per block, fixed in gemv16.cu
STEP = 256          # inputs a warp reads per row and step (32 lanes x 16 bytes)
# (outputs per warp, steps in flight per row) that gemv16.cu instantiates, widest first:
# at most 8 row steps in flight per warp (gate/up's rows count twice).
SHAPES = {False: ((4, 2), (2, 4), (2, 2), (1, 8), (1, 4), (1, 2)),
          True: ((2, 2), (1, 4), (1, 2))}
SPLITS = (1, 2, 4, 8)   # K splits tried for residual GEMVs (float atomics)
BLOCKS_PER_SM = 2       # the default shape's target (gemv16.cu holds 3 per SM)


@dataclass(frozen=True)
class Gemv16Shape:
    """Launch shape of one CUDA 16-bit GEMV: outputs per warp, steps in flight, K splits."""

    rows: int
    depth: int
    split_k: int

    def as_gemv(self):
        """Return this shape as kernels.yaml spells it (block_n outputs, block_k inputs)."""
        from .kernels import GemvConfig
        return GemvConfig(WARPS * self.rows, STEP * self.depth, self.split_k, WARPS)

    @classmethod
    def from_gemv(cls, shape) -> 'Gemv16Shape':
        """Read a kernels.yaml (GemvConfig) shape."""
        return cls(shape.block_n // WARPS, shape.block_k // STEP, shape.split_k)


def launch_shape(n: int, k: int, gate_up: bool, accumulate: bool, sms: int) -> Gemv16Shape:
    """
    Return the default launch shape of a CUDA 16-bit GEMV.

    The widest (outputs per warp, depth), then the fewest K splits, that gives BLOCKS_PER_SM
    blocks per SM with every split at least one depth of steps long; else the shape with the
    most blocks. No depth beyond K's steps but the least; K splits only where y accumulates.
    """
    steps = -(-k // STEP)
    best: Tuple[int, Gemv16Shape] = (0, Gemv16Shape(*SHAPES[gate_up][-1], 1))
    for rows, depth in SHAPES[gate_up]:
        if depth > max(steps, 2):
            continue
        for split in SPLITS if accumulate else (1,):
            if split > 1 and -(-steps // split) < depth:
                break
            blocks = -(-n // (WARPS * rows)) * split
            if blocks >= BLOCKS_PER_SM * sms:
                return Gemv16Shape(rows, depth, split)
            best = max(best, (blocks, Gemv16Shape(rows, depth, split)), key=lambda b: b[0])
    return best[1]


def supported(w: torch.Tensor, x: torch.Tensor, norm_w: Optional[torch.Tensor]) -> bool:
    """
    Say whether gemv16.cu takes this weight and input.

    It needs a 16-bit [N, K] weight with K a multiple of 8, a float32 input, and tensors that
    start on 16 bytes (its vector loads).
    """
    tensors = [w, x] + ([norm_w] if norm_w is not None else [])
    return (w.dtype in (torch.float16, torch.bfloat16) and w.dim() == 2 and w.shape[1] % 8 == 0
            and x.dtype == torch.float32
            and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in tensors))


def _declare(handle: ctypes.CDLL) -> None:
    fn = handle.physinf_gemv16
    fn.restype = ctypes.c_int
    # (rows, depth, gate_up, bf16; 5 pointers; n, k, split_k; eps, accumulate, stream, pdl,
    # device), as physinf_gemv16 declares them.
    fn.argtypes = ([ctypes.c_int] * 4 + [ctypes.c_void_p] * 5 + [ctypes.c_int] * 3
                   + [ctypes.c_float, ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int] * 2)
    handle.physinf_gemv16_error.restype = ctypes.c_char_p
    handle.physinf_gemv16_error.argtypes = [ctypes.c_int]


def library(device: torch.device) -> cuda_build.Library:
    """Return gemv16.cu built for device's architecture (.reason if it could not be)."""
    return cuda_build.library(SOURCE, device, _declare)


def unavailable(device: torch.device) -> str:
    """Return why the CUDA 16-bit kernels cannot run on device ('' when they can)."""
    return cuda_build.unavailable(SOURCE, device, _declare)


def gemv(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, norm_w: Optional[torch.Tensor],
         bias: Optional[torch.Tensor], eps: float, gate_up: bool, accumulate: bool,
         shape: Gemv16Shape) -> None:
    """
    Write y = w @ x (+ bias), or add w @ x into y (accumulate), in gemv16.cu.

    norm_w makes the input rms_norm(x) * norm_w; gate_up takes w's two halves as gate and up and
    writes silu(gate) * up: the contract of kernels._matvec_kernel and kernels._gate_up_kernel.
    """
    lib = library(x.device)
    n, k = w.shape
    if gate_up:
        n //= 2
    code = lib.handle.physinf_gemv16(
        shape.rows, shape.depth, int(gate_up), int(w.dtype == torch.bfloat16), w.data_ptr(),
        x.data_ptr(), norm_w.data_ptr() if norm_w is not None else None,
        bias.data_ptr() if bias is not None else None, y.data_ptr(), n, k, shape.split_k, eps,
        int(accumulate), torch.cuda.current_stream(x.device).cuda_stream, int(lib.pdl),
        x.device.index or 0)
    if code:
        reason = lib.handle.physinf_gemv16_error(code).decode()
        raise RuntimeError(f'gemv16 launch failed: {reason} (cuda error {code}; shape {shape}, '
                           f'N {n}, K {k})')
