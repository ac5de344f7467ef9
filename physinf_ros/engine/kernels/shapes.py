"""Launch shapes of the decode kernels: a GEMV's tiles and warps, attention's splits."""

from dataclasses import dataclass
from types import MappingProxyType

from .attention_cuda import STAGES


@dataclass(frozen=True)
class GemvConfig:
    """Launch shape of one GEMV: rows per program, columns per step, K splits, warps."""

    block_n: int = 16
    block_k: int = 512
    split_k: int = 1
    num_warps: int = 4
    # Weight tiles each program loads before its PDL wait (the loop then keeps one more in
    # flight): more fills the previous kernel's tail where all programs are resident at once.
    # The rows kernels (tl.dot, software-pipelined by Triton) keep tiles_ahead + 1 tiles in
    # flight instead: their pipeline depth, num_stages, is tiles_ahead + 2 (1: Triton's 3).
    tiles_ahead: int = 1

    def __post_init__(self):
        if self.tiles_ahead not in (1, 2, 3):
            raise ValueError(f'tiles_ahead is 1, 2 or 3, not {self.tiles_ahead}')


@dataclass(frozen=True)
class AttentionConfig:
    """Attention launch shape: at most `splits` programs per kv head, each >= min_chunk keys."""

    splits: int = 32
    min_chunk: int = 128
    block_t: int = 64
    num_warps: int = 4
    # Key tiles in flight per program: the depth of Triton's pipeline of the keys loop, or of
    # the CUDA kernel's ring per warp (one of attention_cuda.STAGES).
    num_stages: int = 3
    # Registers a thread of the split kernel may hold (Triton's maxnreg), 0 for no cap. The
    # directive changes ptxas's schedule even where the kernel needs fewer (docs/PERF.md, v20b;
    # per head size at commit 1248edb).
    max_registers: int = 0
    # The split kernel in CUDA (attention_split.cu, attention_cuda.py) where it builds and takes
    # the shape; the Triton split kernel otherwise (and num_warps, block_t and max_registers
    # are the Triton kernel's alone). docs/PERF.md, v31.
    cuda: bool = False

    def __post_init__(self):
        for name in ('splits', 'block_t'):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f'attention {name} must be a power of two (the kernels tile '
                                 f'by it), not {value}: fix config/kernels.yaml or the flag')
        if self.num_stages < 1 or (self.cuda and self.num_stages not in STAGES):
            raise ValueError(f'attention num_stages must be one of {STAGES} for the CUDA split '
                             f'kernel (1 or more for the Triton one), not {self.num_stages}: '
                             'fix config/kernels.yaml or the flag')
        if self.max_registers and not 24 <= self.max_registers <= 255:
            raise ValueError(f'attention max_registers must be 0 (no cap) or 24-255 (what '
                             f'ptxas takes), not {self.max_registers}: fix config/kernels.yaml '
                             'or the flag')


# Launch shapes per kind for GEMV shapes a GPU's tuning does not list: the H200 sweep's choices,
# with 512-column tiles, which divide every hidden and intermediate size of the three paper
# architectures (3584, 4096, 14336, 18944).
DEFAULT_GEMV = MappingProxyType({
    'rms_matvec': GemvConfig(8, 512, 1, 4), 'gate_up': GemvConfig(8, 256, 1, 4),
    'matvec_add': GemvConfig(16, 512, 1, 8),
    # 4-bit GEMVs tile [block_k inputs, block_n outputs] of GPTQ's [K / 8, N] codes.
    'rms_matvec_q4': GemvConfig(32, 256, 1, 4), 'gate_up_q4': GemvConfig(32, 256, 1, 4),
    'matvec_add_q4': GemvConfig(64, 256, 4, 4),
    # A verify step's GEMVs over up to ROWS_P rows (ops_triton.rows_*): [block_n, block_k]
    # weight tiles, each meeting every row in one tl.dot. Untuned.
    'rows_rms_matvec': GemvConfig(32, 128, 1, 4), 'rows_gate_up': GemvConfig(32, 128, 1, 4),
    'rows_matvec_add': GemvConfig(32, 128, 1, 4),
    # The same over a 4-bit linear's codes (ops_triton._rows_q4_kernel): [block_k inputs,
    # block_n outputs] tiles, block_k cut to the group size where it is smaller (and to 64 at
    # 64 rows). Untuned.
    'rows_rms_matvec_q4': GemvConfig(32, 128, 1, 4),
    'rows_gate_up_q4': GemvConfig(32, 128, 1, 4),
    'rows_matvec_add_q4': GemvConfig(32, 128, 4, 4)})
