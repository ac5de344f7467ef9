"""
Session 25: the package's kernels.py with one part of the split kernel's tile taken out.

Three variants of `_attend` (no_tiles.py's regular expression finds it), each written to
DIR/NAME.py, for timeline.py's KERNELS_SOURCE. Their outputs are wrong; each keeps the tile's
loads alive and removes one part of its chain:
  no_qk       q·kᵀ: the scores are a product of row sums (the keys still summed, no dot)
  no_softmax  the running max and the exponentials: p is the masked scores themselves
  no_pv       p·v: the accumulator takes the values' column sums (no dot)
Usage: python3 tile_parts.py DIR (PYTHONPATH the repository root)
"""
import os
import sys

from no_tiles import ATTEND
from physinf_ros.engine import kernels

DOT_QK = ('    s = tl.dot(q, tl.trans(k.to(DOT)), input_precision=PRECISION, '
          'out_dtype=tl.float32) * scale\n')
SUM_QK = ('    s = (tl.sum(q.to(tl.float32), axis=1)[:, None]\n'
          '         * tl.sum(k.to(tl.float32), axis=1)[None, :] * scale)\n')
SOFTMAX = """    s = tl.where(t_mask[None, :], s, float('-inf'))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
"""
NO_SOFTMAX = """    p = tl.where(t_mask[None, :], s, 0.0)
    m_new = m_i
    alpha = 1.0
    l_i = l_i + tl.sum(p, axis=1)
"""
DOT_PV = ('    acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v.to(DOT), '
          'input_precision=PRECISION,\n'
          '                                        out_dtype=tl.float32)\n')
SUM_PV = """    acc = acc * alpha[:, None] + tl.sum(v.to(tl.float32), axis=0)[None, :]
"""
NO_SOFTMAX_PV = DOT_PV.replace('alpha[:, None]', 'alpha')
VARIANTS = {'no_qk': ((DOT_QK, SUM_QK),),
            'no_softmax': ((SOFTMAX, NO_SOFTMAX), (DOT_PV, NO_SOFTMAX_PV)),
            'no_pv': ((DOT_PV, SUM_PV),)}

if __name__ == '__main__':
    source = open(kernels.__file__).read()
    body = ATTEND.search(source).group(2)
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, edits in VARIANTS.items():
        text = body
        for old, new in edits:
            assert text.count(old) == 1, f'kernels.py has changed: {name}'
            text = text.replace(old, new)
        with open(os.path.join(sys.argv[1], f'{name}.py'), 'w') as f:
            f.write(source.replace(body, text))
        print(name)
