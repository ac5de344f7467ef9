"""
Session 28: the dense GEMVs with arrival counters in place of PDL's wait (v32, explore only).

A producer GEMV's program, after its stores (or its atomic adds into the residual), adds one to
the counter of the part of the output its rows fall in: a block-wide barrier, then one release
add at gpu scope (CUTLASS's semaphore pattern). A consumer GEMV does not wait for its
predecessor to end: before the tile of inputs [k0, k0 + BLOCK_K) it makes sure every part up to
there is complete. v32 (run 1, commit 531fa71) read all of a consumer's counters with acquire
adds of 0 whenever a tile passed the complete prefix; v32b reads a part's counter with a plain
volatile load when it takes the part before, so the value is there when its first tile needs
it, and spins only if the part is not complete then. The input loads come after the counter's
value in each thread's order and go to L2 (.cg): another SM wrote them.
The kernels are kernels.py's _matvec_kernel and _gate_up_kernel with those two additions; their
arithmetic and order are the same, so their results equal the package's bit for bit where K is
not split. A consumer launches (PDL) only once all of its producer's programs have started, and
waits only for that producer: no program waits for one that cannot run.
"""
from physinf_ros.engine.kernels import _inv_rms, _load, _tile
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def _start(PDL: tl.constexpr, GATED: tl.constexpr, LATE: tl.constexpr):
    # A consumer with counters waits for nothing here. v32-v32d also launched its next kernel
    # here, long before the package's kernels do (after their wait); with LATE (v32e) it does
    # so once its last part is complete (_release_late).
    if PDL:
        if not GATED:
            gdc_wait()
            gdc_launch_dependents()
        elif not LATE:
            gdc_launch_dependents()


@triton.jit
def _release_late(checked, PART_IN, k_end, PDL: tl.constexpr, GATED: tl.constexpr,
                  LATE: tl.constexpr):
    # Every part this program reads is complete: its predecessor has as good as ended, which is
    # when the package's kernels let the next kernel launch (again on later tiles: harmless).
    if PDL and GATED and LATE:
        if checked * PART_IN >= k_end:
            gdc_launch_dependents()


