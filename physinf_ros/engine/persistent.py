"""
Every layer of a decode step in one launch: persistent_step.cu, built by cuda_build.py.

The kernels of kernels.py take ~6 launches per layer, and each launch pays a few microseconds
to start and drain, which at batch 1 is time the weights are not streaming (docs/PERF.md,
session 10). persistent_step.cu runs the same work (the contract of llama.decode_layers) as one
block per SM, with grid barriers between the phases; each warp issues its next phase's first
weights before it waits, so the weights keep loading while the blocks wait for each other.

KernelOps.layers_for picks it when its KernelConfig has `persistent` set and unsupported()
finds nothing against the model, cache and GPU; otherwise the step runs the per-op kernels,
which are its reference in the GPU tests. It measured slower than them (PERF.md, session 11),
so `persistent` is off unless an A/B sets it.
"""

import ctypes
from pathlib import Path
import subprocess
from typing import Dict, Tuple

import torch

from .cuda_build import build
from .gptq import PackedLinear
from .llama import KVCache, Weights

SOURCE = Path(__file__).with_name('persistent_step.cu')
# persistent_step.cu's limits: its attention tiles and per-thread arrays, and its GEMV steps.
HEAD_DIMS = (64, 128)
MAX_GROUP = 8                # query heads per kv head
MAX_GROUP_DIMS = 1024        # group x head_dim
MIN_K = 256                  # GEMV inputs: a warp's step crosses at most one row boundary
DTYPES = (torch.bfloat16, torch.float16)


class _Layer(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in (
        'wqkv', 'bqkv', 'wo', 'w_gate_up', 'w_down', 'attn_norm', 'mlp_norm', 'k_cache',
        'v_cache')]


class _Params(ctypes.Structure):
    # persistent_step.cu's Params, field for field.
    _fields_ = ([(name, ctypes.c_void_p) for name in (
        'layers', 'token', 'pos', 'embed', 'cos', 'sin', 'x', 'qkv', 'attn', 'h', 'part_ml',
        'part_acc', 'head_count', 'barrier')]
        + [(name, ctypes.c_int) for name in (
            'layers_n', 'hidden', 'inter', 'heads', 'kv_heads', 'head_dim', 'max_context')]
        + [('eps', ctypes.c_float), ('scale', ctypes.c_float)])


class _Library:
    """The built persistent_step.cu of one GPU architecture, or why it could not be had."""

    def __init__(self, capability: Tuple[int, int]):
        self.handle = None
        self.reason = ''
        if capability[0] < 8:
            self.reason = f'needs compute capability 8.0 or later (cp.async), not {capability}'
            return
        arch = f'sm_{capability[0]}{capability[1]}'
        try:
            self.handle = ctypes.CDLL(str(build(SOURCE, arch, 'the persistent decode kernel')))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            self.reason = str(exc)
            return
        self.handle.physinf_persistent_block_rows.restype = ctypes.c_int
        self.handle.physinf_persistent_smem.restype = ctypes.c_int
        self.handle.physinf_persistent_smem.argtypes = [ctypes.c_int, ctypes.POINTER(_Params)]
        self.handle.physinf_persistent_layers.restype = ctypes.c_int
        self.handle.physinf_persistent_layers.argtypes = [
            ctypes.c_int, ctypes.POINTER(_Params), ctypes.c_int, ctypes.c_void_p]
        self.handle.physinf_persistent_error.restype = ctypes.c_char_p
        self.handle.physinf_persistent_error.argtypes = [ctypes.c_int]


_LIBRARIES: Dict[Tuple[int, int], _Library] = {}


def library(device: torch.device) -> _Library:
    """Return the library of device's architecture, built on first use (.reason if it failed)."""
    capability = torch.cuda.get_device_capability(device)
    if capability not in _LIBRARIES:
        _LIBRARIES[capability] = _Library(capability)
    return _LIBRARIES[capability]


