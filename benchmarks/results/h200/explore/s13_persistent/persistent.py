"""
Every decoder layer of a decode step in one persistent CUDA kernel (persistent_layers.cu).

Session 13's probe, run from physinf_ros/engine/ in runs 1-7 and moved here when it measured
slower than the per-op kernels (PERF.md, session 13): the same file but for these imports and
the build, which used a shared nvcc helper that left the package with it.

The per-op step launches ~5 kernels a layer, and each boundary costs a few microseconds of
idle memory while one kernel drains and the next ramps up. Here one block per SM streams its
share of every layer's weights through a shared-memory ring that a producer thread keeps
full across the phases' grid barriers (PERF.md, sessions 12 and 13). It takes 16-bit dense
Llama-family weights on Hopper (bulk copies need sm_90); `unsupported` says why not otherwise,
and the decoder then runs the per-op kernels. The step's contract is decode_layers': this
token's embedding in, its keys and values stored at pos, the float32 residual out.
"""

import ctypes
import hashlib
import os
from pathlib import Path
import subprocess
import tempfile
from typing import Dict, Tuple

from physinf_ros.engine import q4_cuda
from physinf_ros.engine.gptq import PackedLinear
from physinf_ros.engine.llama import KVCache, Weights
from physinf_ros.engine.models import cache_root
import torch

SOURCE = Path(__file__).with_name('persistent_layers.cu')
MAX_K = 14336          # the widest GEMV input persistent_layers.cu stages (its MAX_K)
MAX_ROWS = 256         # rows of one linear a block may own (its MAX_ROWS)
MAX_HIDDEN = 8192      # the widest normalised input (its MAX_HIDDEN)
STEP = 256             # a warp's step along K: inputs must be a multiple (its STEP)
MIN_K = 1024           # a warp's share of a slot touches at most 3 rows (MAX_ROWS_PER_WARP)
SCRATCH_BYTES = MAX_K * 2
CONSUMERS = 8          # consumer warps a block (its CONSUMERS)


class _LayerWeights(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in (
        'attn_norm', 'wqkv', 'bqkv', 'wo', 'mlp_norm', 'w_gate_up', 'w_down')]


class _Args(ctypes.Structure):
    _fields_ = ([('layers', ctypes.c_void_p), ('num_layers', ctypes.c_int)]
                + [(name, ctypes.c_void_p) for name in (
                    'embed', 'token', 'h', 'qkv', 'attn', 'mlp', 'partial', 'k_cache', 'v_cache',
                    'pos', 'cos', 'sin', 'counters')]
                + [(name, ctypes.c_int) for name in (
                    'hidden', 'inter', 'heads', 'kv_heads', 'max_context', 'splits')]
                + [('eps', ctypes.c_float), ('scale', ctypes.c_float)])


