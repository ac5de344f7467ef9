"""
Compile the decode kernels for Hopper (sm_90) ahead of time, no GPU needed.

Run as a script (without TRITON_INTERPRET): prints one JSON line per kernel variant with whether
it compiled, the widths of its global loads in the SASS, and its atomics and memory-order
instructions (fences, L1 invalidations). engine/kernels/test_kernel_compile.py runs it, so CI
catches kernels that only fail when compiled for a GPU. Its compile_sm90, cubin_text and
resource_usage also serve the static studies under benchmarks/results/h200/explore/
(static_sass.py, static_waits.py, stamp_regs.py), so each compiles its kernels the way this test
does.
"""

import collections
import json
import os
import re
import subprocess
import tempfile

from physinf_ros.engine.kernels import ops_triton
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton.language as tl

TARGET = GPUTarget('cuda', 90, 32)
TOOLS = os.path.join(os.path.dirname(triton.__file__), 'backends', 'nvidia', 'bin')
BF, F32 = '*bf16', '*fp32'
GEMV = {'W': BF, 'X': F32, 'Y': F32, 'NORM': BF, 'BIAS': BF, 'ARGMAX': '*i64', 'N': 'i32',
        'K': 'i32', 'eps': 'fp32'}


def variants():
    """(kernel, signature, constexprs) for every variant the engine launches on Hopper."""
    out = []
    for even in (True, False):
        # The head (one tile ahead of the wait) and a residual GEMV with two (tiles_ahead).
        for norm, acc, argmax, split, ahead in ((True, False, True, 1, 1),
                                                (False, True, False, 2, 2)):
            consts = {'HAS_NORM': norm, 'HAS_BIAS': norm, 'ACCUMULATE': acc,
                      'HAS_ARGMAX': argmax, 'BLOCK_N': 8, 'BLOCK_K': 1024, 'SPLIT_K': split,
                      'EVEN': even, 'STREAM': 'evict_first', 'AHEAD': ahead, 'PDL': True}
            out.append((ops_triton._matvec_kernel, GEMV, consts))
        # SwiGLU and Gemma 3's GeGLU, one tile ahead of the wait; SwiGLU with two too.
        for gelu, ahead in ((False, 1), (True, 1), (False, 2)):
            out.append((ops_triton._gate_up_kernel,
                        {k: GEMV[k] for k in ('W', 'X', 'Y', 'NORM', 'N', 'K', 'eps')},
                        {'ROW_BLOCK': 8, 'BLOCK_N': 4, 'BLOCK_K': 512, 'EVEN': even,
                         'STREAM': 'evict_first', 'GELU': gelu, 'AHEAD': ahead, 'PDL': True}))
    q4 = {'QW': '*i32', 'S': '*fp16', 'Z': '*u8', 'X': F32, 'Y': F32, 'NORM': BF, 'BIAS': BF,
          'N': 'i32', 'K': 'i32', 'N_ALL': 'i32', 'eps': 'fp32', 'MAGIC': 'i32'}
    for even in (True, False):
        for norm, acc, gate_up, split in ((True, False, False, 1), (False, True, False, 4),
                                          (True, False, True, 1)):
            # Each of half2 and float32 sums runs with and without asymmetric zeros.
            out.append((ops_triton._q4_gemv_kernel, q4,
                        {'HAS_NORM': norm, 'HAS_BIAS': norm and not gate_up, 'ACCUMULATE': acc,
                         'GATE_UP': gate_up, 'GELU': gate_up and not even,   # Gemma 3's
                         'HAS_ZEROS': gate_up or not even, 'GROUP': 128,
                         'BLOCK_N': 32, 'BLOCK_R': 32, 'SPLIT_K': split, 'EVEN': even,
                         'WDTYPE': tl.bfloat16, 'HALF2': even or gate_up,
                         'STREAM': 'evict_first', 'PDL': True}))
    attention = {'D': 128, 'GROUP_P': 16, 'BLOCK_T': 64, 'SPLITS': 32, 'MIN_CHUNK': 128,
                 'PDL': True}
    # Llama's split; Qwen3's with its bf16 head norms; Gemma 3's, float32 norms at head size 256.
    for dim, norm, head_norm in ((128, BF, False), (128, BF, True), (256, F32, True)):
        out.append((ops_triton._attn_split_kernel,
                    {'QKV': F32, 'KC': BF, 'VC': BF, 'POS': '*i32', 'MAXS': F32, 'SUMS': F32,
                     'ACCS': F32, 'COS': F32, 'SIN': F32, 'QN': norm, 'KN': norm,
                     'max_context': 'i32', 'scale': 'fp32', 'norm_eps': 'fp32',
                     'window': 'i32', 'group': 'i32', 'num_heads': 'i32', 'kv_heads': 'i32'},
                    {**attention, 'D': dim, 'DOT': tl.bfloat16, 'PRECISION': 'tf32',
                     'HEAD_NORM': head_norm}))
    # Gemma 3's norm of a sublayer's output added to the residual (hidden 2560, the 4B's).
    out.append((ops_triton._norm_add_kernel, {'X': F32, 'Y': F32, 'NORM': F32, 'H': 'i32',
                                              'eps': 'fp32'},
                {'BLOCK': 4096, 'WDTYPE': tl.bfloat16, 'PDL': True}))
    # Qwen3's q/k norm (bf16 weights), Gemma 3's (float32 1 + weight, head size 256).
    for norm, dim in ((BF, 128), (F32, 256)):
        out.append((ops_triton._head_norm_kernel,
                    {'QKV': F32, 'QN': norm, 'KN': norm, 'num_heads': 'i32', 'row_stride': 'i32',
                     'eps': 'fp32'},
                    {'D': dim, 'WDTYPE': tl.bfloat16 if norm == BF else tl.float32,
                     'PDL': True}))
    out.append((ops_triton._attn_reduce_kernel,
                {'MAXS': F32, 'SUMS': F32, 'ACCS': F32, 'OUT': F32, 'group': 'i32'},
                {k: attention[k] for k in ('D', 'GROUP_P', 'SPLITS', 'PDL')}))
    # A verify step's kernels over rows (kernels/rows.py): GEMVs with the norm, a bias and a
    # residual; gate/up with each activation; rope and store, attention and its merge.
    rows = {'ROWS_P': 16, 'BLOCK_N': 32, 'BLOCK_K': 128, 'DOT': tl.bfloat16, 'PRECISION': 'tf32',
            'STREAM': 'evict_first', 'PDL': True}
    for norm, acc in ((True, False), (False, True)):
        out.append((ops_triton._rows_matvec_kernel,
                    {**{k: GEMV[k] for k in ('W', 'X', 'Y', 'NORM', 'BIAS')}, 'R': 'i32',
                     'N': 'i32', 'K': 'i32', 'eps': 'fp32'},
                    {**rows, 'HAS_NORM': norm, 'HAS_BIAS': norm, 'ACCUMULATE': acc,
                     'SPLIT_K': 1 if norm else 2}))
    for gelu, rows_p in ((False, 16), (True, 16), (False, 64)):   # 64: a prompt's rows
        out.append((ops_triton._rows_gate_up_kernel,
                    {**{k: GEMV[k] for k in ('W', 'X', 'Y', 'NORM')}, 'R': 'i32', 'N': 'i32',
                     'K': 'i32', 'eps': 'fp32'},
                    {**rows, 'ROWS_P': rows_p, 'BLOCK_K': 4096 // rows_p if rows_p > 32 else 128,
                     'ROW_BLOCK': 8, 'GELU': gelu}))
    # The same over a 4-bit linear's codes (16 and 64 padded rows), and the dequantising kernel
    # a longer prompt's product reads.
    rows_q4 = {k: q4[k] for k in ('QW', 'S', 'Z', 'X', 'Y', 'NORM', 'BIAS', 'N', 'K', 'N_ALL',
                                  'eps')}
    for norm, acc, gate_up, gelu, rows_p in ((True, False, False, False, 16),
                                             (False, True, False, False, 32),
                                             (True, False, True, False, 64),
                                             (True, False, True, True, 16)):
        out.append((ops_triton._rows_q4_kernel, {**rows_q4, 'R': 'i32'},
                    {**rows, 'ROWS_P': rows_p, 'BLOCK_K': 4096 // rows_p if rows_p > 32 else 128,
                     'HAS_NORM': norm,
                     'HAS_BIAS': norm and not gate_up, 'ACCUMULATE': acc, 'GATE_UP': gate_up,
                     'GELU': gelu, 'HAS_ZEROS': gelu, 'GROUP': 128, 'SPLIT_K': 4 if acc else 1,
                     'WDTYPE': tl.bfloat16}))
    out.append((ops_triton._dequantize_q4_kernel,
                {'QW': '*i32', 'S': '*fp16', 'Z': '*u8', 'OUT': BF, 'N': 'i32', 'K': 'i32'},
                {'HAS_ZEROS': False, 'GROUP': 128, 'BLOCK_N': 64, 'BLOCK_K': 64}))
    for dim in (128, 256):
        out.append((ops_triton._rows_rope_store_kernel,
                    {'QKV': F32, 'Q': BF, 'KC': BF, 'VC': BF, 'POS': '*i32', 'COS': F32,
                     'SIN': F32, 'max_context': 'i32', 'num_heads': 'i32', 'kv_heads': 'i32'},
                    {'D': dim}))
        out.append((ops_triton._rows_attn_split_kernel,
                    {'Q': BF, 'KC': BF, 'VC': BF, 'POS': '*i32', 'MAXS': F32, 'SUMS': F32,
                     'ACCS': F32, 'rows': 'i32', 'max_context': 'i32', 'scale': 'fp32',
                     'window': 'i32', 'group': 'i32', 'num_heads': 'i32'},
                    {'D': dim, 'GROUP_P': 4, 'BLOCK_R': 16 if dim == 128 else 8,
                     'BLOCK_T': 64 if dim == 128 else 32, 'SPLITS': 32, 'MIN_CHUNK': 128,
                     'DOT': tl.bfloat16, 'PRECISION': 'tf32'}))
        out.append((ops_triton._rows_attn_reduce_kernel,
                    {'MAXS': F32, 'SUMS': F32, 'ACCS': F32, 'OUT': F32},
                    {'D': dim, 'SPLITS': 32}))
    # A long prompt's fused kernels (ops_triton.PROMPT): the residual's norm (bf16 weights,
    # and Gemma 3's float32 ones rounded to bf16), RoPE of the q heads, both activations.
    for weight in (BF, F32):
        out.append((ops_triton._prompt_norm_kernel,
                    {'X': F32, 'W': weight, 'Y': BF, 'H': 'i32', 'inner': 'i32',
                     'outer_stride': 'i32', 'inner_stride': 'i32', 'eps': 'fp32'},
                    {'BLOCK': 4096, 'WDTYPE': tl.bfloat16 if weight == BF else tl.float32}))
    out.append((ops_triton._prompt_rotate_kernel,
                {'X': BF, 'COS': F32, 'SIN': F32, 'Y': BF, 'heads': 'i32',
                 'token_stride': 'i32'}, {'D': 128}))
    for blocked, gelu in ((True, False), (False, True)):
        out.append((ops_triton._prompt_gated_kernel, {'Y': BF, 'OUT': BF, 'N': 'i32'},
                    {'ROW_BLOCK': 8, 'BLOCKED': blocked, 'GELU': gelu, 'BLOCK': 1024}))
    # The step's first and last kernels, with the clock they time the step by.
    reply = {'CLOCK': '*i64', 'HOST_OUT': '*i64', 'ROWS': 'i32'}
    out.append((ops_triton._greedy_finish_kernel, {'PACKED': '*i64', 'TOKEN': '*i64',
                                                   'POS': '*i32', **reply},
                {'REPLY': True, 'CLOCKED': True, 'PDL': True}))
    out.append((ops_triton._step_end_kernel, {'TOKEN': '*i64', 'POS': '*i32', **reply},
                {'CLOCKED': True, 'PDL': True}))
    out.append((ops_triton._masked_argmax_kernel, {'LOGITS': F32, 'BITS': '*i32',
                                                   'ARGMAX': '*i64', 'N': 'i32'},
                {'BLOCK': 1024, 'PDL': True}))
    # Gemma 3's, with the scale (the other families' is this without the product).
    out.append((ops_triton._embed_kernel, {'TABLE': BF, 'TOKEN': '*i64', 'X': F32, 'H': 'i32',
                                           'ROW_STRIDE': 'i32', 'CLOCK': '*i64', 'scale': 'fp32'},
                {'BLOCK': 1024, 'CLOCKED': True, 'SCALED': True, 'PDL': True}))
    return out