def unsupported(weights: Weights, cache: KVCache, device: torch.device) -> str:
    """Return why persistent_step.cu cannot run this model and cache on device ('' if it can)."""
    c = weights.config
    if device.type != 'cuda':
        return 'not a CUDA device'
    if weights.dtype not in DTYPES:
        return f'{weights.dtype} weights (it runs bfloat16 and float16)'
    tensors = [weights.embed]
    for layer in weights.layers:
        linears = (layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down)
        if any(isinstance(w, PackedLinear) for w in linears):
            return '4-bit linears (it streams 16-bit weights)'
        tensors += [*linears, layer.attn_norm, layer.mlp_norm]
        tensors += [layer.bqkv] if layer.bqkv is not None else []
    group = c.num_heads // c.num_kv_heads
    if c.head_dim not in HEAD_DIMS:
        return f'head_dim {c.head_dim} (it takes {" or ".join(map(str, HEAD_DIMS))})'
    if c.num_heads % c.num_kv_heads or group > MAX_GROUP or group * c.head_dim > MAX_GROUP_DIMS:
        return f'{group} query heads per kv head of {c.head_dim} dims'
    inputs = (c.hidden_size, c.q_size, c.intermediate_size)
    if any(n % 8 or n < MIN_K for n in inputs):
        return f'GEMV inputs {inputs} (multiples of 8, at least {MIN_K})'
    if not all(t.is_contiguous() and t.data_ptr() % 16 == 0
               for t in tensors + [cache.k, cache.v]):
        return 'tensors not contiguous on 16-byte boundaries'
    lib = library(device)
    if lib.reason:
        return lib.reason
    blocks = torch.cuda.get_device_properties(device).multi_processor_count
    rows = max(-(-(c.q_size + 2 * c.kv_size) // blocks), -(-c.hidden_size // blocks),
               2 * -(-c.intermediate_size // blocks))
    held = lib.handle.physinf_persistent_block_rows()
    if rows > held:
        return f'{rows} GEMV rows per block (it holds {held})'
    bf16 = int(weights.dtype == torch.bfloat16)
    need = lib.handle.physinf_persistent_smem(bf16, ctypes.byref(_shape_params(weights, cache)))
    limit = torch.cuda.get_device_properties(device).shared_memory_per_block_optin
    if not 0 < need <= limit:
        return f'{need} bytes of shared memory per block (the GPU has {limit})'
    return ''


def _shape_params(weights: Weights, cache: KVCache, **pointers) -> '_Params':
    c = weights.config
    return _Params(**pointers, layers_n=c.num_layers, max_context=cache.max_context,
                   hidden=c.hidden_size, inter=c.intermediate_size, heads=c.num_heads,
                   kv_heads=c.num_kv_heads, head_dim=c.head_dim, eps=c.rms_norm_eps,
                   scale=c.head_dim ** -0.5)


class PersistentLayers:
    """
    llama.decode_layers for one model and KV cache, in one launch of persistent_step.cu.

    Holds the kernel's tables and scratch (the residual, q/k/v, attention parts, the barrier);
    call it as decode_layers is called, without ops.
    """

    def __init__(self, weights: Weights, cache: KVCache, device: torch.device):
        c = weights.config
        self.weights, self.cache, self.device = weights, cache, device
        self._library = library(device)
        self.blocks = torch.cuda.get_device_properties(device).multi_processor_count
        group = c.num_heads // c.num_kv_heads
        f32 = {'device': device, 'dtype': torch.float32}
        self.x = torch.zeros(c.hidden_size, **f32)
        self.qkv = torch.zeros(c.q_size + 2 * c.kv_size, **f32)
        self.attn = torch.zeros(c.q_size, **f32)
        self.h = torch.zeros(c.intermediate_size, **f32)
        self.part_ml = torch.zeros(c.num_kv_heads * self.blocks * group * 2, **f32)
        self.part_acc = torch.zeros(c.num_kv_heads * self.blocks * group * c.head_dim, **f32)
        self.head_count = torch.zeros(c.num_kv_heads, device=device, dtype=torch.int32)
        self.barrier = torch.zeros(64, device=device, dtype=torch.int32)

        def ptr(t):
            return t.data_ptr() if t is not None else None
        self._layers = (_Layer * c.num_layers)(*[
            _Layer(ptr(layer.wqkv), ptr(layer.bqkv), ptr(layer.wo), ptr(layer.w_gate_up),
                   ptr(layer.w_down), ptr(layer.attn_norm), ptr(layer.mlp_norm),
                   ptr(cache.k[i]), ptr(cache.v[i]))
            for i, layer in enumerate(weights.layers)])
        self.layer_table = torch.frombuffer(bytearray(self._layers), dtype=torch.uint8).to(device)

    def __call__(self, w: Weights, cache: KVCache, token: torch.Tensor, pos: torch.Tensor,
                 cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if w is not self.weights or cache is not self.cache:
            raise ValueError('PersistentLayers was built for another model or cache')
        params = _shape_params(
            w, cache, layers=self.layer_table.data_ptr(), token=token.data_ptr(),
            pos=pos.data_ptr(), embed=w.embed.data_ptr(), cos=cos.data_ptr(), sin=sin.data_ptr(),
            x=self.x.data_ptr(), qkv=self.qkv.data_ptr(), attn=self.attn.data_ptr(),
            h=self.h.data_ptr(), part_ml=self.part_ml.data_ptr(),
            part_acc=self.part_acc.data_ptr(), head_count=self.head_count.data_ptr(),
            barrier=self.barrier.data_ptr())
        code = self._library.handle.physinf_persistent_layers(
            int(w.dtype == torch.bfloat16), ctypes.byref(params), self.blocks,
            torch.cuda.current_stream(self.device).cuda_stream)
        if code:
            raise RuntimeError('persistent decode kernel launch failed: '
                               f'{self._library.handle.physinf_persistent_error(code).decode()}'
                               f' (cuda error {code})')
        return self.x