def unsupported(weights: Weights, device: torch.device) -> str:
    """Return why persistent_layers.cu cannot run this model on device ('' when it can)."""
    c = weights.config
    if device.type != 'cuda' or torch.cuda.get_device_capability(device)[0] < 9:
        return 'needs a Hopper or later GPU (bulk copies)'
    if weights.dtype not in (torch.bfloat16, torch.float16):
        return f'needs 16-bit weights, not {weights.dtype}'
    if isinstance(weights.layers[0].wqkv, PackedLinear):
        return 'needs dense weights (4-bit linears run the per-op kernels)'
    group = c.num_heads // c.num_kv_heads
    if c.head_dim not in (64, 128):
        return f'needs head_dim 64 or 128, not {c.head_dim}'
    if CONSUMERS * (c.head_dim + 2) * group * 4 > SCRATCH_BYTES:
        return f'{group} query heads per kv head do not fit its attention scratch'
    for name, k in (('hidden_size', c.hidden_size), ('q heads x head_dim', c.q_size),
                    ('intermediate_size', c.intermediate_size)):
        if k % STEP or not MIN_K <= k <= MAX_K:
            return f'needs {name} a multiple of {STEP} in {MIN_K}..{MAX_K}, not {k}'
    if c.hidden_size > MAX_HIDDEN:
        return f'needs hidden_size <= {MAX_HIDDEN}, not {c.hidden_size}'
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    rows = max(c.q_size + 2 * c.kv_size, c.hidden_size, c.intermediate_size)
    if -(-rows // sms) > MAX_ROWS:
        return f'{rows} rows over {sms} SMs exceed {MAX_ROWS} a block'
    if sms < c.num_kv_heads:
        return f'needs a block per kv head ({c.num_kv_heads}), the GPU has {sms} SMs'
    return ''


_LIBRARIES: Dict[Tuple[str, int, int, bool], ctypes.CDLL] = {}


def build(source: Path, flags, tag: str) -> Path:
    """Build source into the package's cache folder once (q4_cuda's compiler and flags)."""
    flags = q4_cuda._FLAGS + tuple(flags)
    digest = hashlib.sha256(source.read_bytes() + ' '.join(flags).encode()).hexdigest()
    target = cache_root() / f'{source.stem}_{digest[:16]}_{tag}.so'
    if target.is_file():
        return target
    nvcc = q4_cuda._nvcc()
    if nvcc is None:
        raise RuntimeError('nvcc was not found')
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        done = subprocess.run([nvcc, *flags, '-o', str(out), str(source)],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f'nvcc failed: {(done.stderr or done.stdout)[-2000:]}')
        os.replace(out, target)
    return target


def _library(arch: str, head_dim: int, group: int, bf16: bool) -> ctypes.CDLL:
    key = (arch, head_dim, group, bf16)
    if key not in _LIBRARIES:
        flags = (f'-arch={arch}', f'-DHEAD_DIM={head_dim}', f'-DGROUP={group}')
        flags += ('-DWEIGHT_BF16',) if bf16 else ()
        lib = ctypes.CDLL(str(build(SOURCE, flags, f'{arch}_d{head_dim}g{group}')))
        lib.physinf_layers_launch.restype = ctypes.c_int
        lib.physinf_layers_launch.argtypes = [ctypes.POINTER(_Args), ctypes.c_int,
                                              ctypes.c_void_p]
        lib.physinf_cuda_error.restype = ctypes.c_char_p
        lib.physinf_cuda_error.argtypes = [ctypes.c_int]
        _LIBRARIES[key] = lib
    return _LIBRARIES[key]


class PersistentLayers:
    """
    decode_layers as one launch, bound to a decoder's weights, cache and step state.

    token [1] (long) and pos [1] (int32) are the decoder's device tensors, read by the kernel
    at every launch, so one captured graph serves every step. Raises RuntimeError (with the
    reason) when the kernel cannot be built; check `unsupported` first.
    """

    def __init__(self, weights: Weights, cache: KVCache, cos: torch.Tensor, sin: torch.Tensor,
                 token: torch.Tensor, pos: torch.Tensor):
        c = weights.config
        device = weights.embed.device
        major, minor = torch.cuda.get_device_capability(device)
        group = c.num_heads // c.num_kv_heads
        try:
            self._lib = _library(f'sm_{major}{minor}a' if major == 9 else f'sm_{major}{minor}',
                                 c.head_dim, group, weights.dtype == torch.bfloat16)
        except (OSError, subprocess.SubprocessError) as exc:
            raise RuntimeError(str(exc)) from exc
        self.blocks = torch.cuda.get_device_properties(device).multi_processor_count
        splits = self.blocks // c.num_kv_heads

        def ptr(t):
            return None if t is None else t.data_ptr()

        table = (_LayerWeights * c.num_layers)(*[
            _LayerWeights(ptr(w.attn_norm), ptr(w.wqkv), ptr(w.bqkv), ptr(w.wo), ptr(w.mlp_norm),
                          ptr(w.w_gate_up), ptr(w.w_down)) for w in weights.layers])
        self._table = torch.frombuffer(bytearray(table), dtype=torch.uint8).to(device)
        f32 = {'device': device, 'dtype': torch.float32}
        self.h = torch.empty(c.hidden_size, **f32)
        self._buffers = (torch.empty(c.q_size + 2 * c.kv_size, **f32),
                         torch.empty(c.q_size, **f32), torch.empty(c.intermediate_size, **f32),
                         torch.empty(c.num_kv_heads * splits * group * (c.head_dim + 2), **f32))
        # Zero between launches: the kernel's last block zeroes them for the next one.
        self._counters = torch.zeros(1 + c.num_kv_heads, device=device, dtype=torch.int32)
        self._keep = (weights, cache, cos, sin, token, pos)   # the pointers below stay valid
        qkv, attn, mlp, partial = self._buffers
        self._args = _Args(
            self._table.data_ptr(), c.num_layers, ptr(weights.embed), ptr(token), ptr(self.h),
            ptr(qkv), ptr(attn), ptr(mlp), ptr(partial), ptr(cache.k), ptr(cache.v), ptr(pos),
            ptr(cos), ptr(sin), ptr(self._counters), c.hidden_size, c.intermediate_size,
            c.num_heads, c.num_kv_heads, cache.max_context, splits, c.rms_norm_eps,
            c.head_dim ** -0.5)

    def __call__(self) -> torch.Tensor:
        """Launch every layer for the token at pos on the current stream; return the residual."""
        stream = torch.cuda.current_stream(self.h.device).cuda_stream
        code = self._lib.physinf_layers_launch(ctypes.byref(self._args), self.blocks, stream)
        if code:
            reason = self._lib.physinf_cuda_error(code).decode()
            raise RuntimeError(f'persistent_layers launch failed: {reason} (cuda error {code})')
        return self.h
