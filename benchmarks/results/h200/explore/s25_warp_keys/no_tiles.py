"""
Session 25: the package's kernels.py with the split kernel's tiles taken out, as a bound.

`_attend` returns its running max, sum and accumulator unchanged, so the split kernel still
waits, reads its queries, rotates them and stores the new key and value, but attends no tile
(and the compiler drops the tiles' loads). The outputs are wrong (every partial has no weight);
timeline.py stamps it through KERNELS_SOURCE to bound what a cheaper tile could save in the step.
Usage: python3 no_tiles.py PATH (writes the kernels file to PATH; PYTHONPATH the repository root)
"""
import re
import sys

from physinf_ros.engine import kernels

ATTEND = re.compile(r'(def _attend\(.*?\):\n    # .*?\n)(.*?)(?=\n\n\n)', re.S)

if __name__ == '__main__':
    source = open(kernels.__file__).read()
    assert len(ATTEND.findall(source)) == 1, 'kernels.py has changed: _attend'
    with open(sys.argv[1], 'w') as f:
        f.write(ATTEND.sub(lambda m: m.group(1) + '    return m_i, l_i, acc', source))
