"""
Triton kernels for the batch-1 decode step: the CUDA twins of ops_torch.py.

Batch-1 decode reads every weight once per token, so each kernel is a matrix-vector product
that must stream its weights at full bandwidth, with the small work around it fused in so the
step has few launches:
  rms_matvec        RMSNorm prologue + GEMV (+ bias): QKV and the lm_head
  rms_gate_up_silu  RMSNorm prologue + gate and up GEMVs + SiLU(gate) * up epilogue
                    (rms_gate_up_gelu: GeGLU's gelu_tanh(gate) * up, Gemma 3)
  head_norm         RMSNorm of each q and k head of the QKV output, in place (Qwen3, Gemma 3
                    over rows; their step's head norms are rope_attention's)
  matvec_add        split-K GEMV accumulated atomically into the float32 residual
  rope_attention    split-K GQA attention over the filled cache (flash-decoding), + reduce;
                    the split kernel also applies RoPE and stores this token's k and v at `pos`,
                    and given head_norms it RMS-norms the q and k heads first (Qwen3, Gemma 3);
                    a sliding window (Gemma 3's local layers) starts the keys at pos - window + 1
  greedy_head       final RMSNorm + lm_head GEMV with the argmax folded into its epilogue
  embed             the token's embedding row as the float32 residual, the step's first kernel
  step_end          a sampled step's reply to the host, as greedy_head's last kernel gives it
  rows_*            the GEMVs and attention over the rows of a verify step or a short prompt
                    (kernels/rows.py): 16-bit weights over up to KernelConfig.rows_max rows,
                    4-bit ones from KernelConfig.q4_rows_min to Q4_ROWS rows, each weight read
                    once for all rows (fewer rows: the step's 4-bit GEMV once a row)
  dequantize        a 4-bit linear's float weight in one pass, for a longer prompt's products
A step answers the host itself: its last kernel writes the token and the nanoseconds since embed
stamped %globaltimer into a pinned host row, so neither a copy nor a timing event follows it.
GPTQ 4-bit linears (PackedLinear) take the same roles through _q4_gemv_kernel, which reads
GPTQ's own layout, or on a GPU through the CUDA kernels of q4_gemv.cu (q4_cuda.py). `pos` is
read on the device, so one captured graph serves every position.
On Hopper every kernel is launched with programmatic dependent launch (PDL): it is scheduled
while its predecessor drains, reads its first weight tile (attention: its first cached keys
and values), and only then waits for the predecessor's results, which hides most of the gap
between the ~200 kernels of a step. Weight loads carry the evict-first L2 hint: every weight
is read once per step. With TRITON_INTERPRET=1 the same kernels run on the CPU, which is how
CI checks them.
"""

import math
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from . import attention_cuda, ops_torch, q4_cuda
from .config import DEFAULT_CONFIG, INTERPRET, KernelConfig
from .ops_torch import HeadNorms
from .shapes import GemvConfig
from ..model.llama import gate_up_block, PromptOps
from ..weights.gptq import PackedLinear

_PDL = {}   # device index -> launch with PDL (Hopper and later, never in the interpreter)
# Logits per program of a constrained step's masked argmax (a 128k vocabulary: 128 programs).
_MASKED_BLOCK = 1024


def _pdl(device: torch.device) -> dict:
    """Launch options and the PDL constexpr for kernels on device."""
    index = device.index if device.index is not None else 0
    if index not in _PDL:
        _PDL[index] = (not INTERPRET and device.type == 'cuda'
                       and torch.cuda.get_device_capability(index)[0] >= 9)
    return {'PDL': True, 'launch_pdl': True} if _PDL[index] else {'PDL': False}


def _products(dtype: torch.dtype) -> tuple:
    # (tl.dot's operand dtype, its input precision) for operands of dtype: the dtype itself,
    # float32 in the interpreter (which has no bf16 products); float32 gets full float32
    # products, not TF32 (the precision is ignored for 16-bit operands).
    dot = tl.float32 if INTERPRET else _TL_DTYPES[dtype]
    return dot, 'ieee' if dot == tl.float32 else 'tf32'


def _even(n: int, k: int, cfg: GemvConfig) -> bool:
    # Split boundaries are multiples of block_k, so these two make every tile whole.
    return n % cfg.block_n == 0 and k % cfg.block_k == 0


@triton.jit
def _grid_sync(PDL: tl.constexpr):
    # Under PDL this kernel may run before its predecessor has finished: wait for its results
    # here, before reading anything it wrote, and let the next kernel start launching.
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def _inv_rms(squares, K, eps):
    return 1.0 / tl.sqrt(tl.sum(squares, axis=0) / K + eps)


@triton.jit
def _normed(X, NORM, cols, col_mask, squares, EVEN: tl.constexpr):
    # One tile of the norm GEMVs' input, x * norm weight, and the squares of x added in: the
    # kernel scales its sums by _inv_rms(squares) at the end.
    x = _load(X + cols, col_mask, EVEN).to(tl.float32)
    squares += x * x
    return x * _load(NORM + cols, col_mask, EVEN).to(tl.float32), squares


@triton.jit
def _rstd(X, K, eps, BLOCK_K: tl.constexpr):
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(X + cols, mask=cols < K, other=0.0).to(tl.float32)
        acc += x * x
    return _inv_rms(acc, K, eps)


@triton.jit
def _load(ptr, mask, EVEN: tl.constexpr):
    # Unmasked loads when the tiles divide the matrix: masks that vary along a row can stop
    # Triton from issuing 16-byte vector loads.
    if EVEN:
        return tl.load(ptr)
    return tl.load(ptr, mask=mask, other=0.0)


@triton.jit
def _input(X, NORM, cols, col_mask, rstd, HAS_NORM: tl.constexpr, WDTYPE: tl.constexpr,
           EVEN: tl.constexpr):
    # The GEMV input, rounded as transformers rounds it: normed in float32, cast to the weight
    # dtype, scaled by the norm weight in that dtype.
    x = _load(X + cols, col_mask, EVEN).to(tl.float32)
    if HAS_NORM:
        g = _load(NORM + cols, col_mask, EVEN).to(tl.float32)
        x = (x * rstd).to(WDTYPE).to(tl.float32) * g
    return x.to(WDTYPE).to(tl.float32)


@triton.jit
def _tile(rows_ptr, row_mask, k0, k_end, BLOCK_K: tl.constexpr, EVEN: tl.constexpr,
          STREAM: tl.constexpr):
    # One [rows, BLOCK_K] weight tile at column k0; all zeros once k0 passes k_end. The "past
    # the end" test is one scalar, so whole tiles still load as 16-byte vectors.
    cols = tl.max_contiguous(tl.multiple_of(k0 + tl.arange(0, BLOCK_K), BLOCK_K), BLOCK_K)
    inside = k0 < k_end
    if EVEN:
        return tl.load(rows_ptr + cols[None, :], mask=inside, other=0.0, eviction_policy=STREAM)
    mask = row_mask[:, None] & (cols < k_end)[None, :] & inside
    return tl.load(rows_ptr + cols[None, :], mask=mask, other=0.0, eviction_policy=STREAM)


