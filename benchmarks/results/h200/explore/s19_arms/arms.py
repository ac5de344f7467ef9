"""
Session 19's probe arms: kernels.py files derived from this tree's as text, written to a folder.

- v22: session 18's reduce kernel (loads before the max, 8 warps; s18_reduce/reduce_order.py)
- w8: the reduce kernel at 8 warps only, its loads in kernels.py's order
- cap: session 16's register cap on the split kernel (Triton's maxnreg 168, every shape but
  2 kv heads, as s17_rope/paired_run8/cap.diff has it through kernels.yaml)
- v22cap: both
Usage: python3 arms.py DIR (PYTHONPATH the repository root, at edd520d: the tree of run 1, whose
split launch it edits); probe.sh takes NAME=DIR/NAME.py.
"""
import os
import sys

# reduce_order puts s14_attention (its static_sass) on the path itself.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 's18_reduce'))
from reduce_order import source  # noqa: E402

SPLIT_LAUNCH = ('num_stages=shape.num_stages, **pdl)',
                'num_stages=shape.num_stages,\n'
                "        **({'maxnreg': 168} if kv_heads != 2 else {}), **pdl)")


def capped(text: str) -> str:
    old, new = SPLIT_LAUNCH
    assert text.count(old) == 1, 'kernels.py has changed: the split launch'
    return text.replace(old, new)


ARMS = {'v22': source(True, True), 'w8': source(False, True),
        'cap': capped(source(False, False)), 'v22cap': capped(source(True, True))}

if __name__ == '__main__':
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, text in ARMS.items():
        with open(os.path.join(sys.argv[1], f'{name}.py'), 'w') as f:
            f.write(text)
        print(name, len(text))