def compile_sm90(fn, types, constexprs, divisible=(), **options):
    """
    Return fn compiled for sm_90 as the JIT specialises it at run time.

    types maps each run-time argument to its Triton type ('*bf16', 'i32'); pointers, and the
    integer arguments named in divisible, are taken as multiples of 16, as the JIT finds 16-byte
    aligned buffers and sizes like 4096. options are launch options (num_warps, maxnreg).
    """
    sig = {n: 'constexpr' if n in constexprs else types[n] for n in fn.arg_names}
    attrs = {(i,): [['tt.divisibility', 16]] for i, n in enumerate(fn.arg_names)
             if sig[n].startswith('*') or n in divisible}
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs),
                          target=TARGET, options={'launch_pdl': True, **options})


def cubin_text(compiled, tool, *flags):
    """Return what Triton's bundled tool (cuobjdump, nvdisasm) prints for the kernel's cubin."""
    with tempfile.NamedTemporaryFile(suffix='.cubin') as cubin:
        cubin.write(compiled.asm['cubin'])
        cubin.flush()
        return subprocess.run([os.path.join(TOOLS, tool), *flags, cubin.name],
                              capture_output=True, text=True, check=True).stdout


def resource_usage(compiled):
    """Return the kernel's resources as cuobjdump counts them: {'REG': 168, 'STACK': 0, ...}."""
    return {k: int(v) for k, v in re.findall(r'([A-Z]+):(\d+)',
                                             cubin_text(compiled, 'cuobjdump', '-res-usage'))}


def compile_one(fn, signature, constexprs):
    sass = cubin_text(compile_sm90(fn, signature, constexprs, divisible=('N', 'K', 'N_ALL')),
                      'cuobjdump', '-sass')
    return (dict(collections.Counter(re.findall(r'LDG\.E[.\w]*', sass))),
            dict(collections.Counter(re.findall(r'\b(MEMBAR|CCTL|ATOMG|REDG)\b', sass))))


def main():
    for fn, signature, constexprs in variants():
        name = fn.__name__
        shown = {k: v for k, v in constexprs.items() if k not in ('DOT', 'WDTYPE')}
        try:
            loads, order = compile_one(fn, signature, constexprs)
            print(json.dumps({'kernel': name, 'constexprs': shown, 'loads': loads,
                              'order': order}))
        except Exception as exc:  # noqa: B902 - report every failing variant, not the first
            print(json.dumps({'kernel': name, 'constexprs': shown, 'error': str(exc)[-1500:]}))


if __name__ == '__main__':
    main()