@triton.jit
def _matvec_kernel(W, X, Y, NORM, BIAS, ARGMAX, N, K, eps,
                   HAS_NORM: tl.constexpr, HAS_BIAS: tl.constexpr, ACCUMULATE: tl.constexpr,
                   HAS_ARGMAX: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   SPLIT_K: tl.constexpr, EVEN: tl.constexpr, STREAM: tl.constexpr,
                   AHEAD: tl.constexpr, PDL: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    k_len = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_start = tl.program_id(1) * k_len
    k_end = tl.minimum(k_start + k_len, K)
    w_rows = W + rows.to(tl.int64)[:, None] * K
    # Weights never depend on the previous kernel: the first AHEAD tiles are in flight before
    # the wait.
    w_next = _tile(w_rows, row_mask, k_start, k_end, BLOCK_K, EVEN, STREAM)
    if AHEAD >= 2:
        w_next2 = _tile(w_rows, row_mask, k_start + BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
    if AHEAD >= 3:
        w_next3 = _tile(w_rows, row_mask, k_start + 2 * BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
    _grid_sync(PDL)
    # RMSNorm's 1 / rms is one number: it scales the sums at the end, and its squares come from
    # the loads the tiles need anyway, so no pass over the input precedes the first tile (the
    # norm's rows of K are whole here: rms_matvec never splits K). The normed input is then not
    # rounded to the weight dtype as transformers rounds it: nearer float32 (docs/PERF.md, v19).
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        w = w_next   # keep AHEAD + 1 tiles in flight
        if AHEAD == 1:
            w_next = _tile(w_rows, row_mask, k0 + BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
        elif AHEAD == 2:
            w_next = w_next2
            w_next2 = _tile(w_rows, row_mask, k0 + 2 * BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
        else:
            w_next = w_next2
            w_next2 = w_next3
            w_next3 = _tile(w_rows, row_mask, k0 + 3 * BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
        cols = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
        if HAS_NORM:
            x, squares = _normed(X, NORM, cols, cols < k_end, squares, EVEN)
        else:   # rounded as transformers rounds its input
            x = _load(X + cols, cols < k_end, EVEN).to(W.dtype.element_ty).to(tl.float32)
        acc += w.to(tl.float32) * x[None, :]
    y = tl.sum(acc, axis=1)
    if HAS_NORM:
        y *= _inv_rms(squares, K, eps)
    if ACCUMULATE:
        # Relaxed: a reduction the program does not wait for. Triton's default (acq_rel) makes
        # every program wait for L2 round trips before it exits, and nothing needs the order:
        # the next kernel reads Y after its PDL wait, once this grid has ended (docs/PERF.md, v35).
        tl.atomic_add(Y + rows, y, mask=row_mask, sem='relaxed')
    else:
        if HAS_BIAS:
            y += tl.load(BIAS + rows, mask=row_mask, other=0.0).to(tl.float32)
        tl.store(Y + rows, y, mask=row_mask)
    if HAS_ARGMAX:   # greedy choice in the epilogue
        _offer_argmax(ARGMAX, tl.where(row_mask, y, float('-inf')), rows, N)


@triton.jit
def _offer_argmax(ARGMAX, y, rows, N):
    # The program's best row of y (-inf where it has none) offered to one 64-bit atomic max:
    # the logit's bits (made to order like the float) above the row index (inverted, so ties
    # go to the lowest index, as torch.argmax does).
    best = tl.max(y, axis=0)
    row = tl.min(tl.where(y == best, rows, N), axis=0)
    bits = best.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    tl.atomic_max(ARGMAX, (key.to(tl.int64) << 32) | (0xFFFFFFFF - row.to(tl.int64)),
                  sem='relaxed')   # read by the next kernel after its PDL wait


@triton.jit
def _gate_up_rows(W, outputs, K, ROW_BLOCK: tl.constexpr):
    # Pointers to the gate and up weight rows of outputs, in llama.fuse_gate_up's layout:
    # ROW_BLOCK gate rows, then the same up rows.
    gate_index = (outputs // ROW_BLOCK) * 2 * ROW_BLOCK + outputs % ROW_BLOCK
    gate_rows = W + gate_index.to(tl.int64)[:, None] * K
    return gate_rows, gate_rows + ROW_BLOCK * K


@triton.jit
def _activation(gate, GELU: tl.constexpr):
    if GELU:   # GeGLU, gelu's tanh form: 0.5 g (1 + tanh(u)) = g sigmoid(2 u)
        u = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        return gate * tl.sigmoid(2.0 * u)
    return gate * tl.sigmoid(gate)


@triton.jit
def _gated(gate, up, GELU: tl.constexpr):
    return _activation(gate, GELU) * up


@triton.jit
def _gate_up_kernel(W, X, Y, NORM, N, K, eps, ROW_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, EVEN: tl.constexpr, STREAM: tl.constexpr,
                    GELU: tl.constexpr, AHEAD: tl.constexpr, PDL: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    gate_rows, up_rows = _gate_up_rows(W, rows, K, ROW_BLOCK)
    # AHEAD tiles of each half before the wait, as in _matvec_kernel.
    gate_next = _tile(gate_rows, row_mask, 0, K, BLOCK_K, EVEN, STREAM)
    up_next = _tile(up_rows, row_mask, 0, K, BLOCK_K, EVEN, STREAM)
    if AHEAD >= 2:
        gate_next2 = _tile(gate_rows, row_mask, BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        up_next2 = _tile(up_rows, row_mask, BLOCK_K, K, BLOCK_K, EVEN, STREAM)
    if AHEAD >= 3:
        gate_next3 = _tile(gate_rows, row_mask, 2 * BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        up_next3 = _tile(up_rows, row_mask, 2 * BLOCK_K, K, BLOCK_K, EVEN, STREAM)
    _grid_sync(PDL)
    acc_gate = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)   # 1 / rms at the end, as in _matvec_kernel
    for k0 in range(0, K, BLOCK_K):
        w_gate, w_up = gate_next, up_next   # keep AHEAD + 1 tiles of each half in flight
        if AHEAD == 1:
            gate_next = _tile(gate_rows, row_mask, k0 + BLOCK_K, K, BLOCK_K, EVEN, STREAM)
            up_next = _tile(up_rows, row_mask, k0 + BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        elif AHEAD == 2:
            gate_next, up_next = gate_next2, up_next2
            gate_next2 = _tile(gate_rows, row_mask, k0 + 2 * BLOCK_K, K, BLOCK_K, EVEN, STREAM)
            up_next2 = _tile(up_rows, row_mask, k0 + 2 * BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        else:
            gate_next, up_next = gate_next2, up_next2
            gate_next2, up_next2 = gate_next3, up_next3
            gate_next3 = _tile(gate_rows, row_mask, k0 + 3 * BLOCK_K, K, BLOCK_K, EVEN, STREAM)
            up_next3 = _tile(up_rows, row_mask, k0 + 3 * BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        cols = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
        x, squares = _normed(X, NORM, cols, cols < K, squares, EVEN)
        acc_gate += w_gate.to(tl.float32) * x[None, :]
        acc_up += w_up.to(tl.float32) * x[None, :]
    inv_rms = _inv_rms(squares, K, eps)
    gate = tl.sum(acc_gate, axis=1) * inv_rms
    up = tl.sum(acc_up, axis=1) * inv_rms
    tl.store(Y + rows, _gated(gate, up, GELU), mask=row_mask)


@triton.jit
def _nibble_term(words, x, MAGIC, SHIFT: tl.constexpr):
    # (code - 8) * x for the nibble at bit SHIFT of each word (see _q4_gemv_kernel).
    bits = (words & (0xF << SHIFT)) | MAGIC
    value = bits.to(tl.float32, bitcast=True) - (8388608.0 + (8 << SHIFT))
    return value * (x * (1.0 / (1 << SHIFT)))


# One word's sum_j (code_j - 8) * x_j in packed half2 arithmetic, as exllamav2 does it: each
# LOP3 drops nibbles j and j + 4 of the word into the mantissas of two fp16 1024.0s, and one
# half2 operation per pair makes them code - 8 exactly; one HFMA2 per pair with (x_j, x_j+4):
# 2 codes per instruction where the float32 path does 1. Nibbles 0, 4 (bits 0-3, 16-19) give
# 1024 + code, less 1032. Nibbles 1, 5 are masked in place (bits 4-7, 20-23), giving
# 1024 + 16 code, and one HFMA2 by 1/16 minus 72 gives code - 8: one shift of the word by 8
# serves nibbles 2, 6 and 3, 7 the same way, where a shift per pair cost 2 more instructions
# per word (docs/PERF.md, v9a). The 8 products are summed in fp16 (about 3 significant decimal
# digits), then in float32.
_HALF2_DOT = tl.constexpr("""
{
.reg .b32 c0, c1, c2, c3, s, m, d, e, h;
.reg .f16 lo, hi;
.reg .f32 flo, fhi;
mov.b32 m, 0x64086408;
mov.b32 d, 0x2C002C00;
mov.b32 e, 0xD480D480;
lop3.b32 c0, $1, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 c1, $1, 0x00F000F0, 0x64006400, 0xEA;
shr.u32 s, $1, 8;
lop3.b32 c2, s, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 c3, s, 0x00F000F0, 0x64006400, 0xEA;
sub.f16x2 c0, c0, m;
fma.rn.f16x2 c1, c1, d, e;
sub.f16x2 c2, c2, m;
fma.rn.f16x2 c3, c3, d, e;
mul.rn.f16x2 h, c0, $2;
fma.rn.f16x2 h, c1, $3, h;
fma.rn.f16x2 h, c2, $4, h;
fma.rn.f16x2 h, c3, $5, h;
mov.b32 {lo, hi}, h;
cvt.f32.f16 flo, lo;
cvt.f32.f16 fhi, hi;
add.f32 flo, flo, fhi;
mov.b32 $0, flo;
}
""")


@triton.jit
def _half2(a, b):
    # (a, b) as the two fp16 halves of one 32-bit word, a in the low half.
    low = a.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    high = b.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) << 16
    return low | high


@triton.jit
def _q4_tile_sums(w, x_rows, X, NORM, rstd, K, HAS_NORM: tl.constexpr, WDTYPE: tl.constexpr,
                  MAGIC, HALF2: tl.constexpr, EVEN: tl.constexpr):
    # sum over the 8 nibbles j of (code - 8) * x[8 r + j] for each word (r, n) of a tile, and
    # sum_j x[8 r + j] per row r (for asymmetric zeros). Float32 path: nibbles 5-7 come from
    # the word shifted right by 20, so every masked value stays below 2^23 (see
    # _q4_gemv_kernel). HALF2: _HALF2_DOT.
    part = tl.zeros(w.shape, dtype=tl.float32)
    x_sum = tl.zeros(x_rows.shape, dtype=tl.float32)
    if HALF2:
        base = x_rows * 8
        x0 = _input(X, NORM, base, base < K, rstd, HAS_NORM, WDTYPE, EVEN)
        x1 = _input(X, NORM, base + 1, base < K, rstd, HAS_NORM, WDTYPE, EVEN)
        x2 = _input(X, NORM, base + 2, base < K, rstd, HAS_NORM, WDTYPE, EVEN)
        x3 = _input(X, NORM, base + 3, base < K, rstd, HAS_NORM, WDTYPE, EVEN)
        x4 = _input(X, NORM, base + 4, base < K, rstd, HAS_NORM, WDTYPE, EVEN)
        x5 = _input(X, NORM, base + 5, base < K, rstd, HAS_NORM, WDTYPE, EVEN)
        x6 = _input(X, NORM, base + 6, base < K, rstd, HAS_NORM, WDTYPE, EVEN)
        x7 = _input(X, NORM, base + 7, base < K, rstd, HAS_NORM, WDTYPE, EVEN)
        x_sum = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
        bits = tl.inline_asm_elementwise(
            _HALF2_DOT, '=r,r,r,r,r,r',
            [w, _half2(x0, x4)[:, None], _half2(x1, x5)[:, None], _half2(x2, x6)[:, None],
             _half2(x3, x7)[:, None]], dtype=tl.int32, is_pure=True, pack=1)
        part = bits.to(tl.float32, bitcast=True)
    else:
        high = w >> 20
        for j in tl.static_range(8):
            cols = x_rows * 8 + j
            x = _input(X, NORM, cols, cols < K, rstd, HAS_NORM, WDTYPE, EVEN)
            x_sum += x
            if j < 5:
                part += _nibble_term(w, x[:, None], MAGIC, 4 * j)
            else:
                part += _nibble_term(high, x[:, None], MAGIC, 4 * (j - 5))
    return part, x_sum


@triton.jit
def _q4_group_scaled(part, x_sum, S, Z, rows, cols, mask, N_ALL, GROUP: tl.constexpr,
                     HAS_ZEROS: tl.constexpr, EVEN: tl.constexpr):
    # A tile's per-word sums times their group scales, corrected for a zero other than 8.
    at = (rows // (GROUP // 8)).to(tl.int64)[:, None] * N_ALL + cols[None, :]
    if HAS_ZEROS:
        zero = _load(Z + at, mask, EVEN).to(tl.float32)
        part += (8.0 - zero) * x_sum[:, None]
    return part * _load(S + at, mask, EVEN).to(tl.float32)


@triton.jit
def _q4_tile(ptrs, r0, r_end, col_mask, BLOCK_R: tl.constexpr, EVEN: tl.constexpr,
             STREAM: tl.constexpr):
    # Code words of rows r0 .. r0 + BLOCK_R; all zeros once r0 passes r_end (one scalar test,
    # so whole tiles still load as 16-byte vectors).
    if EVEN:
        return tl.load(ptrs, mask=r0 < r_end, other=0, eviction_policy=STREAM)
    rows = r0 + tl.arange(0, BLOCK_R)
    return tl.load(ptrs, mask=(rows < r_end)[:, None] & col_mask[None, :], other=0,
                   eviction_policy=STREAM)


@triton.jit
def _q4_gemv_kernel(QW, S, Z, X, Y, NORM, BIAS, N, K, N_ALL, eps, MAGIC,
                    HAS_NORM: tl.constexpr, HAS_BIAS: tl.constexpr, ACCUMULATE: tl.constexpr,
                    GATE_UP: tl.constexpr, GELU: tl.constexpr, HAS_ZEROS: tl.constexpr,
                    GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
                    SPLIT_K: tl.constexpr, EVEN: tl.constexpr, WDTYPE: tl.constexpr,
                    HALF2: tl.constexpr, STREAM: tl.constexpr, PDL: tl.constexpr):
    # y = W x for a GPTQ linear, read in GPTQ's own layout: codes [K / 8, N_ALL] (8 inputs of
    # one output per word), scales and zeros [K / GROUP, N_ALL]. A program owns BLOCK_N
    # outputs (columns) and walks down the words BLOCK_R rows at a time; the inputs of a row
    # are the same for every column, so a thread loads each x once for its 4 columns, and
    # the sums stay per column until one reduction at the end. GATE_UP: the columns n of
    # gate and n + N of up, with SiLU(gate) * up out (GELU: GeGLU's gelu_tanh(gate) * up).
    # The GPU issues ~3 instructions per code (SASS of the gate/up loop: 777 per 256 codes a
    # thread), so instruction issue, not memory alone, bounds this kernel.
    # HALF2 (16-bit models): _HALF2_DOT, 2 codes per instruction. Float32 (exact): nibble j
    # masked in place (code << 4 j) and OR-ed into the mantissa of 2^23 (one LOP3; MAGIC =
    # 2^23's bits, an argument so that it sits in a register), one float subtraction of
    # 2^23 + 8 << 4 j gives (code - 8) << 4 j exactly, one FMA with x / 16^j. Neither converts
    # integers to floats, which runs at a quarter of the FMA rate.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    word_rows = K // 8
    r_len = tl.cdiv(tl.cdiv(word_rows, SPLIT_K), BLOCK_R) * BLOCK_R
    r_start = tl.program_id(1) * r_len
    r_end = tl.minimum(r_start + r_len, word_rows)
    w_ptrs = QW + (r_start + tl.arange(0, BLOCK_R)).to(tl.int64)[:, None] * N_ALL + cols[None, :]
    # Weights never depend on the previous kernel: the first tile is in flight before the wait.
    w_next = _q4_tile(w_ptrs, r_start, r_end, col_mask, BLOCK_R, EVEN, STREAM)
    u_next = w_next
    if GATE_UP:
        u_next = _q4_tile(w_ptrs + N, r_start, r_end, col_mask, BLOCK_R, EVEN, STREAM)
    _grid_sync(PDL)
    rstd = 1.0
    if HAS_NORM:
        rstd = _rstd(X, K, eps, 512)
    acc = tl.zeros([BLOCK_R, BLOCK_N], dtype=tl.float32)
    acc_up = acc
    for r0 in range(r_start, r_end, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows < r_end)[:, None] & col_mask[None, :]
        w, u = w_next, u_next
        w_ptrs += BLOCK_R * N_ALL   # the next tile in flight while this one is summed
        w_next = _q4_tile(w_ptrs, r0 + BLOCK_R, r_end, col_mask, BLOCK_R, EVEN, STREAM)
        part, x_sum = _q4_tile_sums(w, rows, X, NORM, rstd, K, HAS_NORM, WDTYPE, MAGIC, HALF2,
                                    EVEN)
        acc += _q4_group_scaled(part, x_sum, S, Z, rows, cols, mask, N_ALL, GROUP, HAS_ZEROS,
                                EVEN)
        if GATE_UP:
            u_next = _q4_tile(w_ptrs + N, r0 + BLOCK_R, r_end, col_mask, BLOCK_R, EVEN, STREAM)
            part, x_sum = _q4_tile_sums(u, rows, X, NORM, rstd, K, True, WDTYPE, MAGIC, HALF2,
                                        EVEN)
            acc_up += _q4_group_scaled(part, x_sum, S, Z, rows, cols + N, mask, N_ALL, GROUP,
                                       HAS_ZEROS, EVEN)
    y = tl.sum(acc, axis=0)
    if GATE_UP:
        y = _gated(y, tl.sum(acc_up, axis=0), GELU)
    if ACCUMULATE:
        tl.atomic_add(Y + cols, y, mask=col_mask, sem='relaxed')   # as _matvec_kernel's
    else:
        if HAS_BIAS:
            y += tl.load(BIAS + cols, mask=col_mask, other=0.0).to(tl.float32)
        tl.store(Y + cols, y, mask=col_mask)


@triton.jit
def _rows_input(X, NORM, r, r_mask, k, k_mask, K, squares, HAS_NORM: tl.constexpr):
    # Rows r of the input at columns k, [ROWS_P, BLOCK_K] float32, times the norm weight where
    # there is one (its squares added in: 1 / rms scales the sums at the end, per row).
    x = tl.load(X + r.to(tl.int64)[:, None] * K + k[None, :],
                mask=r_mask[:, None] & k_mask[None, :], other=0.0).to(tl.float32)
    if HAS_NORM:
        squares += x * x
        x = x * tl.load(NORM + k, mask=k_mask, other=0.0).to(tl.float32)[None, :]
    return x, squares


@triton.jit
def _rows_span(R, N, K, SPLIT_K: tl.constexpr, ROWS_P: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    # A rows GEMV program's outputs (cols), its part of K (split SPLIT_K ways, whole tiles) and
    # the rows, padded to ROWS_P.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_len = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_start = tl.program_id(1) * k_len
    r = tl.arange(0, ROWS_P)
    return cols, cols < N, k_start, tl.minimum(k_start + k_len, K), r, r < R


@triton.jit
def _rows_store(Y, acc, BIAS, cols, n_mask, r, r_mask, N, HAS_BIAS: tl.constexpr,
                ACCUMULATE: tl.constexpr):
    # acc [BLOCK_N, ROWS_P] into rows r of Y [R, N]: added (a residual, split K) or stored with
    # the bias.
    out = Y + r.to(tl.int64)[None, :] * N + cols[:, None]
    mask = n_mask[:, None] & r_mask[None, :]
    if ACCUMULATE:
        tl.atomic_add(out, acc, mask=mask, sem='relaxed')   # as _matvec_kernel's
    else:
        if HAS_BIAS:
            acc += tl.load(BIAS + cols, mask=n_mask, other=0.0).to(tl.float32)[:, None]
        tl.store(out, acc, mask=mask)


@triton.jit
def _rows_matvec_kernel(W, X, Y, NORM, BIAS, R, N, K, eps, HAS_NORM: tl.constexpr,
                        HAS_BIAS: tl.constexpr, ACCUMULATE: tl.constexpr, ROWS_P: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                        DOT: tl.constexpr, PRECISION: tl.constexpr, STREAM: tl.constexpr,
                        PDL: tl.constexpr):
    # Y[r] (+)= W @ x[r] for R rows (a verify step's) at one read of each weight tile: the
    # tile meets every row in one tl.dot, the rows padded to ROWS_P (16, 32 or 64).
    cols, n_mask, k_start, k_end, r, r_mask = _rows_span(R, N, K, SPLIT_K, ROWS_P, BLOCK_N,
                                                         BLOCK_K)
    w_rows = W + cols.to(tl.int64)[:, None] * K
    _grid_sync(PDL)
    acc = tl.zeros([BLOCK_N, ROWS_P], dtype=tl.float32)
    squares = tl.zeros([ROWS_P, BLOCK_K], dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_mask = k < k_end
        w = tl.load(w_rows + k[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0,
                    eviction_policy=STREAM)
        x, squares = _rows_input(X, NORM, r, r_mask, k, k_mask, K, squares, HAS_NORM)
        acc += tl.dot(w.to(DOT), tl.trans(x.to(W.dtype.element_ty).to(DOT)),
                      input_precision=PRECISION, out_dtype=tl.float32)
    if HAS_NORM:   # the norm's rows of K are whole: a norm GEMV never splits K
        acc *= (1.0 / tl.sqrt(tl.sum(squares, axis=1) / K + eps))[None, :]
    _rows_store(Y, acc, BIAS, cols, n_mask, r, r_mask, N, HAS_BIAS, ACCUMULATE)


@triton.jit
def _rows_gate_up_kernel(W, X, Y, NORM, R, N, K, eps, ROW_BLOCK: tl.constexpr,
                         ROWS_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         DOT: tl.constexpr, PRECISION: tl.constexpr, STREAM: tl.constexpr,
                         GELU: tl.constexpr, PDL: tl.constexpr):
    # _gate_up_kernel over R rows, each weight tile read once for all (_rows_matvec_kernel);
    # K is never split (the activation needs whole sums).
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = cols < N
    gate_rows, up_rows = _gate_up_rows(W, cols, K, ROW_BLOCK)
    r = tl.arange(0, ROWS_P)
    r_mask = r < R
    _grid_sync(PDL)
    acc_gate = tl.zeros([BLOCK_N, ROWS_P], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, ROWS_P], dtype=tl.float32)
    squares = tl.zeros([ROWS_P, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_mask = k < K
        mask = n_mask[:, None] & k_mask[None, :]
        w_gate = tl.load(gate_rows + k[None, :], mask=mask, other=0.0, eviction_policy=STREAM)
        w_up = tl.load(up_rows + k[None, :], mask=mask, other=0.0, eviction_policy=STREAM)
        x, squares = _rows_input(X, NORM, r, r_mask, k, k_mask, K, squares, True)
        x = tl.trans(x.to(W.dtype.element_ty).to(DOT))
        acc_gate += tl.dot(w_gate.to(DOT), x, input_precision=PRECISION, out_dtype=tl.float32)
        acc_up += tl.dot(w_up.to(DOT), x, input_precision=PRECISION, out_dtype=tl.float32)
    inv_rms = (1.0 / tl.sqrt(tl.sum(squares, axis=1) / K + eps))[None, :]
    _rows_store(Y, _gated(acc_gate * inv_rms, acc_up * inv_rms, GELU), Y, cols, n_mask, r,
                r_mask, N, False, False)


@triton.jit
def _q4_weight_tile(QW, S, Z, k0, cols, n_mask, k_end, N_ALL, GROUP: tl.constexpr,
                    HAS_ZEROS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    STREAM: tl.constexpr):
    # A GPTQ linear's weight at inputs k0 .. k0 + BLOCK_K, outputs cols, as float32
    # [BLOCK_K, BLOCK_N]: scale * (code - zero), exact. Each code word is loaded once and gives
    # its 8 inputs; the tile lies in one group (GROUP % BLOCK_K == 0), so one scale per output.
    # Inputs past k_end read as code 0 (the rows' inputs there are 0). A code OR-ed into the
    # mantissa of 2^23 is 2^23 + code as a float: one subtraction gives code - zero exactly,
    # with no integer-to-float conversion (a quarter-rate instruction), as _q4_gemv_kernel.
    word_rows = k0 // 8 + tl.arange(0, BLOCK_K // 8)
    words = tl.load(QW + word_rows.to(tl.int64)[:, None] * N_ALL + cols[None, :],
                    mask=(word_rows < k_end // 8)[:, None] & n_mask[None, :], other=0,
                    eviction_policy=STREAM)
    shifts = 4 * tl.arange(0, 8)
    bits = ((words[:, None, :] >> shifts[None, :, None]) & 0xF) | 0x4B000000
    codes = tl.reshape(bits, [BLOCK_K, BLOCK_N]).to(tl.float32, bitcast=True)
    at = (k0 // GROUP) * N_ALL + cols   # scales count N K / GROUP: int32 holds them
    scale = tl.load(S + at, mask=n_mask, other=0.0).to(tl.float32)
    if HAS_ZEROS:
        zero = tl.load(Z + at, mask=n_mask, other=8).to(tl.float32)
        return (codes - (8388608.0 + zero)[None, :]) * scale[None, :]
    return (codes - (8388608.0 + 8.0)) * scale[None, :]


@triton.jit
def _dequantize_q4_kernel(QW, S, Z, OUT, N, K, HAS_ZEROS: tl.constexpr, GROUP: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # OUT [N, K] = a GPTQ linear's float weight in OUT's dtype, one [BLOCK_N, BLOCK_K] tile a
    # program: its codes read once, its values written once.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = cols < N
    k0 = tl.program_id(1) * BLOCK_K
    w = _q4_weight_tile(QW, S, Z, k0, cols, n_mask, K, N, GROUP, HAS_ZEROS, BLOCK_N, BLOCK_K, '')
    k = k0 + tl.arange(0, BLOCK_K)
    tl.store(OUT + cols.to(tl.int64)[:, None] * K + k[None, :],
             tl.trans(w).to(OUT.dtype.element_ty), mask=n_mask[:, None] & (k < K)[None, :])


@triton.jit
def _rows_q4_kernel(QW, S, Z, X, Y, NORM, BIAS, R, N, K, N_ALL, eps, HAS_NORM: tl.constexpr,
                    HAS_BIAS: tl.constexpr, ACCUMULATE: tl.constexpr, GATE_UP: tl.constexpr,
                    GELU: tl.constexpr, HAS_ZEROS: tl.constexpr, GROUP: tl.constexpr,
                    ROWS_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    SPLIT_K: tl.constexpr, WDTYPE: tl.constexpr, DOT: tl.constexpr,
                    PRECISION: tl.constexpr, STREAM: tl.constexpr, PDL: tl.constexpr):
    # _rows_matvec_kernel (GATE_UP: _rows_gate_up_kernel, gate at cols and up at cols + N) for
    # a GPTQ linear over R rows: each code word is read once for all rows and dequantised in
    # registers into the tile that meets them in one tl.dot, rounded to the model dtype as
    # PackedLinear.dense rounds it.
    cols, n_mask, k_start, k_end, r, r_mask = _rows_span(R, N, K, SPLIT_K, ROWS_P, BLOCK_N,
                                                         BLOCK_K)
    _grid_sync(PDL)
    acc = tl.zeros([BLOCK_N, ROWS_P], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, ROWS_P], dtype=tl.float32)
    squares = tl.zeros([ROWS_P, BLOCK_K], dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x, squares = _rows_input(X, NORM, r, r_mask, k, k < k_end, K, squares, HAS_NORM)
        x = tl.trans(x.to(WDTYPE).to(DOT))
        w = _q4_weight_tile(QW, S, Z, k0, cols, n_mask, k_end, N_ALL, GROUP, HAS_ZEROS,
                            BLOCK_N, BLOCK_K, STREAM)
        acc += tl.dot(tl.trans(w.to(WDTYPE).to(DOT)), x, input_precision=PRECISION,
                      out_dtype=tl.float32)
        if GATE_UP:
            u = _q4_weight_tile(QW, S, Z, k0, cols + N, n_mask, k_end, N_ALL, GROUP, HAS_ZEROS,
                                BLOCK_N, BLOCK_K, STREAM)
            acc_up += tl.dot(tl.trans(u.to(WDTYPE).to(DOT)), x, input_precision=PRECISION,
                             out_dtype=tl.float32)
    if HAS_NORM:   # as in _rows_matvec_kernel: a norm GEMV never splits K
        inv_rms = (1.0 / tl.sqrt(tl.sum(squares, axis=1) / K + eps))[None, :]
        acc *= inv_rms
        acc_up *= inv_rms
    if GATE_UP:
        acc = _gated(acc, acc_up, GELU)
    _rows_store(Y, acc, BIAS, cols, n_mask, r, r_mask, N, HAS_BIAS, ACCUMULATE)


@triton.jit
def _head_norm_kernel(QKV, QN, KN, num_heads, row_stride, eps, D: tl.constexpr,
                      WDTYPE: tl.constexpr, PDL: tl.constexpr):
    # One q or k head of the QKV output, normed in place as transformers norms it: rounded to
    # the norm weight's dtype, normalised in float32, rounded again, scaled in that dtype.
    _grid_sync(PDL)
    head = tl.program_id(0)
    QKV += tl.program_id(1).to(tl.int64) * row_stride   # a verify step's row
    d = tl.arange(0, D)
    x = tl.load(QKV + head * D + d).to(WDTYPE).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / D + eps)
    w = tl.where(head < num_heads, tl.load(QN + d), tl.load(KN + d)).to(tl.float32)
    y = (x * rstd).to(WDTYPE).to(tl.float32) * w
    tl.store(QKV + head * D + d, y.to(WDTYPE).to(tl.float32))


@triton.jit
def _norm_add_kernel(X, Y, NORM, H, eps, BLOCK: tl.constexpr, WDTYPE: tl.constexpr,
                     PDL: tl.constexpr):
    # x += rms_norm(y) * norm, one program for the whole vector: y rounded to the weight dtype
    # as the sublayer's output is, normed in float32, rounded again as Gemma3RMSNorm returns it.
    # Only y is the previous kernel's: x was last written by the post-norm before it, which had
    # ended before that kernel started, so x and the norm's weights are read before the wait
    # and the one round trip after it is y's.
    X += tl.program_id(0).to(tl.int64) * H   # a verify step's row
    Y += tl.program_id(0).to(tl.int64) * H
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    x = tl.load(X + cols, mask=mask, other=0.0)
    norm = tl.load(NORM + cols, mask=mask, other=0.0).to(tl.float32)
    _grid_sync(PDL)
    y = tl.load(Y + cols, mask=mask, other=0.0).to(WDTYPE).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(y * y, axis=0) / H + eps)
    normed = y * rstd * norm
    tl.store(X + cols, x + normed.to(WDTYPE).to(tl.float32), mask=mask)


@triton.jit
def _chunk(length, SPLITS: tl.constexpr, MIN_CHUNK: tl.constexpr, BLOCK_T: tl.constexpr):
    # Keys per split: spread over SPLITS programs, but never under MIN_CHUNK, so short contexts
    # use few splits and long ones all of them.
    chunk = tl.maximum(tl.cdiv(length, SPLITS), MIN_CHUNK)
    return tl.cdiv(chunk, BLOCK_T) * BLOCK_T


@triton.jit
def _rope_tables(COS, SIN, pos, D: tl.constexpr):
    # cos and sin of position pos for each of the D dimensions (pairs d, d + D/2 share one), in
    # one load of a [D, 2] tile: as two loads, the second was issued only after the first came
    # back, behind its layout change through shared memory (docs/PERF.md, v21).
    half = tl.arange(0, D) % (D // 2)
    tables = tl.where(tl.arange(0, 2)[None, :] == 0, COS, SIN)
    return tl.split(tl.load(tables + (pos * (D // 2) + half)[:, None]))


@triton.jit
def _rows(X, rows, row_mask, D: tl.constexpr):
    # The D-vectors at X + rows * D and their rotate-half partners (d + D/2 mod D).
    d = tl.arange(0, D)
    x = tl.load(X + rows[:, None] * D + d[None, :], mask=row_mask[:, None], other=0.0)
    partner = tl.load(X + rows[:, None] * D + ((d + D // 2) % D)[None, :],
                      mask=row_mask[:, None], other=0.0)
    return x, partner


@triton.jit
def _rotated(x, partner, cos, sin, D: tl.constexpr, DTYPE: tl.constexpr):
    # RoPE (rotate-half) of vectors [..., D] with their partners; inputs rounded to the cache
    # dtype first, as transformers rounds q and k.
    d = tl.arange(0, D)
    x = x.to(DTYPE).to(tl.float32)
    partner = partner.to(DTYPE).to(tl.float32)
    return x * cos + tl.where(d < D // 2, -1.0, 1.0) * partner * sin


@triton.jit
def _norm_weights(NORM, D: tl.constexpr):
    # A head norm's weights for elements d and for their rotate-half partners (d + D/2 mod D).
    d = tl.arange(0, D)
    return tl.load(NORM + d).to(tl.float32), tl.load(NORM + (d + D // 2) % D).to(tl.float32)


@triton.jit
def _head_normed(x, partner, w, w_partner, eps, D: tl.constexpr, WDTYPE: tl.constexpr):
    # Heads [..., D] and their rotate-half partners (the same values, permuted: one rms) normed
    # as _head_norm_kernel norms them, weights w and w_partner.
    x = x.to(WDTYPE).to(tl.float32)
    partner = partner.to(WDTYPE).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=-1, keep_dims=True) / D + eps)
    x = ((x * rstd).to(WDTYPE).to(tl.float32) * w).to(WDTYPE).to(tl.float32)
    partner = ((partner * rstd).to(WDTYPE).to(tl.float32) * w_partner).to(WDTYPE)
    return x, partner.to(tl.float32)


@triton.jit
def _attend(q, k, v, t_mask, m_i, l_i, acc, scale, DOT: tl.constexpr, PRECISION: tl.constexpr):
    # One tile of keys and values into the running softmax (max m_i, sum l_i, acc).
    s = tl.dot(q, tl.trans(k.to(DOT)), input_precision=PRECISION, out_dtype=tl.float32) * scale
    s = tl.where(t_mask[None, :], s, float('-inf'))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v.to(DOT), input_precision=PRECISION,
                                        out_dtype=tl.float32)
    return m_new, l_i, acc


@triton.jit
def _attn_split_kernel(QKV, KC, VC, POS, MAXS, SUMS, ACCS, COS, SIN, QN, KN, max_context,
                       scale, norm_eps, window, group, num_heads, kv_heads, D: tl.constexpr,
                       GROUP_P: tl.constexpr, BLOCK_T: tl.constexpr, SPLITS: tl.constexpr,
                       MIN_CHUNK: tl.constexpr, DOT: tl.constexpr, PRECISION: tl.constexpr,
                       HEAD_NORM: tl.constexpr, PDL: tl.constexpr):
    # Each program rotates its group's queries itself, and the split that holds the new
    # position rotates its key and stores key and value in the cache before its loop reads:
    # RoPE and the cache write cost no kernel of their own. With HEAD_NORM (Qwen3, Gemma 3) it
    # RMS-norms those q and k heads first, by QN and KN: nor does the head norm.
    kv_head = tl.program_id(0)
    split = tl.program_id(1)
    d = tl.arange(0, D)
    # pos was advanced by the previous step and the cache before it written by earlier ones:
    # the first tile of keys and values is read before the wait, while QKV drains. Row pos
    # of it is stale until this program stores the new key: it is replaced in registers.
    length = tl.load(POS).to(tl.int32) + 1
    # A sliding-window layer (window > 0) attends to its last `window` keys, itself included.
    first = tl.where(window > 0, tl.maximum(length - window, 0), 0)
    chunk = _chunk(length - first, SPLITS, MIN_CHUNK, BLOCK_T)
    start = first + split * chunk
    end = tl.minimum(start + chunk, length)
    base = kv_head.to(tl.int64) * max_context * D
    t = start + tl.arange(0, BLOCK_T)
    first_tile = base + t[:, None] * D + d[None, :]
    k_first = tl.load(KC + first_tile, mask=(t < end)[:, None], other=0.0)
    v_first = tl.load(VC + first_tile, mask=(t < end)[:, None], other=0.0)
    # RoPE's cos and sin depend on pos alone: read before the wait too, so that after it the
    # only reads before the first tile is attended are the rows of qkv, issued together.
    cos, sin = _rope_tables(COS, SIN, length - 1, D)
    if HEAD_NORM:   # the norms' weights, element d's and its rotate-half partner's
        qn, qn_partner = _norm_weights(QN, D)
        kn, kn_partner = _norm_weights(KN, D)
    _grid_sync(PDL)   # in every program, also those with no keys: the chain of waits must hold
    g = tl.arange(0, GROUP_P)
    g_mask = g < group
    if start < length:
        pos = length - 1
        q, q_partner = _rows(QKV, kv_head * group + g, g_mask, D)
        # Every split reads the new key and value with its queries (a few hundred bytes): one
        # round trip for all, where the split that stores them used to wait for a second.
        k_row = QKV + (num_heads + kv_head) * D
        k_x, k_partner = tl.load(k_row + d), tl.load(k_row + (d + D // 2) % D)
        if HEAD_NORM:
            q, q_partner = _head_normed(q, q_partner, qn, qn_partner, norm_eps, D,
                                        QN.dtype.element_ty)
            k_x, k_partner = _head_normed(k_x, k_partner, kn, kn_partner, norm_eps, D,
                                          KN.dtype.element_ty)
        k_new = _rotated(k_x, k_partner, cos, sin, D, KC.dtype.element_ty).to(KC.dtype.element_ty)
        v_new = tl.load(QKV + (num_heads + kv_heads + kv_head) * D + d).to(VC.dtype.element_ty)
        q = _rotated(q, q_partner, cos[None, :], sin[None, :], D, KC.dtype.element_ty).to(DOT)
        if end == length:
            slot = (kv_head.to(tl.int64) * max_context + pos) * D
            tl.store(KC + slot + d, k_new)
            tl.store(VC + slot + d, v_new)
            tl.debug_barrier()   # the stores are visible to the whole program's later loads
        is_new = (t == pos)[:, None]
        k_first = tl.where(is_new, k_new[None, :], k_first)
        v_first = tl.where(is_new, v_new[None, :], v_first)
        m_i, l_i, acc = _attend(q, k_first, v_first, t < end,
                                tl.full([GROUP_P], float('-inf'), dtype=tl.float32),
                                tl.zeros([GROUP_P], dtype=tl.float32),
                                tl.zeros([GROUP_P, D], dtype=tl.float32), scale, DOT, PRECISION)
        # The rest in a plain loop of loads, which Triton pipelines through shared memory
        # (cp.async); tiles carried in registers instead lost at long contexts (PERF.md, v9b).
        for t0 in range(start + BLOCK_T, end, BLOCK_T):
            t = t0 + tl.arange(0, BLOCK_T)
            t_mask = t < end
            offsets = base + t[:, None] * D + d[None, :]
            k = tl.load(KC + offsets, mask=t_mask[:, None], other=0.0)
            v = tl.load(VC + offsets, mask=t_mask[:, None], other=0.0)
            m_i, l_i, acc = _attend(q, k, v, t_mask, m_i, l_i, acc, scale, DOT, PRECISION)
    else:
        # A split past the keys stores a partial of no weight, so that the merge reads every
        # split's without reading pos first (one L2 round trip less on its path).
        m_i = tl.full([GROUP_P], float('-inf'), dtype=tl.float32)
        l_i = tl.zeros([GROUP_P], dtype=tl.float32)
        acc = tl.zeros([GROUP_P, D], dtype=tl.float32)
    out = (kv_head * SPLITS + split) * GROUP_P + g
    tl.store(MAXS + out, m_i, mask=g_mask)
    tl.store(SUMS + out, l_i, mask=g_mask)
    tl.store(ACCS + out[:, None] * D + d[None, :], acc, mask=g_mask[:, None])


@triton.jit
def _attn_reduce_kernel(MAXS, SUMS, ACCS, OUT, group, D: tl.constexpr, GROUP_P: tl.constexpr,
                        SPLITS: tl.constexpr, PDL: tl.constexpr):
    _grid_sync(PDL)
    head = tl.program_id(0)
    d = tl.arange(0, D)
    index = ((head // group) * SPLITS + tl.arange(0, SPLITS)) * GROUP_P + head % group
    m = tl.load(MAXS + index)
    weight = tl.exp(m - tl.max(m, axis=0))
    total = tl.sum(tl.load(SUMS + index) * weight, axis=0)
    acc = tl.load(ACCS + index[:, None] * D + d[None, :])
    tl.store(OUT + head * D + d, tl.sum(acc * weight[:, None], axis=0) / total)


@triton.jit
def _rows_rope_store_kernel(QKV, Q, KC, VC, POS, COS, SIN, max_context, num_heads, kv_heads,
                            D: tl.constexpr):
    # Row r's head h: a q head is rotated into Q [n, Hq, D]; a kv head's key is rotated and
    # stored with its value in the cache at the row's position.
    row = tl.program_id(0)
    head = tl.program_id(1)
    d = tl.arange(0, D)
    pos = tl.load(POS + row).to(tl.int32)
    cos, sin = _rope_tables(COS, SIN, pos, D)
    src = QKV + row.to(tl.int64) * (num_heads + 2 * kv_heads) * D
    rotated = _rotated(tl.load(src + head * D + d), tl.load(src + head * D + (d + D // 2) % D),
                       cos, sin, D, KC.dtype.element_ty)
    if head < num_heads:
        tl.store(Q + (row.to(tl.int64) * num_heads + head) * D + d,
                 rotated.to(Q.dtype.element_ty))
    else:
        slot = ((head - num_heads).to(tl.int64) * max_context + pos) * D
        tl.store(KC + slot + d, rotated.to(KC.dtype.element_ty))
        tl.store(VC + slot + d, tl.load(src + (head + kv_heads) * D + d).to(VC.dtype.element_ty))


@triton.jit
def _rows_attn_split_kernel(Q, KC, VC, POS, MAXS, SUMS, ACCS, rows, max_context, scale, window,
                            group, num_heads, D: tl.constexpr, GROUP_P: tl.constexpr,
                            BLOCK_R: tl.constexpr, BLOCK_T: tl.constexpr, SPLITS: tl.constexpr,
                            MIN_CHUNK: tl.constexpr, DOT: tl.constexpr,
                            PRECISION: tl.constexpr):
    # BLOCK_R rows' queries of one kv head's group, packed as BLOCK_R * GROUP_P rows of one
    # tl.dot, over one split of the keys the block needs; row r sees keys 0..pos[r] (its own
    # last window of them on a sliding-window layer). The keys and values are read once for
    # every row of the block, where a step per row would read them once per row.
    kv_head = tl.program_id(0)
    block = tl.program_id(1)
    split = tl.program_id(2)
    d = tl.arange(0, D)
    m = tl.arange(0, BLOCK_R * GROUP_P)
    row = block * BLOCK_R + m // GROUP_P
    g = m % GROUP_P
    live = (row < rows) & (g < group)
    pos = tl.load(POS + row, mask=row < rows, other=0).to(tl.int32)
    length = tl.max(tl.where(live, pos, 0), axis=0) + 1
    lowest = tl.min(tl.where(live, pos, max_context), axis=0)
    first = tl.where(window > 0, tl.maximum(lowest - window + 1, 0), 0)
    chunk = _chunk(length - first, SPLITS, MIN_CHUNK, BLOCK_T)
    start = first + split * chunk
    end = tl.minimum(start + chunk, length)
    head = kv_head * group + g
    q = tl.load(Q + (row.to(tl.int64) * num_heads + head)[:, None] * D + d[None, :],
                mask=live[:, None], other=0.0).to(DOT)
    m_i = tl.full([BLOCK_R * GROUP_P], float('-inf'), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_R * GROUP_P], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R * GROUP_P, D], dtype=tl.float32)
    base = kv_head.to(tl.int64) * max_context * D
    for t0 in range(start, end, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        offsets = base + t[:, None] * D + d[None, :]
        k = tl.load(KC + offsets, mask=(t < end)[:, None], other=0.0)
        v = tl.load(VC + offsets, mask=(t < end)[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k.to(DOT)), input_precision=PRECISION,
                   out_dtype=tl.float32) * scale
        seen = (t[None, :] <= pos[:, None]) & (t[None, :] < end) & live[:, None]
        seen = seen & ((window == 0) | (t[None, :] > pos[:, None] - window))
        s = tl.where(seen, s, float('-inf'))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # A row with no key in this tile yet keeps -inf: subtract 0 there, not -inf.
        m_safe = tl.where(m_new == float('-inf'), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v.to(DOT), input_precision=PRECISION,
                                            out_dtype=tl.float32)
        m_i = m_new
    out = ((row.to(tl.int64) * num_heads + head) * SPLITS + split)
    tl.store(MAXS + out, m_i, mask=live)
    tl.store(SUMS + out, l_i, mask=live)
    tl.store(ACCS + out[:, None] * D + d[None, :], acc, mask=live[:, None])


@triton.jit
def _rows_attn_reduce_kernel(MAXS, SUMS, ACCS, OUT, D: tl.constexpr, SPLITS: tl.constexpr):
    # One row's head: its splits' partials merged (a split with no key of the row weighs 0).
    index = tl.program_id(0).to(tl.int64) * SPLITS + tl.arange(0, SPLITS)
    d = tl.arange(0, D)
    m = tl.load(MAXS + index)
    top = tl.max(m, axis=0)
    weight = tl.where(m == float('-inf'), 0.0, tl.exp(m - top))
    total = tl.sum(tl.load(SUMS + index) * weight, axis=0)
    acc = tl.load(ACCS + index[:, None] * D + d[None, :])
    tl.store(OUT + tl.program_id(0).to(tl.int64) * D + d,
             tl.sum(acc * weight[:, None], axis=0) / total)


@triton.jit
def _now(after):
    # The GPU's nanosecond clock, one for all SMs; read once `after` is known, so not earlier.
    return tl.inline_asm_elementwise('mov.u64 $0, %globaltimer;', '=l,r', [after],
                                     dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _reply(HOST_OUT, ROWS, pos, token, CLOCK, CLOCKED: tl.constexpr):
    # The step's token and device time (from the stamp its first kernel left in CLOCK), stored
    # straight into the pinned host row the host reads for this position: a copy after the
    # step cost the synchronous step 14-35 us more (docs/PERF.md, v27).
    row = HOST_OUT + (pos % ROWS) * 2
    tl.store(row, token)
    if CLOCKED:
        tl.store(row + 1, _now(token.to(tl.int32)) - tl.load(CLOCK))


@triton.jit
def _greedy_finish_kernel(PACKED, TOKEN, POS, CLOCK, HOST_OUT, ROWS, REPLY: tl.constexpr,
                          CLOCKED: tl.constexpr, PDL: tl.constexpr):
    _grid_sync(PDL)
    packed = tl.load(PACKED)
    token = 0xFFFFFFFF - (packed & 0xFFFFFFFF)
    pos = tl.load(POS)
    tl.store(TOKEN, token)
    tl.store(POS, pos + 1)
    tl.store(PACKED, -2 ** 63)   # ready for the next step's head: no fill kernel before it
    if REPLY:
        _reply(HOST_OUT, ROWS, pos, token, CLOCK, CLOCKED)


@triton.jit
def _masked_argmax_kernel(LOGITS, BITS, ARGMAX, N, BLOCK: tl.constexpr, PDL: tl.constexpr):
    # A constrained step's greedy choice: each program offers its best allowed logit to the
    # argmax slot as the lm_head's epilogue does (bit i of word w allows token 32 w + i).
    # Where nothing is allowed every logit reads -inf and row 0 wins, as with torch.argmax.
    _grid_sync(PDL)
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    words = tl.load(BITS + rows // 32, mask=rows < N, other=0)
    allowed = ((words >> (rows % 32)) & 1) != 0
    _offer_argmax(ARGMAX, tl.load(LOGITS + rows, mask=allowed & (rows < N),
                                  other=float('-inf')), rows, N)


@triton.jit
def _step_end_kernel(TOKEN, POS, CLOCK, HOST_OUT, ROWS, CLOCKED: tl.constexpr,
                     PDL: tl.constexpr):
    _grid_sync(PDL)
    _reply(HOST_OUT, ROWS, tl.load(POS), tl.load(TOKEN), CLOCK, CLOCKED)


@triton.jit
def _embed_kernel(TABLE, TOKEN, X, H, ROW_STRIDE, CLOCK, scale, BLOCK: tl.constexpr,
                  CLOCKED: tl.constexpr, SCALED: tl.constexpr, PDL: tl.constexpr):
    _grid_sync(PDL)   # the token is the previous kernel's (or step's) result
    if CLOCKED:   # the step starts here, once the one before it has ended
        if tl.program_id(0) == 0:
            tl.store(CLOCK, _now(tl.program_id(0)))
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row = TABLE + tl.load(TOKEN) * ROW_STRIDE
    values = tl.load(row + cols, mask=cols < H)
    if SCALED:   # rounded to the table's dtype, as the product of the module's embedding is
        values = (values.to(tl.float32) * scale).to(TABLE.dtype.element_ty)
    tl.store(X + cols, values.to(tl.float32), mask=cols < H)


def _matvec(w, x, y, norm_w, bias, eps, kind, config: KernelConfig, accumulate=False,
            argmax=None):
    if isinstance(w, PackedLinear):
        _q4_gemv(w, x, y, norm_w, bias, eps, kind, config, accumulate)
        return
    n, k = w.shape
    cfg = config.gemv(kind, n, k)
    split_k = cfg.split_k if accumulate else 1
    _matvec_kernel[(triton.cdiv(n, cfg.block_n), split_k)](
        w, x, y, norm_w if norm_w is not None else x, bias if bias is not None else y,
        argmax if argmax is not None else y, n, k, eps, HAS_NORM=norm_w is not None,
        HAS_BIAS=bias is not None, ACCUMULATE=accumulate, HAS_ARGMAX=argmax is not None,
        BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, SPLIT_K=split_k, EVEN=_even(n, k, cfg),
        STREAM=config.stream(), AHEAD=cfg.tiles_ahead, num_warps=cfg.num_warps,
        **_pdl(x.device))


_TL_DTYPES = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def _q4_gemv(w: PackedLinear, x, y, norm_w, bias, eps, kind, config: KernelConfig,
             accumulate=False, gelu=False):
    # gelu (Gemma 3's GeGLU gate/up) runs in the Triton kernel: the CUDA one fuses SiLU only.
    n, k = w.shape
    gate_up = kind == 'gate_up'
    if gate_up:
        n //= 2
    if not gelu and config.q4_cuda_path(w, x, norm_w, gate_up):
        q4_cuda.gemv(w, x, y, norm_w, bias, eps, gate_up, accumulate,
                     config.q4_cuda_shape(kind, n, k, w, accumulate, x.device))
        return
    cfg = config.gemv(kind + '_q4', n, k)
    split_k = cfg.split_k if accumulate else 1
    block_r = cfg.block_k // 8    # word rows per tile
    even = n % cfg.block_n == 0 and (k // 8) % (block_r * split_k) == 0
    _q4_gemv_kernel[(triton.cdiv(n, cfg.block_n), split_k)](
        w.codes, w.scales, w.zeros if w.zeros is not None else w.scales, x, y,
        norm_w if norm_w is not None else x, bias if bias is not None else y, n, k,
        w.codes.shape[1], eps, 0x4B000000, HAS_NORM=norm_w is not None,
        HAS_BIAS=bias is not None, ACCUMULATE=accumulate, GATE_UP=gate_up, GELU=gelu,
        HAS_ZEROS=w.zeros is not None, GROUP=w.group_size, BLOCK_N=cfg.block_n,
        BLOCK_R=block_r, SPLIT_K=split_k, EVEN=even, WDTYPE=_TL_DTYPES[w.dtype],
        HALF2=config.half2_path(w.dtype, x.device), STREAM=config.stream(),
        num_warps=cfg.num_warps, **_pdl(x.device))


def rms_matvec(x: torch.Tensor, norm_w: torch.Tensor, w, bias: Optional[torch.Tensor],
               eps: float, out: Optional[torch.Tensor] = None,
               config: KernelConfig = DEFAULT_CONFIG) -> torch.Tensor:
    """Return w @ rms_norm(x) (+ bias) as float32 [N], into out when given."""
    y = torch.empty(w.shape[0], device=x.device, dtype=torch.float32) if out is None else out
    _matvec(w, x, y, norm_w, bias, eps, 'rms_matvec', config)
    return y


def argmax_slot(device: torch.device) -> torch.Tensor:
    """Return the 64-bit slot greedy_head's argmax folds into, ready for its first use."""
    return torch.full((1,), -2 ** 63, device=device, dtype=torch.int64)


def step_clock(device: torch.device) -> torch.Tensor:
    """Return the slot where embed stamps a step's start (ns) for its last kernel to read."""
    return torch.zeros(1, device=device, dtype=torch.int64)


def _clocked(clock: Optional[torch.Tensor]) -> bool:
    # The interpreter has no clock to read: its steps are not timed by their kernels.
    return clock is not None and not INTERPRET


def greedy_head(x: torch.Tensor, norm_w: torch.Tensor, w: torch.Tensor, eps: float,
                logits: torch.Tensor, token: torch.Tensor, pos: torch.Tensor,
                packed: torch.Tensor, config: KernelConfig = DEFAULT_CONFIG,
                clock: Optional[torch.Tensor] = None,
                host_out: Optional[torch.Tensor] = None) -> None:
    """
    Write the logits, their argmax into token, advance pos: the greedy step's end.

    packed is an argmax_slot that the caller keeps: the step leaves it ready for the next. With
    host_out (int64 [rows, 2], pinned), the token also goes to row pos % rows, and with a clock
    that embed stamped, the step's device time (ns) beside it.
    """
    _matvec(w, x, logits, norm_w, None, eps, 'rms_matvec', config, argmax=packed)
    reply, clocked = host_out is not None, _clocked(clock)
    _greedy_finish_kernel[(1,)](packed, token, pos, clock if clocked else packed,
                                host_out if reply else packed,
                                host_out.shape[0] if reply else 1, REPLY=reply,
                                CLOCKED=reply and clocked, num_warps=1, **_pdl(x.device))


def masked_greedy_end(logits: torch.Tensor, bits: torch.Tensor, token: torch.Tensor,
                      pos: torch.Tensor, packed: torch.Tensor, host_out: torch.Tensor,
                      clock: Optional[torch.Tensor] = None) -> None:
    """
    Write the argmax of the logits bits allows into token and host_out's row; advance pos.

    A constrained greedy step's end in two kernels (sampling.mask_logits, the argmax and
    step_end took ten). packed is greedy_head's argmax slot, left ready as greedy_head leaves it.
    """
    n = logits.shape[0]
    _masked_argmax_kernel[(triton.cdiv(n, _MASKED_BLOCK),)](
        logits, bits, packed, n, BLOCK=_MASKED_BLOCK, num_warps=4, **_pdl(logits.device))
    clocked = _clocked(clock)
    _greedy_finish_kernel[(1,)](packed, token, pos, clock if clocked else packed, host_out,
                                host_out.shape[0], REPLY=True, CLOCKED=clocked, num_warps=1,
                                **_pdl(logits.device))


def step_end(token: torch.Tensor, pos: torch.Tensor, host_out: torch.Tensor,
             clock: Optional[torch.Tensor] = None) -> None:
    """Write token, and the ns since embed stamped clock, into host_out's row pos % rows."""
    clocked = _clocked(clock)
    _step_end_kernel[(1,)](token, pos, clock if clocked else token, host_out,
                           host_out.shape[0], CLOCKED=clocked, num_warps=1, **_pdl(token.device))


def embed(table: torch.Tensor, token: torch.Tensor, clock: Optional[torch.Tensor] = None,
          scale: Optional[float] = None) -> torch.Tensor:
    """
    Return table's row for token [1] (on the device) as float32 [H]: the step's residual.

    With a clock (step_clock), the kernel stamps the step's start into it. scale multiplies the
    row in its own dtype first (Gemma 3's sqrt(H)), as ops_torch.embed does.
    """
    h = table.shape[1]
    if table.stride(1) != 1:
        raise ValueError('the embedding kernel reads contiguous rows: pass table.contiguous()')
    x = torch.empty(h, device=table.device, dtype=torch.float32)
    block = 1024
    clocked = _clocked(clock)
    _embed_kernel[(triton.cdiv(h, block),)](table, token, x, h, table.stride(0),
                                            clock if clocked else token,
                                            1.0 if scale is None else scale, BLOCK=block,
                                            CLOCKED=clocked, SCALED=scale is not None,
                                            num_warps=4, **_pdl(table.device))
    return x


def rms_gate_up_silu(x: torch.Tensor, norm_w: torch.Tensor, w_gate_up, eps: float,
                     config: KernelConfig = DEFAULT_CONFIG) -> torch.Tensor:
    """Return silu(gate) * up for gate, up = w_gate_up @ rms_norm(x), float32 [I]."""
    return _gate_up(x, norm_w, w_gate_up, eps, False, config)


def _gate_up(x, norm_w, w_gate_up, eps, gelu: bool, config: KernelConfig) -> torch.Tensor:
    n2, k = w_gate_up.shape
    n = n2 // 2
    y = torch.empty(n, device=x.device, dtype=torch.float32)
    if isinstance(w_gate_up, PackedLinear):
        _q4_gemv(w_gate_up, x, y, norm_w, None, eps, 'gate_up', config, gelu=gelu)
        return y
    cfg = config.gemv('gate_up', n, k)
    _gate_up_kernel[(triton.cdiv(n, cfg.block_n),)](
        w_gate_up, x, y, norm_w, n, k, eps, ROW_BLOCK=gate_up_block(n), BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k, EVEN=_even(n, k, cfg), STREAM=config.stream(), GELU=gelu,
        AHEAD=cfg.tiles_ahead, num_warps=cfg.num_warps, **_pdl(x.device))
    return y


def rms_gate_up_gelu(x: torch.Tensor, norm_w: torch.Tensor, w_gate_up, eps: float,
                     config: KernelConfig = DEFAULT_CONFIG) -> torch.Tensor:
    """Return gelu_tanh(gate) * up for gate, up = w_gate_up @ rms_norm(x), float32 [I] (GeGLU)."""
    return _gate_up(x, norm_w, w_gate_up, eps, True, config)


def head_norm(qkv: torch.Tensor, q_norm: torch.Tensor, k_norm: torch.Tensor, num_heads: int,
              eps: float) -> None:
    """
    Normalise each q and k head of qkv [(Hq + 2 Hkv) D] in place (RMSNorm by q_norm, k_norm).

    qkv [n, (Hq + 2 Hkv) D] normalises each of its n rows (a verify step's), in one kernel.
    """
    dim = q_norm.shape[0]
    rows = qkv.shape[0] if qkv.dim() == 2 else 1
    heads = num_heads + (qkv.shape[-1] // dim - num_heads) // 2
    _head_norm_kernel[(heads, rows)](qkv, q_norm, k_norm, num_heads, qkv.shape[-1], eps, D=dim,
                                     WDTYPE=_TL_DTYPES[q_norm.dtype],
                                     num_warps=1 if dim <= 128 else 2, **_pdl(qkv.device))


def matvec_norm_add(x: torch.Tensor, a: torch.Tensor, w, norm_w: torch.Tensor, eps: float,
                    config: KernelConfig = DEFAULT_CONFIG) -> None:
    """
    Add rms_norm(w @ a) * norm_w into x in place: Gemma 3's residual, normed after the sublayer.

    Two kernels: the GEMV, then the norm and the add in one program (the vector is one hidden
    size, a few thousand values).
    """
    h = w.shape[0]
    y = torch.empty(h, device=x.device, dtype=torch.float32)
    _matvec(w, a, y, None, None, 0.0, 'rms_matvec', config)
    block = triton.next_power_of_2(h)
    _norm_add_kernel[(1,)](x, y, norm_w, h, eps, BLOCK=block, WDTYPE=_TL_DTYPES[w.dtype],
                           num_warps=min(16, max(4, block // 512)), **_pdl(x.device))


def matvec_add(x: torch.Tensor, a: torch.Tensor, w,
               config: KernelConfig = DEFAULT_CONFIG) -> None:
    """Add w @ a into x in place (the residual connection)."""
    _matvec(w, a, x, None, None, 0.0, 'matvec_add', config, accumulate=True)


def rope_attention(qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int,
                   config: KernelConfig = DEFAULT_CONFIG, scale: Optional[float] = None,
                   window: int = 0, head_norms: Optional[HeadNorms] = None) -> torch.Tensor:
    """
    Rotate q and k for position pos, store k and v at pos, attend over 0..pos with GQA.

    qkv is the QKV GEMV's output [(Hq + 2 Hkv) D]; returns float32 [Hq * D]. Scores are scaled
    by scale (1 / sqrt(D) unless given); window > 0 attends to the last window positions only
    (a sliding-window layer), which the Triton split kernel does and the CUDA one does not.
    head_norms (q_norm, k_norm, eps) RMS-norms each q and k head first, as head_norm does, inside
    the split kernel: qkv is left as it is.
    """
    kv_heads, max_context, dim = k_cache.shape
    scale = dim ** -0.5 if scale is None else scale
    group = num_heads // kv_heads
    group_p = max(16, triton.next_power_of_2(group))   # tl.dot needs 16 rows
    shape = config.attention_for(kv_heads, dim)
    splits, min_chunk, block_t = shape.splits, shape.min_chunk, shape.block_t
    if INTERPRET:
        splits, min_chunk, block_t = 4, 16, 16
    device = qkv.device
    maxs = torch.empty(kv_heads * splits * group_p, device=device, dtype=torch.float32)
    sums = torch.empty_like(maxs)
    accs = torch.empty(kv_heads * splits * group_p, dim, device=device, dtype=torch.float32)
    dot, precision = _products(k_cache.dtype)   # matrix units in the cache dtype
    pdl = _pdl(device)
    q_norm, k_norm, norm_eps = head_norms if head_norms is not None else (None, None, 0.0)
    if not window and config.attention_cuda_path(qkv, pos, cos, sin, k_cache, v_cache,
                                                 num_heads, head_norms):
        attention_cuda.split(qkv, pos, cos, sin, k_cache, v_cache, maxs, sums, accs, num_heads,
                             group_p, splits, min_chunk, shape.num_stages, scale, head_norms)
    else:
        _attn_split_kernel[(kv_heads, splits)](
            qkv, k_cache, v_cache, pos, maxs, sums, accs, cos, sin,
            qkv if q_norm is None else q_norm, qkv if k_norm is None else k_norm, max_context,
            scale, norm_eps, window, group, num_heads, kv_heads, D=dim, GROUP_P=group_p,
            BLOCK_T=block_t, SPLITS=splits, MIN_CHUNK=min_chunk, DOT=dot, PRECISION=precision,
            HEAD_NORM=head_norms is not None, num_warps=shape.num_warps,
            num_stages=shape.num_stages,
            **({'maxnreg': shape.max_registers} if shape.max_registers else {}), **pdl)
    out = torch.empty(num_heads, dim, device=device, dtype=torch.float32)
    _attn_reduce_kernel[(num_heads,)](maxs, sums, accs, out, group, D=dim, GROUP_P=group_p,
                                      SPLITS=splits, num_warps=4, **pdl)
    return out.view(-1)


# The least rows a rows GEMV's product takes (tl.dot's least width): fewer are padded to it.
ROWS_P = 16
# Rows a 4-bit linear takes through _rows_q4_kernel, padded to 16, 32 or 64 (its codes read once
# for all of them), from KernelConfig.q4_rows_min (fewer run the step's 4-bit GEMV once a row);
# more rows (a longer prompt's) dequantise it whole for cuBLAS. 16-bit linears take up to
# KernelConfig.rows_max rows the same way, more go to cuBLAS.
Q4_ROWS = 64


def _rows_path(x: torch.Tensor, w, config: KernelConfig) -> str:
    # 'rows' (the 16-bit rows kernels), 'q4' (_rows_q4_kernel), 'q4_each' (the step's 4-bit
    # GEMV once a row) or 'dense' (ops_torch's matrix product on the float weight, a 4-bit one
    # dequantised by dequantize: cuBLAS). A 4-bit tile lies in one group and gives tl.dot 16
    # inputs or more.
    if isinstance(w, PackedLinear):
        if x.shape[0] < config.q4_rows_min:
            return 'q4_each'
        return 'q4' if x.shape[0] <= Q4_ROWS and w.group_size % 16 == 0 else 'dense'
    return 'rows' if x.shape[0] <= config.rows_max else 'dense'


def _rows_padded(rows: int, block_k: int) -> Tuple[int, int]:
    # (rows padded for the product, the K tile): at most 4096 inputs of all rows together (the
    # float32 input tile and the norm's squares: 32 registers each a thread at 4 warps).
    rows_p = max(ROWS_P, triton.next_power_of_2(rows))
    return rows_p, min(block_k, 4096 // rows_p)


def dequantize(w: PackedLinear) -> torch.Tensor:
    """
    Return a 4-bit linear's float weight [N, K] in its model dtype, in one kernel.

    PackedLinear.dense's values (exact in float32, then rounded once), at one read of the codes
    and one write of the weight where PyTorch's ops take a dozen passes.
    """
    n, k = w.shape
    out = torch.empty(n, k, device=w.codes.device, dtype=w.dtype)
    block_n, block_k = 64, math.gcd(64, w.group_size)
    _dequantize_q4_kernel[(triton.cdiv(n, block_n), triton.cdiv(k, block_k))](
        w.codes, w.scales, w.zeros if w.zeros is not None else w.scales, out, n, k,
        HAS_ZEROS=w.zeros is not None, GROUP=w.group_size, BLOCK_N=block_n, BLOCK_K=block_k,
        num_warps=4)
    return out


def dense(w) -> torch.Tensor:
    """Return a float weight as it is, a 4-bit one dequantised (gptq.dense's values)."""
    return dequantize(w) if isinstance(w, PackedLinear) else w


@triton.jit
def _prompt_norm_kernel(X, W, Y, H, inner, outer_stride, inner_stride, eps,
                        BLOCK: tl.constexpr, WDTYPE: tl.constexpr):
    # One row of H values (row = outer * inner + i, at outer * outer_stride + i * inner_stride
    # of X) normed as llama.norm_to: in float32, rounded to the weight's dtype WDTYPE, times the
    # weight, the product rounded to WDTYPE, then to Y's dtype.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    src = X + (row // inner) * outer_stride + (row % inner) * inner_stride
    x = tl.load(src + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = _inv_rms(x * x, H, eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    y = ((x * rstd).to(WDTYPE).to(tl.float32) * w).to(WDTYPE)
    tl.store(Y + row * H + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _prompt_rotate_kernel(X, COS, SIN, Y, heads, token_stride, D: tl.constexpr):
    # Head h of token t (rows of X token_stride apart, heads D apart) rotated as llama._rotate
    # and the step's split kernel rotate (pairs d, d + D/2 in float32, the token's row t of the
    # tables), rounded to Y's dtype.
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    d = tl.arange(0, D)
    src = X + t * token_stride + h * D
    cos, sin = _rope_tables(COS, SIN, t, D)
    y = _rotated(tl.load(src + d), tl.load(src + (d + D // 2) % D), cos, sin, D,
                 Y.dtype.element_ty)
    tl.store(Y + (t * heads + h) * D + d, y.to(Y.dtype.element_ty))


@triton.jit
def _prompt_gated_kernel(Y, OUT, N, ROW_BLOCK: tl.constexpr, BLOCKED: tl.constexpr,
                         GELU: tl.constexpr, BLOCK: tl.constexpr):
    # act(gate) * up of one row of y [n, 2 N] as llama.silu_gate_up / gelu_gate_up round it:
    # the activation rounded to the dtype, the product rounded again. BLOCKED: a dense
    # gate/up's layout (llama.fuse_gate_up: ROW_BLOCK gate columns, then the same up ones);
    # else a 4-bit one's, [gate; up].
    row = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = j < N
    if BLOCKED:
        gate_at = (j // ROW_BLOCK) * 2 * ROW_BLOCK + j % ROW_BLOCK
        up_at = gate_at + ROW_BLOCK
    else:
        gate_at = j
        up_at = j + N
    src = Y + row * 2 * N
    gate = tl.load(src + gate_at, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(src + up_at, mask=mask, other=0.0).to(tl.float32)
    dtype = OUT.dtype.element_ty
    act = _activation(gate, GELU).to(dtype).to(tl.float32)
    tl.store(OUT + row * N + j, (act * up).to(dtype), mask=mask)


def prompt_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
                dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """
    Return llama.norm_to(x, weight, eps, dtype), in one kernel.

    x [..., H] is a prompt's residual, or its q or k heads [n, heads, D] as views of the QKV
    product (read in place).
    """
    h = x.shape[-1]
    # Rows as [outer, inner, H]: q or k heads keep their two strides, anything else is a view
    # of evenly spaced rows where it can be (a copy where it cannot).
    view = x if x.dim() == 3 and x.stride(-1) == 1 else x.reshape(-1, 1, h)
    outer, inner = view.shape[0], view.shape[1]
    y = torch.empty(x.shape, device=x.device, dtype=weight.dtype if dtype is None else dtype)
    block = triton.next_power_of_2(h)
    _prompt_norm_kernel[(outer * inner,)](view, weight, y, h, inner, view.stride(0),
                                          view.stride(1), eps, BLOCK=block,
                                          WDTYPE=_TL_DTYPES[weight.dtype],
                                          num_warps=min(16, max(1, block // 256)))
    return y


def prompt_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """llama.rotate_heads in one kernel: heads x [n, heads, D], tables' rows cos, sin [n, D/2]."""
    n, heads, dim = x.shape
    if x.stride(2) != 1 or x.stride(1) != dim:
        x = x.contiguous()
    y = torch.empty(n, heads, dim, device=x.device, dtype=x.dtype)
    _prompt_rotate_kernel[(n, heads)](x, cos.contiguous(), sin.contiguous(), y, heads,
                                      x.stride(0), D=dim, num_warps=1 if dim <= 128 else 2)
    return y


def prompt_gated(y: torch.Tensor, w_gate_up, gelu: bool) -> torch.Tensor:
    """llama.gated in one kernel: act(gate) * up [n, I] of y [n, 2 I], in y's dtype."""
    y = y.contiguous()
    n, i = y.shape[0], y.shape[-1] // 2
    out = torch.empty(*y.shape[:-1], i, device=y.device, dtype=y.dtype)
    block = min(1024, triton.next_power_of_2(i))
    _prompt_gated_kernel[(n, triton.cdiv(i, block))](
        y, out, i, ROW_BLOCK=gate_up_block(i), BLOCKED=not isinstance(w_gate_up, PackedLinear),
        GELU=gelu, BLOCK=block, num_warps=4)
    return out


# A prompt's forward on these kernels (llama.PromptOps): each op one kernel.
PROMPT = PromptOps(dense=dense, norm=prompt_norm, rotate=prompt_rotate, gated=prompt_gated)


def _rows_q4(w: PackedLinear, x, y, norm_w, bias, eps, kind: str, config: KernelConfig,
             accumulate: bool = False, gelu: bool = False) -> None:
    n, k = w.shape
    gate_up = kind == 'rows_gate_up'
    if gate_up:
        n //= 2
    cfg, launch = _rows_launch(kind + '_q4', n, k, w.dtype, x, config, w.group_size)
    split_k = cfg.split_k if accumulate else 1
    _rows_q4_kernel[(triton.cdiv(n, cfg.block_n), split_k)](
        w.codes, w.scales, w.zeros if w.zeros is not None else w.scales, x, y,
        norm_w if norm_w is not None else x, bias if bias is not None else y, x.shape[0], n, k,
        w.codes.shape[1], eps, HAS_NORM=norm_w is not None, HAS_BIAS=bias is not None,
        ACCUMULATE=accumulate, GATE_UP=gate_up, GELU=gelu, HAS_ZEROS=w.zeros is not None,
        GROUP=w.group_size, SPLIT_K=split_k, WDTYPE=_TL_DTYPES[w.dtype], **launch)


def _rows_launch(kind: str, n: int, k: int, dtype: torch.dtype, x: torch.Tensor,
                 config: KernelConfig, group: int = 0) -> tuple:
    # (launch shape, the launch's common keywords) of a rows GEMV of kind, N and K for the
    # rows x; a 4-bit one's K tile lies within one group (its size: group).
    cfg = config.gemv(kind, n, k)
    dot, precision = _products(dtype)
    rows_p, block_k = _rows_padded(x.shape[0], cfg.block_k)
    if group:
        block_k = math.gcd(block_k, group)
    return cfg, {'ROWS_P': rows_p, 'BLOCK_N': cfg.block_n, 'BLOCK_K': block_k,
                 'DOT': dot, 'PRECISION': precision, 'STREAM': config.stream(),
                 'num_warps': cfg.num_warps, 'num_stages': _rows_stages(cfg),
                 **_pdl(x.device)}


def _rows_stages(cfg: GemvConfig) -> int:
    # The rows kernels' pipeline depth (GemvConfig.tiles_ahead).
    return cfg.tiles_ahead + 2


def rows_rms_matvec(x: torch.Tensor, norm_w: torch.Tensor, w, bias: Optional[torch.Tensor],
                    eps: float, out: Optional[torch.Tensor] = None,
                    config: KernelConfig = DEFAULT_CONFIG) -> torch.Tensor:
    """rms_matvec for rows x [n, K]: float32 [n, N], each weight read once for all rows."""
    path = _rows_path(x, w, config)
    if path == 'dense':
        return ops_torch.rms_matvec(x, norm_w, w, bias, eps, out, PROMPT)
    n, k = w.shape
    y = torch.empty(x.shape[0], n, device=x.device, dtype=torch.float32) if out is None else out
    if path == 'q4_each':
        for x_row, y_row in zip(x, y):
            _q4_gemv(w, x_row, y_row, norm_w, bias, eps, 'rms_matvec', config)
        return y
    if path == 'q4':
        _rows_q4(w, x, y, norm_w, bias, eps, 'rows_rms_matvec', config)
        return y
    cfg, launch = _rows_launch('rows_rms_matvec', n, k, w.dtype, x, config)
    _rows_matvec_kernel[(triton.cdiv(n, cfg.block_n), 1)](
        w, x, y, norm_w, bias if bias is not None else y, x.shape[0], n, k, eps, HAS_NORM=True,
        HAS_BIAS=bias is not None, ACCUMULATE=False, SPLIT_K=1, **launch)
    return y


def rows_matvec_add(x: torch.Tensor, a: torch.Tensor, w,
                    config: KernelConfig = DEFAULT_CONFIG) -> None:
    """matvec_add for rows: x[j] += w @ a[j] in place, each weight read once for all rows."""
    path = _rows_path(x, w, config)
    if path == 'dense':
        ops_torch.matvec_add(x, a, w, PROMPT)
        return
    if path == 'q4_each':
        for x_row, a_row in zip(x, a):
            _q4_gemv(w, a_row, x_row, None, None, 0.0, 'matvec_add', config, accumulate=True)
        return
    if path == 'q4':
        _rows_q4(w, a, x, None, None, 0.0, 'rows_matvec_add', config, accumulate=True)
        return
    n, k = w.shape
    cfg, launch = _rows_launch('rows_matvec_add', n, k, w.dtype, x, config)
    _rows_matvec_kernel[(triton.cdiv(n, cfg.block_n), cfg.split_k)](
        w, a, x, a, a, x.shape[0], n, k, 0.0, HAS_NORM=False, HAS_BIAS=False, ACCUMULATE=True,
        SPLIT_K=cfg.split_k, **launch)


def rows_matvec_norm_add(x: torch.Tensor, a: torch.Tensor, w, norm_w: torch.Tensor, eps: float,
                         config: KernelConfig = DEFAULT_CONFIG) -> None:
    """matvec_norm_add for rows: x[j] += rms_norm(w @ a[j]) * norm_w (Gemma 3), in place."""
    if _rows_path(x, w, config) == 'dense':
        ops_torch.matvec_norm_add(x, a, w, norm_w, eps, PROMPT)
        return
    h = w.shape[0]
    y = torch.zeros(x.shape[0], h, device=x.device, dtype=torch.float32)
    rows_matvec_add(y, a, w, config)
    block = triton.next_power_of_2(h)
    _norm_add_kernel[(x.shape[0],)](x, y, norm_w, h, eps, BLOCK=block,
                                    WDTYPE=_TL_DTYPES[w.dtype],
                                    num_warps=min(16, max(4, block // 512)), **_pdl(x.device))


def rows_gate_up(x: torch.Tensor, norm_w: torch.Tensor, w_gate_up, eps: float, gelu: bool,
                 config: KernelConfig = DEFAULT_CONFIG) -> torch.Tensor:
    """rms_gate_up_silu (gelu: rms_gate_up_gelu) for rows x [n, K]: float32 [n, I]."""
    path = _rows_path(x, w_gate_up, config)
    if path == 'dense':
        op = ops_torch.rms_gate_up_gelu if gelu else ops_torch.rms_gate_up_silu
        return op(x, norm_w, w_gate_up, eps, PROMPT)
    n2, k = w_gate_up.shape
    y = torch.empty(x.shape[0], n2 // 2, device=x.device, dtype=torch.float32)
    if path == 'q4_each':
        for x_row, y_row in zip(x, y):
            _q4_gemv(w_gate_up, x_row, y_row, norm_w, None, eps, 'gate_up', config, gelu=gelu)
        return y
    if path == 'q4':
        _rows_q4(w_gate_up, x, y, norm_w, None, eps, 'rows_gate_up', config, gelu=gelu)
        return y
    n = n2 // 2   # a gate/up's launch shape is keyed by I, as the step's and the 4-bit ones
    cfg, launch = _rows_launch('rows_gate_up', n, k, w_gate_up.dtype, x, config)
    _rows_gate_up_kernel[(triton.cdiv(n, cfg.block_n),)](
        w_gate_up, x, y, norm_w, x.shape[0], n, k, eps, ROW_BLOCK=gate_up_block(n), GELU=gelu,
        **launch)
    return y


def rows_rope_attention(qkv: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor,
                        sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        num_heads: int, config: KernelConfig = DEFAULT_CONFIG,
                        scale: Optional[float] = None, window: int = 0) -> torch.Tensor:
    """
    rope_attention for rows qkv [n, (Hq + 2 Hkv) D] at positions pos [n], in three kernels.

    Every row's key and value is stored first, then row r attends over 0..pos[r]: rows at
    consecutive positions see each other causally (a verify step, a prompt's chunk). Returns
    float32 [n, Hq * D]. The keys are split over programs as the step's split kernel splits
    them (config.attention_for), so a few rows over a long context still fill the GPU.
    """
    rows = qkv.shape[0]
    kv_heads, max_context, dim = k_cache.shape
    scale = dim ** -0.5 if scale is None else scale
    group = num_heads // kv_heads
    shape = config.attention_for(kv_heads, dim)
    splits, min_chunk, block_t = shape.splits, shape.min_chunk, shape.block_t
    if INTERPRET:
        splits, min_chunk, block_t = 4, 16, 16
    # Rows per program: enough to give tl.dot 16 query rows at the least, at most 64 in all.
    # (a 256-wide head keeps 32, so that its float32 accumulator stays in registers).
    group_p = triton.next_power_of_2(group)
    most = 64 if dim <= 128 else 32
    block_r = min(triton.next_power_of_2(rows), max(1, most // group_p))
    block_r = max(block_r, 16 // min(group_p, 16))
    dot, precision = _products(k_cache.dtype)
    device = qkv.device
    # q in the dtype of the products, as the step's split kernel rounds it.
    q = torch.empty(rows, num_heads, dim, device=device,
                    dtype=torch.float32 if dot == tl.float32 else k_cache.dtype)
    _rows_rope_store_kernel[(rows, num_heads + kv_heads)](
        qkv, q, k_cache, v_cache, pos, cos, sin, max_context, num_heads, kv_heads, D=dim,
        num_warps=1 if dim <= 128 else 2)
    partials = rows * num_heads * splits
    maxs = torch.empty(partials, device=device, dtype=torch.float32)
    sums = torch.empty_like(maxs)
    accs = torch.empty(partials, dim, device=device, dtype=torch.float32)
    _rows_attn_split_kernel[(kv_heads, triton.cdiv(rows, block_r), splits)](
        q, k_cache, v_cache, pos, maxs, sums, accs, rows, max_context, scale, window, group,
        num_heads, D=dim, GROUP_P=group_p, BLOCK_R=block_r, BLOCK_T=block_t, SPLITS=splits,
        MIN_CHUNK=min_chunk, DOT=dot, PRECISION=precision, num_warps=4)
    out = torch.empty(rows, num_heads * dim, device=device, dtype=torch.float32)
    _rows_attn_reduce_kernel[(rows * num_heads,)](maxs, sums, accs, out, D=dim, SPLITS=splits,
                                                  num_warps=4)
    return out


class KernelOps:
    """The decode step's ops (the interface of ops_torch) on the kernels, bound to one config."""

    prompt = PROMPT   # a long prompt's forward besides its matrix products

    def __init__(self, config: KernelConfig):
        self.config = config
        # device -> (greedy_head's argmax slot, the step's clock), kept for captured graphs
        self._slots = {}

    def _slots_on(self, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
        if device not in self._slots:
            self._slots[device] = argmax_slot(device), step_clock(device)
        return self._slots[device]

    def embed(self, table, token, scale=None):
        return embed(table, token, self._slots_on(table.device)[1], scale)

    def rms_matvec(self, x, norm_w, w, bias, eps, out=None):
        return rms_matvec(x, norm_w, w, bias, eps, out, self.config)

    def greedy_head(self, x, norm_w, w, eps, logits, token, pos, host_out):
        packed, clock = self._slots_on(x.device)
        greedy_head(x, norm_w, w, eps, logits, token, pos, packed, self.config, clock, host_out)

    def step_end(self, token, pos, host_out):
        step_end(token, pos, host_out, self._slots_on(token.device)[1])

    def masked_greedy_end(self, logits, bits, token, pos, host_out):
        packed, clock = self._slots_on(logits.device)
        masked_greedy_end(logits, bits, token, pos, packed, host_out, clock)

    def rms_gate_up_silu(self, x, norm_w, w_gate_up, eps):
        return rms_gate_up_silu(x, norm_w, w_gate_up, eps, self.config)

    def matvec_add(self, x, a, w):
        matvec_add(x, a, w, self.config)

    def rope_attention(self, qkv, pos, cos, sin, k_cache, v_cache, num_heads, scale=None,
                       window=0, head_norms=None):
        return rope_attention(qkv, pos, cos, sin, k_cache, v_cache, num_heads, self.config,
                              scale, window, head_norms)

    def rows_rms_matvec(self, x, norm_w, w, bias, eps, out=None):
        return rows_rms_matvec(x, norm_w, w, bias, eps, out, self.config)

    def rows_gate_up_silu(self, x, norm_w, w_gate_up, eps):
        return rows_gate_up(x, norm_w, w_gate_up, eps, False, self.config)

    def rows_gate_up_gelu(self, x, norm_w, w_gate_up, eps):
        return rows_gate_up(x, norm_w, w_gate_up, eps, True, self.config)

    def rows_matvec_add(self, x, a, w):
        rows_matvec_add(x, a, w, self.config)

    def rows_matvec_norm_add(self, x, a, w, norm_w, eps):
        rows_matvec_norm_add(x, a, w, norm_w, eps, self.config)

    def rows_rope_attention(self, qkv, pos, cos, sin, k_cache, v_cache, num_heads, scale=None,
                            window=0):
        return rows_rope_attention(qkv, pos, cos, sin, k_cache, v_cache, num_heads,
                                   self.config, scale, window)

    def head_norm(self, qkv, q_norm, k_norm, num_heads, eps):
        head_norm(qkv, q_norm, k_norm, num_heads, eps)

    def rms_gate_up_gelu(self, x, norm_w, w_gate_up, eps):
        return rms_gate_up_gelu(x, norm_w, w_gate_up, eps, self.config)

    def matvec_norm_add(self, x, a, w, norm_w, eps):
        matvec_norm_add(x, a, w, norm_w, eps, self.config)
