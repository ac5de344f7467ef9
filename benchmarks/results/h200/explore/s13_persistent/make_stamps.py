"""
persistent_layers.cu with timer stamps added, for stamps.py (built from a temporary folder).

Run alone, it prints the stamped source, to read.
"""
from pathlib import Path

MAX_BLOCKS = 160                          # g_stamps' rows: at least the GPU's SMs
STAMPS_PER_BLOCK = 32 * 5 * 8 + 8         # 8 a phase, 5 phases a layer, up to 32 layers
HEADER = """#include <stdint.h>
// STAMPS: thread 0 of each block records the global timer: 8 stamps a phase, 0 before its grid
// wait, 1 after it, 2.. at marks inside it.
constexpr int MAX_STAMPS = STAMPS_PER_BLOCK;
__device__ unsigned long long g_stamps[MAX_BLOCKS][MAX_STAMPS];
__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
#define STAMP(i) do { if (threadIdx.x == 0) g_stamps[blockIdx.x][(i)] = now(); } while (0)
#define MARK(phase, k) STAMP(8 * (phase) + (k))
extern "C" int physinf_stamps(unsigned long long* host) {
  return (int)cudaMemcpyFromSymbol(host, g_stamps, sizeof(g_stamps));
}
""".replace('STAMPS_PER_BLOCK', str(STAMPS_PER_BLOCK)).replace('MAX_BLOCKS', str(MAX_BLOCKS))
# (a line of the kernel, the stamp put after it; a leading '^' puts it before)
STAMPS = [
    ('  if (threadIdx.x == 0)\n    while (ld_acquire(counter) < done) { }\n',
     '^  STAMP(8 * (done / gridDim.x));'),
    ('  if (threadIdx.x == 0)\n    while (ld_acquire(counter) < done) { }\n',
     '  STAMP(8 * (done / gridDim.x) + 1);'),
    ('  Ring rg{ring, full, empty};\n', '^  STAMP(1);'),
    ('    ++phase;\n', '    if (l == a.num_layers - 1) STAMP(8 * phase);'),
    ('    load_input(xs, a.h, first, w.attn_norm, a.hidden, a.eps, red);\n',
     '    MARK(5 * l, 2);'),
    ('    gemv_span(rg, xs, acc, r_qkv.count, a.hidden, warp, lane);\n', '    MARK(5 * l, 3);'),
    ('    load_input(xs, a.attn, nullptr, nullptr, q_rows, 0.f, red);\n',
     '    MARK(5 * l + 2, 2);'),
    ('    gemv_span(rg, xs, acc, r_h.count, q_rows, warp, lane);\n', '    MARK(5 * l + 2, 3);'),
    ('    load_input(xs, a.h, nullptr, w.mlp_norm, a.hidden, a.eps, red);\n',
     '    MARK(5 * l + 3, 2);'),
    ('    gemv_span(rg, xs, acc + MAX_ROWS, r_i.count, a.hidden, warp, lane);\n',
     '    MARK(5 * l + 3, 3);'),
    ('    load_input(xs, a.mlp, nullptr, nullptr, a.inter, 0.f, red);\n',
     '    MARK(5 * l + 4, 2);'),
    ('    gemv_span(rg, xs, acc, r_h.count, a.inter, warp, lane);\n', '    MARK(5 * l + 4, 3);'),
    ('  Softmax st;\n', '^  MARK(5 * layer + 1, 2);'),
    ('    ring.release(lane);\n  }\n  if (warp == 0) {\n', '^  MARK(5 * layer + 1, 3);'),
    ("  // Merge the warp's token groups", '^  MARK(5 * layer + 1, 4);'),
    ("  // The head's splits: the last block to arrive merges them.",
     '^  MARK(5 * layer + 1, 5);'),
    ('  if (!*flag) return;\n', '^  MARK(5 * layer + 1, 6);'),
    ('    a.attn[(q_base + g) * D + d] = out / l;\n  }\n', '  MARK(5 * layer + 1, 7);'),
]

HERE = Path(__file__).parent


def stamped_source() -> str:
    """Return persistent_layers.cu with the stamps of STAMPS added."""
    src = (HERE / 'persistent_layers.cu').read_text().replace('#include <stdint.h>\n', HEADER, 1)
    for anchor, stamp in STAMPS:
        assert src.count(anchor) == 1, anchor
        if not stamp.startswith('^'):
            src = src.replace(anchor, anchor + stamp + '\n')
        elif anchor.startswith('    ring.release'):   # before the block that follows the loop
            loop = anchor[:-len('  if (warp == 0) {\n')]
            src = src.replace(anchor, loop + stamp[1:] + '\n  if (warp == 0) {\n')
        else:
            src = src.replace(anchor, stamp[1:] + '\n' + anchor)
    return src


if __name__ == '__main__':
    print(stamped_source(), end='')
