"""
kernels.py with attention's tile arithmetic in FMAs over the group's real query rows.

The package's split kernel attends each tile with two 16-row `tl.dot`s, though a kv head has
only 3-4 query heads on the Llama shapes (session 14, run 11: 1.8 us a tile with its keys in
registers). This derives, as text, a module in which `_attend` takes the scores and the
weighted values as broadcast products and sums, and the query tile has only the group's rows
(rounded up to a power of 2). Nothing is committed twice: the package's kernels.py is read and
patched when module() is called. `TRITON_INTERPRET=1 python3 fma_kernels.py` checks it
against ops_torch; static_sass.py compiles it.
"""
import importlib.util
import os
import tempfile

from physinf_ros.engine import kernels

# _attend's body in kernels.py, and what replaces it.
DOT_ATTEND = '\n'.join([
    '    s = tl.dot(q, tl.trans(k.to(DOT)), input_precision=PRECISION, out_dtype=tl.float32)'
    ' * scale',
    "    s = tl.where(t_mask[None, :], s, float('-inf'))",
    '    m_new = tl.maximum(m_i, tl.max(s, axis=1))',
    '    alpha = tl.exp(m_i - m_new)',
    '    p = tl.exp(s - m_new[:, None])',
    '    l_i = l_i * alpha + tl.sum(p, axis=1)',
    '    acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v.to(DOT), input_precision=PRECISION,',
    '                                        out_dtype=tl.float32)', ''])
FMA_ATTEND = '\n'.join([
    '    qf = q.to(tl.float32)',
    '    s = tl.sum(qf[:, None, :] * k.to(tl.float32)[None, :, :], axis=2) * scale',
    "    s = tl.where(t_mask[None, :], s, float('-inf'))",
    '    m_new = tl.maximum(m_i, tl.max(s, axis=1))',
    '    alpha = tl.exp(m_i - m_new)',
    '    p = tl.exp(s - m_new[:, None])',
    '    l_i = l_i * alpha + tl.sum(p, axis=1)',
    '    acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :],'
    ' axis=1)', ''])
GROUP_ROWS = '    group_p = max(16, triton.next_power_of_2(group))   # tl.dot needs 16 rows\n'


def source():
    """Return the text of kernels.py with the FMA attend."""
    text = open(kernels.__file__).read()
    for old, new in ((DOT_ATTEND, FMA_ATTEND),
                     (GROUP_ROWS, '    group_p = triton.next_power_of_2(group)\n')):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def module():
    """Import the patched text as a module of the package (Triton reads its source file)."""
    path = os.path.join(tempfile.mkdtemp(), 'fma_kernels.py')
    with open(path, 'w') as f:
        f.write(source())
    spec = importlib.util.spec_from_file_location('physinf_ros.engine.fma_kernels', path)
    patched = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(patched)
    return patched


def check():
    """Compare the FMA attention with ops_torch in float32 (run with TRITON_INTERPRET=1)."""
    import torch
    from physinf_ros.engine import ops_torch
    from physinf_ros.engine.llama import KVCache, ModelConfig, rope_tables
    patched, cpu = module(), torch.device('cpu')
    torch.manual_seed(0)
    for heads, kv_heads in ((4, 2), (9, 3), (8, 2)):
        dim, max_context = 32, 300
        c = ModelConfig('llama', 10, heads * dim, 8, 1, heads, kv_heads, dim, 1e-5, 10000.0)
        cos, sin = rope_tables(c, max_context, cpu)
        cache = KVCache.allocate(c, max_context, cpu, torch.float32)
        cache.k.normal_()
        cache.v.normal_()
        for length in (1, 17, 250):
            pos = torch.tensor([length - 1], dtype=torch.int32)
            qkv = torch.randn((heads + 2 * kv_heads) * dim)
            ref = ops_torch.rope_attention(qkv, pos, cos, sin, cache.k[0].clone(),
                                           cache.v[0].clone(), heads)
            out = patched.rope_attention(qkv, pos, cos, sin, cache.k[0], cache.v[0], heads)
            error = ((out - ref).norm() / ref.norm()).item()
            print(f'heads {heads}, kv heads {kv_heads}, keys {length}: relative error {error:.2e}')


if __name__ == '__main__':
    check()
