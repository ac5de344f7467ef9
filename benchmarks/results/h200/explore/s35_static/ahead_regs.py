"""
Session 35: each GEMV of the robot shapes with 1-3 weight tiles before its wait (no GPU).

Session 22 measured `tiles_ahead` on the robot shapes' residual GEMVs and the 1B's QKV, which a
tile more pushes into a second wave; it did not try the 3B's and Qwen2.5-1.5B's QKV. Here every
`_matvec_kernel` launch of the three shapes (kernels.yaml's H200 launch shapes) is compiled for
sm_90 at AHEAD 1, 2 and 3: registers, stack frame, the programs an SM holds, and the waves.
Usage: ahead_regs.py (PYTHONPATH the repository root, no TRITON_INTERPRET)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from physinf_ros.engine import kernels  # noqa: E402
from physinf_ros.engine.llama import ModelConfig  # noqa: E402
from physinf_ros.engine.models import synthetic_config  # noqa: E402
from physinf_ros.resources import config_path  # noqa: E402
from stamp_regs import ARCHS, compiled, launches, resident, SMS  # noqa: E402
import yaml  # noqa: E402


def main():
    tuning = yaml.safe_load(config_path('kernels.yaml').read_text())['NVIDIA H200']
    config = kernels.KernelConfig().with_tuning(tuning)
    print('arch | op (block_n, block_k, split_k, warps) | programs | tiles ahead: registers, '
          'stack B, an SM holds, waves (1 | 2 | 3)')
    for arch in ARCHS:
        c = ModelConfig.from_hf(synthetic_config(arch))
        for op, name, consts, options, programs in launches(config, c):
            if name != '_matvec_kernel':
                continue
            row = [arch, f"{op} ({consts['BLOCK_N']}, {consts['BLOCK_K']}, {consts['SPLIT_K']}, "
                   f"{options['num_warps']})", str(programs)]
            for ahead in (1, 2, 3):
                registers, stack, shared = compiled(kernels._matvec_kernel,
                                                    dict(consts, AHEAD=ahead), options)
                held = resident(registers, shared, options['num_warps'])
                row.append(f'{registers}, {stack}, {held}, {programs / (SMS * held):.2f}')
            print(' | '.join(row), flush=True)


if __name__ == '__main__':
    main()
