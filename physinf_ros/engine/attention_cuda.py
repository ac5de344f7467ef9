"""
Decode attention in CUDA (attention.cu): one launch per layer, built once per machine with nvcc.

kernels.rope_attention routes here on a GPU when its KernelConfig has attention_cuda set and
the cache is one attention.cu takes (16-bit, head_dim 64 or 128, at most 8 query heads per kv
head); otherwise, or when the library cannot be built, the Triton split and reduce kernels run,
which is also what CI checks in the interpreter. The contract is theirs: q and k rotated for
pos, k and v stored at pos, GQA attention over 0..pos, float32 out. A kv head's splits
(AttentionConfig.cuda_splits) are one thread-block cluster that merges its partials in
distributed shared memory, so the launch needs Hopper (sm_90) or later.
"""

import ctypes
from pathlib import Path

import torch

from . import cuda_build

SOURCE = Path(__file__).with_name('attention.cu')
HEAD_DIMS = (64, 128)    # head dims attention.cu instantiates
MAX_GROUP = 8            # query heads per kv head it holds


def _declare(handle: ctypes.CDLL) -> None:
    fn = handle.physinf_attention
    fn.restype = ctypes.c_int
    # (head_dim, bf16, splits; qkv, k_cache, v_cache, pos, cos, sin, out; max_context, scale,
    # group, num_heads, kv_heads, min_chunk, pdl; stream), as physinf_attention declares them.
    fn.argtypes = ([ctypes.c_int] * 3 + [ctypes.c_void_p] * 7 + [ctypes.c_int, ctypes.c_float]
                   + [ctypes.c_int] * 5 + [ctypes.c_void_p])
    handle.physinf_attention_error.restype = ctypes.c_char_p
    handle.physinf_attention_error.argtypes = [ctypes.c_int]


def library(device: torch.device) -> cuda_build.Library:
    """Return the library of device's architecture, built on first use (.reason if it failed)."""
    return cuda_build.load(SOURCE, device, 'the CUDA attention kernel', _declare)


def unavailable(device: torch.device) -> str:
    """Return why the CUDA attention kernel cannot run on device ('' when it can)."""
    if device.type != 'cuda':
        return 'not a CUDA device'
    lib = library(device)
    if lib.reason:
        return lib.reason
    if not lib.pdl:
        return f'thread-block clusters need sm_90 or later, this GPU is {lib.arch}'
    return ''


def supported(qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, k_cache: torch.Tensor,
              v_cache: torch.Tensor, num_heads: int) -> bool:
    """Say whether attention.cu takes these tensors (else the Triton kernels do)."""
    kv_heads, _, dim = k_cache.shape
    tensors = (qkv, pos, cos, k_cache, v_cache)
    return (k_cache.dtype in (torch.bfloat16, torch.float16) and v_cache.dtype == k_cache.dtype
            and dim in HEAD_DIMS and num_heads % kv_heads == 0
            and num_heads // kv_heads <= MAX_GROUP and qkv.dtype == torch.float32
            and pos.dtype == torch.int32 and cos.dtype == torch.float32
            and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in tensors))


def rope_attention(qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int, splits: int,
                   min_chunk: int) -> torch.Tensor:
    """Return float32 [Hq * D] attention of qkv's queries over the cache (kernels' contract)."""
    lib = library(qkv.device)
    kv_heads, max_context, dim = k_cache.shape
    out = torch.empty(num_heads * dim, device=qkv.device, dtype=torch.float32)
    code = lib.handle.physinf_attention(
        dim, int(k_cache.dtype == torch.bfloat16), splits, qkv.data_ptr(), k_cache.data_ptr(),
        v_cache.data_ptr(), pos.data_ptr(), cos.data_ptr(), sin.data_ptr(), out.data_ptr(),
        max_context, dim ** -0.5, num_heads // kv_heads, num_heads, kv_heads, min_chunk,
        int(lib.pdl), torch.cuda.current_stream(qkv.device).cuda_stream)
    if code:
        raise RuntimeError('attention launch failed: '
                           f'{lib.handle.physinf_attention_error(code).decode()} (cuda error '
                           f'{code}; head_dim {dim}, {num_heads} heads, {kv_heads} kv heads)')
    return out
