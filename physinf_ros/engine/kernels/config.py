"""
KernelConfig: which decode kernels run and with which launch shapes, fixed for a decoder's life.

It reads config/kernels.yaml per GPU and says whether a GEMV or an attention split takes the
CUDA kernels (q4_cuda.py, attention_cuda.py) or the Triton ones (ops_triton.py).
"""

from dataclasses import asdict, dataclass, field, fields, replace
import os
from types import MappingProxyType
from typing import Callable, Mapping, Optional, Tuple

import torch

from . import attention_cuda, q4_cuda
from .shapes import AttentionConfig, DEFAULT_GEMV, GemvConfig
from ..weights.gptq import PackedLinear
from ...resources import config_path

# Triton's CPU interpreter (set before triton is imported): no PDL, no L2 hints, small tiles.
INTERPRET = os.environ.get('TRITON_INTERPRET') == '1'


@dataclass(frozen=True)
class KernelConfig:
    """
    How the decode kernels run: launch shapes and switches, fixed for a decoder's life.

    tuned holds launch shapes per (kind, N, K), measured by benchmarks/kernel_sweep.py and kept
    per GPU in config/kernels.yaml; other shapes take defaults[kind]. Attention takes
    attention_shapes[(kv heads, head size)] where listed, else attention. A decoder owns one (see
    for_device); an A/B builds one per arm (with_tuning, with_flag).
    """

    tuned: Mapping[Tuple[str, int, int], GemvConfig] = field(default_factory=dict)
    defaults: Mapping[str, GemvConfig] = field(default_factory=lambda: DEFAULT_GEMV)
    attention: AttentionConfig = AttentionConfig()
    attention_shapes: Mapping[Tuple[int, int], AttentionConfig] = field(default_factory=dict)
    # Weights are read once per step: loaded as first to leave L2, so that they do not push
    # out what is read again (the residual, inputs, attention partials).
    evict_first: bool = True
    # 4-bit GEMVs of 16-bit models in packed fp16 arithmetic (_HALF2_DOT), else float32
    # (exact products, one code per instruction).
    half2: bool = True
    # Those half2 GEMVs in CUDA (q4_gemv.cu: inputs staged once per block, one scale per step
    # of rows) where it can be built; launch shapes from tuned kinds '<kind>_q4cuda', else
    # q4_cuda.launch_shape. Off: the Triton kernel.
    q4_cuda: bool = True
    # The most rows (a verify step's, a short prompt's) the 16-bit rows GEMVs take in one
    # product, padded to 16, 32 or 64; more go to cuBLAS with the norms and activations as
    # PyTorch ops. 16 until the rows kernels outrun cuBLAS at more (docs/PERF.md, issue 52).
    rows_max: int = 16
    # The fewest rows a 4-bit linear takes through the 4-bit rows kernel (its codes read once
    # for all rows); fewer rows (a verify step of k < q4_rows_min drafted tokens) run the step's
    # 4-bit GEMV once a row. Measured (docs/PERF.md, issue 54): the rows kernel's verify costs
    # 5.4 steps for any k on the H100 (v3), one GEMV a row 2.0-3.9 steps for k = 1-4 (v2,
    # H200); the crossover by those figures is about 8 rows, until a swept rows kernel wins.
    q4_rows_min: int = 8
    # GEMVs that add into the residual without splitting K: split K's parts meet in float
    # atomics in the order their programs finish, so the residual's last bits, and a sampled
    # token at a near tie, can vary from run to run. Unsplit, a seeded reply repeats bit for
    # bit, at the cost of the tuned shapes that split K (docs/PERF.md, determinism).
    deterministic: bool = False

    def __post_init__(self):
        if not 16 <= self.rows_max <= 64:
            raise ValueError(f'rows_max is 16 to 64 (the rows kernels pad to 16, 32 or 64 '
                             f'rows), not {self.rows_max}: fix the flag')
        if not 1 <= self.q4_rows_min <= 65:
            raise ValueError(f'q4_rows_min is 1 (every row count on the rows kernel) to 65 '
                             f'(none), not {self.q4_rows_min}: fix the flag')
        object.__setattr__(self, 'tuned', MappingProxyType(dict(self.tuned)))
        object.__setattr__(self, 'defaults', MappingProxyType(dict(self.defaults)))
        object.__setattr__(self, 'attention_shapes',
                           MappingProxyType(dict(self.attention_shapes)))

    @classmethod
    def for_device(cls, device: torch.device,
                   log: Callable[[str], None] = lambda _: None) -> 'KernelConfig':
        """Return the defaults with config/kernels.yaml's entry for this GPU, if it has one."""
        import yaml
        name = torch.cuda.get_device_name(device)
        tuning = yaml.safe_load(config_path('kernels.yaml').read_text()) or {}
        if name not in tuning:
            return cls()
        log(f'kernel launch shapes for this GPU ({name}) from config/kernels.yaml')
        return cls().with_tuning(tuning[name])

    def with_tuning(self, tuning: dict) -> 'KernelConfig':
        """Return this configuration with the launch shapes of a kernels.yaml entry or sweep."""
        tuned = dict(self.tuned)
        for row in tuning.get('gemv', []):
            row = dict(row)
            key = (row.pop('kind'), row.pop('n'), row.pop('k'))
            tuned[key] = GemvConfig(**row)
        attention = replace(self.attention, **tuning.get('attention', {}))
        shapes = dict(self.attention_shapes)
        for row in tuning.get('attention_shapes', []):   # a row lists only what differs
            row = dict(row)
            key = (row.pop('kv_heads'), row.pop('head_dim'))
            shapes[key] = replace(attention, **row)
        return replace(self, tuned=tuned, attention=attention, attention_shapes=shapes)

    def with_gemv(self, kind: str, n: int, k: int, shape: GemvConfig) -> 'KernelConfig':
        """Return this configuration with one GEMV shape's launch shape set."""
        return replace(self, tuned={**self.tuned, (kind, n, k): shape})

    def with_flag(self, name: str, value: str) -> 'KernelConfig':
        """
        Return this configuration with one switch or number set from text, for an A/B.

        name is a switch (evict_first, half2, q4_cuda, deterministic: value 0 or 1), rows_max or
        q4_rows_min (a number) or attention.FIELD (a number, set for every model shape); case
        does not matter (EVICT_FIRST=0 as on the command line).
        """
        owner, _, field_name = name.lower().rpartition('.')
        target = self.attention if owner == 'attention' else self
        current = getattr(target, field_name, None) if owner in ('', 'attention') else None
        if isinstance(current, bool):
            setting = {field_name: value == '1'}
        elif isinstance(current, int):
            setting = {field_name: int(value)}
        else:
            raise ValueError(f'{name} is not a kernel switch or number: choose evict_first, '
                             'half2, q4_cuda, deterministic, rows_max, q4_rows_min or attention.'
                             + '|'.join(f.name for f in fields(AttentionConfig)))
        if not owner:
            return replace(self, **setting)
        return replace(self, attention=replace(self.attention, **setting),
                       attention_shapes={key: replace(shape, **setting)
                                         for key, shape in self.attention_shapes.items()})

    def attention_cuda_path(self, qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor,
                            sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            num_heads: int, head_norms=None) -> bool:
        """Whether this attention's split runs attention_split.cu: set, a GPU that has it."""
        kv_heads, _, dim = k_cache.shape
        if INTERPRET or qkv.device.type != 'cuda' or not self.attention_for(kv_heads, dim).cuda:
            return False
        return (attention_cuda.supported(qkv, pos, cos, sin, k_cache, v_cache, num_heads,
                                         head_norms)
                and not attention_cuda.unavailable(qkv.device)
                and not attention_cuda.oversize(qkv.device, dim,
                                                self.attention_for(kv_heads, dim).num_stages))

    def attention_kernel_note(self, kv_heads: int, head_dim: int, device: torch.device,
                              sliding: bool = False) -> str:
        """
        Return a log line saying which kernel splits this shape's attention on device.

        sliding: the model has sliding-window layers, which the Triton kernel always runs.
        """
        if not self.attention_for(kv_heads, head_dim).cuda:
            return 'attention split: Triton kernel'
        if head_dim not in attention_cuda.HEAD_DIMS:
            sizes = ' and '.join(str(d) for d in attention_cuda.HEAD_DIMS)
            return (f'attention split: Triton kernel, the CUDA kernel is built for head sizes '
                    f'{sizes} only (this model: {head_dim})')
        reason = attention_cuda.unavailable(device)
        if reason:
            return f'attention split: Triton kernel, the CUDA kernel is unavailable: {reason}'
        reason = attention_cuda.oversize(device, head_dim,
                                         self.attention_for(kv_heads, head_dim).num_stages)
        if reason:
            return f'attention split: Triton kernel, the CUDA kernel does not fit: {reason}'
        if sliding:
            return ('attention split: CUDA kernel on the global layers, Triton kernel on the '
                    'sliding-window ones (the CUDA kernel has no window)')
        return 'attention split: CUDA kernel (attention_split.cu)'

    def attention_for(self, kv_heads: int, head_dim: int) -> AttentionConfig:
        """
        Return the attention launch shape of a model with these kv heads and head size.

        A head size past 128 with no attention_shapes row of its own (Gemma 3's 256, untuned)
        takes the GPU's shape with as many key bytes a tile and no deeper a pipeline than at
        128: the Triton kernel's shared memory grows with tile, head size and stages, and 64
        keys of 256 in three stages would need about 200 KB, past what some GPUs give a block.
        """
        shape = self.attention_shapes.get((kv_heads, head_dim))
        if shape is not None or head_dim <= 128:
            return shape or self.attention
        return replace(self.attention, block_t=max(16, self.attention.block_t * 128 // head_dim),
                       num_stages=min(self.attention.num_stages, 2))

    def gemv(self, kind: str, n: int, k: int) -> GemvConfig:
        """Return the launch shape of a kind's GEMV of N outputs and K inputs."""
        config = self.tuned.get((kind, n, k), self.defaults[kind])
        if INTERPRET or k < config.block_k:
            # Tiny shapes (tests, the interpreter): small tiles keep masks exercised and runs
            # quick; residual GEMVs split K in two so the split path is exercised too.
            config = GemvConfig(min(config.block_n, 16), min(config.block_k, 64),
                                2 if 'matvec_add' in kind else 1, config.num_warps,
                                config.tiles_ahead)
        if self.deterministic and config.split_k > 1:
            return replace(config, split_k=1)
        return config

    def stream(self) -> str:
        """Return the L2 eviction hint of loads of data read once per step."""
        return 'evict_first' if self.evict_first and not INTERPRET else ''

    def half2_path(self, dtype: torch.dtype, device: torch.device) -> bool:
        """Packed fp16 arithmetic for 16-bit models on a GPU; float32 models keep float32 sums."""
        return self.half2 and not INTERPRET and device.type == 'cuda' and dtype != torch.float32

    def q4_cuda_path(self, w: PackedLinear, x: torch.Tensor, norm_w: Optional[torch.Tensor],
                     gate_up: bool = False) -> bool:
        """Whether this 4-bit GEMV runs q4_gemv.cu: switched on, half2 sums, a GPU that has it."""
        if not (self.q4_cuda and self.half2_path(w.dtype, x.device)):
            return False
        return (q4_cuda.supported(w, x, norm_w, gate_up)
                and not q4_cuda.unavailable(x.device))

    def q4_kernel_note(self, device: torch.device) -> str:
        """Return a log line saying which kernel runs the 4-bit GEMVs on device, and why."""
        if not self.q4_cuda:
            return '4-bit GEMVs: Triton kernel (q4_cuda switched off)'
        if not self.half2_path(torch.float16, device):
            return '4-bit GEMVs: Triton kernel (float32 sums: half2 off)'
        reason = q4_cuda.unavailable(device)
        if reason:
            return f'4-bit GEMVs: Triton kernel, the CUDA kernels are unavailable: {reason}'
        return '4-bit GEMVs: CUDA kernels (q4_gemv.cu)'

    def q4_cuda_shape(self, kind: str, n: int, k: int, w: PackedLinear, accumulate: bool,
                      device: torch.device):
        """Launch shape of a CUDA 4-bit GEMV: the tuned '<kind>_q4cuda' entry, else the default."""
        tuned = self.tuned.get((kind + '_q4cuda', n, k))
        if tuned is not None:
            shape = q4_cuda.Q4Shape.from_gemv(tuned)
            return replace(shape, split_k=1) if self.deterministic else shape
        return q4_cuda.launch_shape(n, k, w.group_size // 8, kind == 'gate_up',
                                    accumulate and not self.deterministic,
                                    torch.cuda.get_device_properties(device)
                                    .multi_processor_count)

    def facts(self) -> dict:
        """Plain dict for results files."""
        return {'tuned': [{'kind': kind, 'n': n, 'k': k, **asdict(shape)}
                          for (kind, n, k), shape in self.tuned.items()],
                'attention': asdict(self.attention),
                'attention_shapes': [{'kv_heads': kv_heads, 'head_dim': head_dim, **asdict(shape)}
                                     for (kv_heads, head_dim), shape
                                     in self.attention_shapes.items()],
                'evict_first': self.evict_first,
                'half2': self.half2, 'q4_cuda': self.q4_cuda, 'rows_max': self.rows_max,
                'q4_rows_min': self.q4_rows_min, 'deterministic': self.deterministic}


DEFAULT_CONFIG = KernelConfig()
