"""
Session 35: the stamps' registers, each kernel of the step compiled for sm_90 (no GPU).

Each kernel of a layer and the head, compiled as the package launches it, as session 14's
timeline.py stamped it until session 35, and stamped with at most the package's
registers (timeline.Capped, since session 35): registers, stack frame (where spills go), shared
memory, and the programs an SM holds at once, for the three robot shapes at config/kernels.yaml's
H200 launch shapes (attention on the Triton split, as the timeline runs it).

Why: session 22's stamped step of Qwen2.5-1.5B took 1.240-1.254 ms where the same step unstamped
took 1.090-1.111 (s22_ahead/run4_timeline_qwen2.5-1.5b.log), while the 1B's and the 3B's stamps
cost 0.5-1%; a stamped kernel that holds fewer programs an SM than the package's would run in
more waves.
Usage: stamp_regs.py (PYTHONPATH the repository root, no TRITON_INTERPRET)
"""
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 's14_timeline'))
sys.path.insert(0, os.path.join(HERE, '..', '..', '..', '..', '..', 'test', 'support'))
from kernel_aot import compile_sm90, resource_usage  # noqa: E402
from physinf_ros.engine import kernels  # noqa: E402
from physinf_ros.engine.llama import gate_up_block, ModelConfig  # noqa: E402
from physinf_ros.engine.models import synthetic_config  # noqa: E402
from physinf_ros.resources import config_path  # noqa: E402
from timeline import kernels_module, stamped_source  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import yaml  # noqa: E402

SMS = 132                       # H200
REGISTERS, THREADS, BLOCKS, SHARED = 65536, 2048, 32, 233472   # an SM's (sm_90)
TYPES = collections.defaultdict(lambda: '*fp32', {
    'KC': '*bf16', 'VC': '*bf16', 'W': '*bf16', 'NORM': '*bf16', 'BIAS': '*bf16', 'POS': '*i32',
    'ARGMAX': '*i64', 'STAMPS': '*i64', 'N': 'i32', 'K': 'i32', 'max_context': 'i32',
    'group': 'i32', 'num_heads': 'i32', 'kv_heads': 'i32', 'STAMP_BASE': 'i32', 'eps': 'fp32',
    'scale': 'fp32'})
ARCHS = ('llama-3.2-1b', 'qwen2.5-1.5b', 'llama-3.2-3b')


def compiled(fn, consts, options):
    """Return (registers a thread, stack frame bytes, shared bytes) of fn compiled for sm_90."""
    kernel = compile_sm90(fn, TYPES, consts, divisible=('N', 'K', 'max_context'), **options)
    usage = resource_usage(kernel)
    return usage['REG'], usage['STACK'], kernel.metadata.shared


def resident(registers, shared, warps):
    """Programs an SM holds at once (registers allocated 256 a warp, shared 1 KB a block more)."""
    per_warp = -(-registers * 32 // 256) * 256
    limits = [REGISTERS // (per_warp * warps), THREADS // (32 * warps), BLOCKS]
    if shared:
        limits.append(SHARED // (shared + 1024))
    return min(limits)


def launches(config, c):
    """(op, kernel name, constexprs, options, programs) of one layer and the head."""
    stream = config.stream()
    hidden, dim = c.hidden_size, c.head_dim
    qkv = (c.num_heads + 2 * c.num_kv_heads) * dim
    out = []
    for op, kind, n, k, norm, bias, accumulate in (
            ('qkv', 'rms_matvec', qkv, hidden, True, c.qkv_bias, False),
            ('o_proj', 'matvec_add', hidden, c.num_heads * dim, False, False, True),
            ('down', 'matvec_add', hidden, c.intermediate_size, False, False, True),
            ('head', 'rms_matvec', c.vocab_size, hidden, True, False, False)):
        g = config.gemv(kind, n, k)
        split_k = g.split_k if accumulate else 1
        out.append((op, '_matvec_kernel', {
            'HAS_NORM': norm, 'HAS_BIAS': bias, 'ACCUMULATE': accumulate, 'HAS_ARGMAX': False,
            'BLOCK_N': g.block_n, 'BLOCK_K': g.block_k, 'SPLIT_K': split_k,
            'EVEN': kernels._even(n, k, g), 'STREAM': stream, 'AHEAD': g.tiles_ahead,
            'PDL': True}, {'num_warps': g.num_warps}, -(-n // g.block_n) * split_k))
    n, k = c.intermediate_size, hidden
    g = config.gemv('gate_up', n, k)
    out.append(('gate/up', '_gate_up_kernel', {
        'ROW_BLOCK': gate_up_block(n), 'BLOCK_N': g.block_n, 'BLOCK_K': g.block_k,
        'EVEN': kernels._even(n, k, g), 'STREAM': stream, 'PDL': True},
        {'num_warps': g.num_warps}, -(-n // g.block_n)))
    kv_heads, heads = c.num_kv_heads, c.num_heads
    group_p = max(16, triton.next_power_of_2(heads // kv_heads))
    a = config.attention_for(kv_heads, dim)
    options = {'num_warps': a.num_warps, 'num_stages': a.num_stages}
    if a.max_registers:
        options['maxnreg'] = a.max_registers
    out.append(('attn split', '_attn_split_kernel', {
        'D': dim, 'GROUP_P': group_p, 'BLOCK_T': a.block_t, 'SPLITS': a.splits,
        'MIN_CHUNK': a.min_chunk, 'DOT': tl.bfloat16, 'PRECISION': 'tf32', 'PDL': True},
        options, kv_heads * a.splits))
    out.append(('attn reduce', '_attn_reduce_kernel', {
        'D': dim, 'GROUP_P': group_p, 'SPLITS': a.splits, 'PDL': True}, {'num_warps': 4}, heads))
    return out


def main():
    tuning = yaml.safe_load(config_path('kernels.yaml').read_text())['NVIDIA H200']
    config = kernels.KernelConfig().with_tuning(tuning)
    stamped = kernels_module(stamped_source(), 'stamped_kernels')
    print('arch | op | programs | warps | package: registers, stack B, shared B, an SM holds, '
          "waves | stamped: the same | stamped, capped at the package's registers: the same")
    for arch in ARCHS:
        c = ModelConfig.from_hf(synthetic_config(arch))
        for op, name, consts, options, programs in launches(config, c):
            row = [arch, op, str(programs), str(options['num_warps'])]
            package = compiled(getattr(kernels, name), consts, options)
            # The package's count is within any cap options hold: timeline.Capped's maxnreg.
            capped = dict(options, maxnreg=package[0])
            for registers, stack, shared in (
                    package, compiled(getattr(stamped, name), consts, options),
                    compiled(getattr(stamped, name), consts, capped)):
                held = resident(registers, shared, options['num_warps'])
                row.append(f'{registers}, {stack}, {shared}, {held}, '
                           f'{programs / (SMS * held):.2f}')
            print(' | '.join(row), flush=True)


if __name__ == '__main__':
    main()