@triton.jit
def _nap(x):
    # v32c: a spinning thread sleeps between its reads, leaving the SM's issue slots and the
    # memory system to the producer's programs (the sleep follows the read it returns).
    return tl.inline_asm_elementwise('nanosleep.u32 256;\n mov.b32 $0, $1;', '=r,r', [x],
                                     dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _acquire(x):
    # v32d: after a part's counter is seen complete, an acquire fence at gpu scope: the input
    # loads after it (through L1, as the package's) must see what the part's producers wrote.
    return tl.inline_asm_elementwise('fence.acq_rel.gpu;\n mov.b32 $0, $1;', '=r,r', [x],
                                     dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _count(ptr, ACQUIRE: tl.constexpr):
    # A counter's value: v32b-e a volatile load; v32f a load with acquire semantics at gpu scope
    # in each thread, which orders that thread's later input loads (through L1, as the
    # package's) after the producers' writes without a fence.
    if ACQUIRE:
        return tl.inline_asm_elementwise('ld.acquire.gpu.global.b32 $0, [$1];', '=r,l', [ptr],
                                         dtype=tl.int32, is_pure=False, pack=1)
    return tl.load(ptr, volatile=True)


@triton.jit
def _spin(COUNT_IN, part, TARGET_IN, seen, NAP: tl.constexpr, L1: tl.constexpr,
          ACQUIRE: tl.constexpr, STEP: tl.constexpr):
    # Until part's counter reaches its target (seen: its value read earlier, not yet waited on).
    while seen < TARGET_IN:
        seen = _count(COUNT_IN + part * STEP, ACQUIRE)
        if NAP:
            seen = _nap(seen)
    if L1 and not ACQUIRE:
        seen = _acquire(seen)
    return part + 1 + seen * 0


LINE = tl.constexpr(32)   # ints between counters: each on a 128-byte line of its own


@triton.jit
def _arrive(COUNT_OUT, row0, PART_OUT, REPLICAS: tl.constexpr):
    # Every thread's stores, then one release add to each replica of the part's counter: the
    # part's consumers may read them. Run 7: with REPLICAS > 1 the consumers' reads of a part,
    # hundreds of programs at once, spread over that many lines (and L2 slices).
    tl.debug_barrier()
    base = COUNT_OUT + (row0 // PART_OUT) * (REPLICAS * LINE)
    if REPLICAS == 1:
        tl.atomic_add(base, 1, sem='release', scope='gpu')
    else:
        tl.atomic_add(base + tl.arange(0, REPLICAS) * LINE, 1, sem='release', scope='gpu')


@triton.jit
def _replica(COUNT_IN, REPLICAS: tl.constexpr):
    # This program's replica of its parts' counters.
    return COUNT_IN + (tl.program_id(0) % REPLICAS) * LINE


@triton.jit
def _first_count(COUNT_IN, k_start, PART_IN, GATED: tl.constexpr, ACQUIRE: tl.constexpr,
                 REPLICAS: tl.constexpr):
    # This program's replica of its counters, its first part (the parts before k_start are not
    # its to check) and that part's counter, read before the loop needs it.
    mine = _replica(COUNT_IN, REPLICAS)
    checked = k_start // PART_IN
    seen = 0
    if GATED:
        seen = _count(mine + checked * (REPLICAS * LINE), ACQUIRE)
    return mine, checked, seen


@triton.jit
def _await_parts(mine, checked, seen, k_hi, k_end, PART_IN, TARGET_IN, PDL: tl.constexpr,
                 GATED: tl.constexpr, NAP: tl.constexpr, L1: tl.constexpr, LATE: tl.constexpr,
                 ACQUIRE: tl.constexpr, REPLICAS: tl.constexpr):
    # Before the tile of inputs up to k_hi: every part it reads complete, and the counter of the
    # part after it read ahead.
    if GATED:
        last = (k_hi - 1) // PART_IN   # the tile's last part
        while checked <= last:
            checked = _spin(mine, checked, TARGET_IN, seen, NAP, L1, ACQUIRE, REPLICAS * LINE)
            seen = _count(mine + checked * (REPLICAS * LINE), ACQUIRE)   # the next part's
        _release_late(checked, PART_IN, k_end, PDL, GATED, LATE)
    return checked, seen


@triton.jit
def _x(X, cols, mask, GATED: tl.constexpr, EVEN: tl.constexpr, L1: tl.constexpr):
    if GATED and not L1:
        if EVEN:
            return tl.load(X + cols, cache_modifier='.cg')
        return tl.load(X + cols, mask=mask, other=0.0, cache_modifier='.cg')
    return _load(X + cols, mask, EVEN)


@triton.jit
def counted_matvec_kernel(W, X, Y, NORM, BIAS, N, K, eps, COUNT_IN, PART_IN, TARGET_IN,
                          COUNT_OUT, PART_OUT,
                          HAS_NORM: tl.constexpr, HAS_BIAS: tl.constexpr,
                          ACCUMULATE: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, EVEN: tl.constexpr,
                          STREAM: tl.constexpr, AHEAD: tl.constexpr, PDL: tl.constexpr,
                          GATED: tl.constexpr, SIGNAL: tl.constexpr, NAP: tl.constexpr,
                          L1: tl.constexpr, LATE: tl.constexpr, ACQUIRE: tl.constexpr,
                          REPLICAS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    k_len = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_start = tl.program_id(1) * k_len
    k_end = tl.minimum(k_start + k_len, K)
    w_rows = W + rows.to(tl.int64)[:, None] * K
    w_next = _tile(w_rows, row_mask, k_start, k_end, BLOCK_K, EVEN, STREAM)
    if AHEAD >= 2:
        w_next2 = _tile(w_rows, row_mask, k_start + BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
    _start(PDL, GATED, LATE)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    mine, checked, seen = _first_count(COUNT_IN, k_start, PART_IN, GATED, ACQUIRE, REPLICAS)
    for k0 in range(k_start, k_end, BLOCK_K):
        w = w_next
        if AHEAD == 1:
            w_next = _tile(w_rows, row_mask, k0 + BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
        else:
            w_next = w_next2
            w_next2 = _tile(w_rows, row_mask, k0 + 2 * BLOCK_K, k_end, BLOCK_K, EVEN, STREAM)
        checked, seen = _await_parts(mine, checked, seen, tl.minimum(k0 + BLOCK_K, k_end),
                                     k_end, PART_IN, TARGET_IN, PDL, GATED, NAP, L1, LATE,
                                     ACQUIRE, REPLICAS)
        cols = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
        if HAS_NORM:
            xr = _x(X, cols, cols < k_end, GATED, EVEN, L1).to(tl.float32)
            squares += xr * xr
            x = xr * _load(NORM + cols, cols < k_end, EVEN).to(tl.float32)
        else:
            x = _x(X, cols, cols < k_end, GATED, EVEN, L1).to(W.dtype.element_ty).to(tl.float32)
        acc += w.to(tl.float32) * x[None, :]
    y = tl.sum(acc, axis=1)
    if HAS_NORM:
        y *= _inv_rms(squares, K, eps)
    if ACCUMULATE:
        tl.atomic_add(Y + rows, y, mask=row_mask)
    else:
        if HAS_BIAS:
            y += tl.load(BIAS + rows, mask=row_mask, other=0.0).to(tl.float32)
        tl.store(Y + rows, y, mask=row_mask)
    if SIGNAL:
        _arrive(COUNT_OUT, tl.program_id(0) * BLOCK_N, PART_OUT, REPLICAS)


@triton.jit
def counted_gate_up_kernel(W, X, Y, NORM, N, K, eps, COUNT_IN, PART_IN, TARGET_IN,
                           COUNT_OUT, PART_OUT, ROW_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, EVEN: tl.constexpr, STREAM: tl.constexpr,
                           PDL: tl.constexpr, GATED: tl.constexpr, SIGNAL: tl.constexpr,
                           NAP: tl.constexpr, L1: tl.constexpr, LATE: tl.constexpr,
                           ACQUIRE: tl.constexpr, REPLICAS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    gate_index = (rows // ROW_BLOCK) * 2 * ROW_BLOCK + rows % ROW_BLOCK
    gate_rows = W + gate_index.to(tl.int64)[:, None] * K
    up_rows = gate_rows + ROW_BLOCK * K
    gate_next = _tile(gate_rows, row_mask, 0, K, BLOCK_K, EVEN, STREAM)
    up_next = _tile(up_rows, row_mask, 0, K, BLOCK_K, EVEN, STREAM)
    _start(PDL, GATED, LATE)
    acc_gate = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    mine, checked, seen = _first_count(COUNT_IN, 0, PART_IN, GATED, ACQUIRE, REPLICAS)
    for k0 in range(0, K, BLOCK_K):
        w_gate, w_up = gate_next, up_next
        gate_next = _tile(gate_rows, row_mask, k0 + BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        up_next = _tile(up_rows, row_mask, k0 + BLOCK_K, K, BLOCK_K, EVEN, STREAM)
        checked, seen = _await_parts(mine, checked, seen, tl.minimum(k0 + BLOCK_K, K), K,
                                     PART_IN, TARGET_IN, PDL, GATED, NAP, L1, LATE, ACQUIRE,
                                     REPLICAS)
        cols = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
        xr = _x(X, cols, cols < K, GATED, EVEN, L1).to(tl.float32)
        squares += xr * xr
        x = xr * _load(NORM + cols, cols < K, EVEN).to(tl.float32)
        acc_gate += w_gate.to(tl.float32) * x[None, :]
        acc_up += w_up.to(tl.float32) * x[None, :]
    inv_rms = _inv_rms(squares, K, eps)
    gate = tl.sum(acc_gate, axis=1) * inv_rms
    up = tl.sum(acc_up, axis=1) * inv_rms
    tl.store(Y + rows, gate * tl.sigmoid(gate) * up, mask=row_mask)
    if SIGNAL:
        _arrive(COUNT_OUT, tl.program_id(0) * BLOCK_N, PART_OUT, REPLICAS)
