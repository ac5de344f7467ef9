"""
The attention split kernel in CUDA (attention_split.cu), built and loaded by cuda_library.

kernels.rope_attention launches it in place of the Triton split kernel where the decoder's
KernelConfig sets attention cuda for the model's shape (config/kernels.yaml), the cache is 16-bit
and the shape is one it instantiates; otherwise, or when this library cannot be built (no nvcc),
the Triton kernel runs, which is also what CI checks in the interpreter. Either way the Triton
reduce kernel merges the splits' partials.
"""

import ctypes
from pathlib import Path
from typing import Dict, Optional, Tuple

import torch

from .cuda_library import Libraries, Library
from .ops_torch import HeadNorms
from ..device import device_index

SOURCE = Path(__file__).with_name('attention_split.cu')
HEAD_DIMS = (64, 128)     # head sizes attention_split.cu instantiates
MAX_GROUP = 8             # query heads per kv head: rows 0..7 of its 16-row mma tiles
STAGES = (2, 3)           # key tiles in flight a warp it builds (AttentionConfig.num_stages)


def _declare(handle: ctypes.CDLL) -> None:
    fn = handle.physinf_attn_split
    fn.restype = ctypes.c_int
    # (head_dim, bf16; 11 pointers; max_context; scale, norm_eps; group, group_p, num_heads,
    # kv_heads, splits, min_chunk, stages, pdl; stream), as physinf_attn_split declares them.
    fn.argtypes = ([ctypes.c_int] * 2 + [ctypes.c_void_p] * 11 + [ctypes.c_int]
                   + [ctypes.c_float] * 2 + [ctypes.c_int] * 8 + [ctypes.c_void_p])
    handle.physinf_attn_error.restype = ctypes.c_char_p
    handle.physinf_attn_error.argtypes = [ctypes.c_int]
    for name in ('physinf_attn_shared_bytes', 'physinf_attn_shared_limit'):
        getattr(handle, name).restype = ctypes.c_int
    handle.physinf_attn_shared_bytes.argtypes = [ctypes.c_int, ctypes.c_int]
    handle.physinf_attn_shared_limit.argtypes = [ctypes.c_int]


LIBRARIES = Libraries(lambda capability: Library(SOURCE, capability, _declare))


def supported(qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int,
              head_norms: Optional[HeadNorms] = None) -> bool:
    """
    Say whether attention_split.cu takes this attention.

    A float16 or bfloat16 cache of head size 64 or 128, at most MAX_GROUP query heads a kv
    head, float32 qkv and RoPE tables, an int32 pos, and contiguous tensors, the caches on 16
    bytes (its 16-byte copies of cache rows); head norms in the cache's dtype (it reads them
    so: Gemma 3's float32 norms take the Triton kernel).
    """
    kv_heads, _, dim = k_cache.shape
    caches = (k_cache, v_cache)
    if head_norms is not None and not all(
            norm.dtype == k_cache.dtype and norm.is_contiguous() and norm.shape == (dim,)
            for norm in head_norms[:2]):
        return False
    return (k_cache.dtype in (torch.float16, torch.bfloat16) and v_cache.dtype == k_cache.dtype
            and dim in HEAD_DIMS and num_heads % kv_heads == 0
            and num_heads // kv_heads <= MAX_GROUP and qkv.dtype == torch.float32
            and cos.dtype == sin.dtype == torch.float32 and pos.dtype == torch.int32
            and all(t.is_contiguous() for t in (qkv, cos, sin, *caches))
            and all(t.data_ptr() % 16 == 0 for t in caches))


def unavailable(device: torch.device) -> str:
    """Return why the CUDA split kernel cannot run on device ('' when it can)."""
    return LIBRARIES.unavailable(device)


_OVERSIZE: Dict[Tuple[int, int, int], str] = {}   # (device index, head size, stages) -> reason


def oversize(device: torch.device, head_dim: int, stages: int) -> str:
    """
    Return why a block of this head size and ring depth does not fit device ('' when it does).

    A block's shared memory grows with its ring (num_stages): 110 KB at head size 128 with 3
    stages, more than some GPUs give a block (an L4: 99 KB). The library must be available. Each
    (device, head size, stages) is asked once: eager steps call this at every launch.
    """
    index = device_index(device)
    key = (index, head_dim, stages)
    if key not in _OVERSIZE:
        lib = LIBRARIES.get(device)
        need = lib.handle.physinf_attn_shared_bytes(head_dim, stages)
        limit = lib.handle.physinf_attn_shared_limit(index)
        _OVERSIZE[key] = '' if need <= limit else (
            f'a block at head size {head_dim} with num_stages {stages} takes {need} bytes of '
            f'shared memory and this GPU gives a block {limit}: set attention num_stages 2 for '
            'this GPU in config/kernels.yaml')
    return _OVERSIZE[key]


def split(qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
          k_cache: torch.Tensor, v_cache: torch.Tensor, maxs: torch.Tensor, sums: torch.Tensor,
          accs: torch.Tensor, num_heads: int, group_p: int, splits: int,
          min_chunk: int, stages: int, scale: Optional[float] = None,
          head_norms: Optional[HeadNorms] = None) -> None:
    """
    Launch the split kernel: the contract of ops_triton._attn_split_kernel.

    Rotates q and this token's k at pos, stores k and v at pos, and writes each split's partial
    (maxs, sums, accs in rows of group_p a split) for ops_triton._attn_reduce_kernel; stages (one
    of STAGES) key tiles are in flight per warp; scores are scaled by scale (1 / sqrt(D) unless
    given); head_norms (q_norm, k_norm, eps) RMS-norm the q and k heads first.
    """
    lib = LIBRARIES.get(qkv.device)
    kv_heads, max_context, dim = k_cache.shape
    q_norm, k_norm, norm_eps = head_norms if head_norms is not None else (None, None, 0.0)
    code = lib.handle.physinf_attn_split(
        dim, int(k_cache.dtype == torch.bfloat16), qkv.data_ptr(), k_cache.data_ptr(),
        v_cache.data_ptr(), pos.data_ptr(), cos.data_ptr(), sin.data_ptr(),
        None if q_norm is None else q_norm.data_ptr(),
        None if k_norm is None else k_norm.data_ptr(), maxs.data_ptr(), sums.data_ptr(),
        accs.data_ptr(), max_context, dim ** -0.5 if scale is None else scale, norm_eps,
        num_heads // kv_heads,
        group_p, num_heads, kv_heads, splits, min_chunk, stages, int(lib.pdl),
        torch.cuda.current_stream(qkv.device).cuda_stream)
    if code:
        raise RuntimeError(f'attention split launch failed: '
                           f'{lib.handle.physinf_attn_error(code).decode()} (cuda error {code}; '
                           f'{num_heads} heads, {kv_heads} kv heads, head size {dim}, '
                           f'{stages} stages)')
