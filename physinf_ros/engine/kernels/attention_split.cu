// The attention split kernel in CUDA: ops_triton.rope_attention's first kernel where the decoder's
// KernelConfig sets attention cuda for the model's shape (config/kernels.yaml) and this library
// builds (attention_cuda.py); the Triton _attn_split_kernel otherwise. Same contract: each block
// (kv head, split) rotates its group's queries with RoPE at pos, the block holding pos rotates
// this token's key and stores it and the value in the cache, and the block writes its split's
// partial softmax (max, sum, accumulator) for ops_triton._attn_reduce_kernel to merge. How
// (docs/PERF.md, v30e, in the package since v31): the keys stream through a ring of shared-memory
// slices per warp (cp.async, the first STAGES tiles issued before the PDL wait), multiplied on the
// tensor cores with mma.sync (the group's query heads as rows 0..7 of 16); each warp runs its own
// online softmax, and the warps merge at the end through their rings. The grid is (kv head,
// split), the kv head fastest as the Triton kernel's: at short contexts the blocks holding keys
// are the first launched, one an SM. A block past the keys writes its partial of no weight before
// the wait and exits, freeing its place at once: safe, since the partial buffers are this launch's
// and every kernel before the previous one has ended when this grid starts (the previous one's
// programs all passed their waits), and split 0 always holds keys and waits, so the grid ends only
// after the wait and the chain of waits holds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int WARPS = 4;
constexpr int THREADS = WARPS * 32;
constexpr int SLICE = 16;                 // keys a warp takes per tile: one mma's rows
constexpr int TILE = WARPS * SLICE;       // keys per tile (the Triton kernel's block_t)
constexpr int PAD = 8;                    // elements after each row: conflict-free ldmatrix
constexpr int MAX_GROUP = 8;              // query heads per kv head (mma rows 0..7 of 16)

template <typename T> __device__ __forceinline__ float round_to(float x);
template <> __device__ __forceinline__ float round_to<__nv_bfloat16>(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}
template <> __device__ __forceinline__ float round_to<__half>(float x) {
  return __half2float(__float2half_rn(x));
}
template <typename T> __device__ __forceinline__ T to_t(float x);
template <> __device__ __forceinline__ __nv_bfloat16 to_t<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half to_t<__half>(float x) { return __float2half_rn(x); }
// Two floats as the 16-bit pair an mma operand register holds (the lower index in the low half).
template <typename T> __device__ __forceinline__ uint32_t pack(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <> __device__ __forceinline__ uint32_t pack<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared through L2, zero-filled past src_bytes (rows past the chunk's end).
__device__ __forceinline__ void copy16(void* dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldmatrix4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
// d += a (16x16, row) * b (16x8, col), float32 accumulators.
template <typename T> __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4],
                                                          uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma<__nv_bfloat16>(float (&d)[4],
                                                               const uint32_t (&a)[4],
                                                               uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                        uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ int chunk_of(int length, int splits, int min_chunk) {
  // Keys per split, as ops_triton._chunk: spread over the splits, never under min_chunk.
  int chunk = max((length + splits - 1) / splits, min_chunk);
  return (chunk + TILE - 1) / TILE * TILE;
}


// STAGES tiles in flight per warp.
template <int D, typename T, int STAGES>
struct Shared {
  T k[STAGES][WARPS][SLICE][D + PAD];   // each warp's ring of key and value slices
  T v[STAGES][WARPS][SLICE][D + PAD];
  T q[16][D + PAD];                     // the group's rotated queries, rows past it zero
  T k_new[D], v_new[D];
  float cos_pos[D / 2], sin_pos[D / 2];   // RoPE's tables at pos
  float warp_m[WARPS][MAX_GROUP], warp_l[WARPS][MAX_GROUP];
  // With head norms: each warp's sums of squares of its share of each query head, then of the
  // key (the last column).
  float head_squares[WARPS][MAX_GROUP * D / THREADS + 1];
  // A warp's accumulators after its loop, in its ring's first slot of keys (no other warp's).
  __device__ float (*warp_acc(int warp))[D] {
    return reinterpret_cast<float (*)[D]>(&k[0][warp][0][0]);
  }
  static_assert(MAX_GROUP * D * sizeof(float) <= SLICE * (D + PAD) * sizeof(T),
                "a warp's accumulators fit in its slot");
};

// RoPE (rotate-half pairs d, d + D/2) of element d, x, with its partner, both rounded to the
// cache dtype first, as ops_triton._rotated.
template <int D, typename T>
__device__ __forceinline__ float rope(float x, float partner, int d, const float* cos_half,
                                      const float* sin_half) {
  const float sign = d < D / 2 ? -1.f : 1.f;
  return round_to<T>(x) * cos_half[d % (D / 2)]
         + sign * round_to<T>(partner) * sin_half[d % (D / 2)];
}

template <int D, typename T, int STAGES>
__global__ void __launch_bounds__(THREADS, 2)
split_kernel(const float* __restrict__ qkv, T* __restrict__ k_cache, T* __restrict__ v_cache,
             const int* __restrict__ pos_ptr, const float* __restrict__ cos,
             const float* __restrict__ sin, const T* __restrict__ q_norm,
             const T* __restrict__ k_norm, float* __restrict__ maxs, float* __restrict__ sums,
             float* __restrict__ accs, int max_context, float scale, float norm_eps, int group,
             int group_p, int num_heads, int kv_heads, int splits, int min_chunk, int pdl) {
  extern __shared__ __align__(128) unsigned char raw[];
  Shared<D, T, STAGES>& s = *reinterpret_cast<Shared<D, T, STAGES>*>(raw);
  const int kv_head = blockIdx.x, split = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // pos was advanced by the previous step and the cache below it written by earlier ones: the
  // first tiles are read before the wait. Row pos is stale until this step writes it: the warp
  // whose slice holds it puts k_new and v_new there in shared memory.
  const int length = *pos_ptr + 1, pos = length - 1;
  const int chunk = chunk_of(length, splits, min_chunk);
  const int start = split * chunk, end = min(start + chunk, length);
  const int tiles = start < length ? (end - start + TILE - 1) / TILE : 0;
  const size_t head_base = (size_t)kv_head * max_context * D;
  const size_t row0 = ((size_t)kv_head * splits + split) * group_p;
  if (tiles == 0) {   // past the keys: a partial of no weight, before the wait (see above)
    for (int o = threadIdx.x; o < group * D; o += THREADS) {
      accs[(row0 + o / D) * D + o % D] = 0.f;
      if (o % D == 0) {
        maxs[row0 + o / D] = -INFINITY;
        sums[row0 + o / D] = 0.f;
      }
    }
    return;
  }
  constexpr int ROW_COPIES = D * sizeof(T) / 16;   // 16-byte copies per row
  auto load_slice = [&](int tile) {   // this warp's 16 keys and values of tile into its ring
    if (tile < tiles) {
      const int slot = tile % STAGES, first = start + tile * TILE + warp * SLICE;
#pragma unroll
      for (int i = lane; i < SLICE * ROW_COPIES; i += 32) {
        const int row = i / ROW_COPIES, col = i % ROW_COPIES * (16 / sizeof(T));
        const int key = min(first + row, end - 1);   // past the end: zeros from a real row
        const uint32_t bytes = first + row < end ? 16 : 0;
        copy16(&s.k[slot][warp][row][col], k_cache + head_base + (size_t)key * D + col, bytes);
        copy16(&s.v[slot][warp][row][col], v_cache + head_base + (size_t)key * D + col, bytes);
      }
    }
    commit();   // one group per tile, empty past the last: the wait below counts tiles
  };
#pragma unroll
  for (int tile = 0; tile < STAGES; ++tile) load_slice(tile);
  // Nothing else before the wait depends on the previous kernel either: RoPE's tables at pos
  // (into registers: stored after the wait, so that no thread waits for them before it), and
  // the query rows past the group (zeros, the mma's padding).
  static_assert(D / 2 <= THREADS, "a thread per table entry");
  const bool table_thread = threadIdx.x < D / 2;
  const float cos_x = table_thread ? cos[(size_t)pos * (D / 2) + threadIdx.x] : 0.f;
  const float sin_x = table_thread ? sin[(size_t)pos * (D / 2) + threadIdx.x] : 0.f;
  for (int i = threadIdx.x + group * D; i < 16 * D; i += THREADS)
    s.q[i / D][i % D] = to_t<T>(0.f);
  // With head norms (q_norm set: Qwen3), the weights of this thread's element d = threadIdx.x
  // % D and of its rotate-half partner: every element a thread holds has that d.
  const bool head_norms = q_norm != nullptr;
  const int d_own = threadIdx.x % D, d_partner = (d_own + D / 2) % D;
  float qw = 0.f, qw_partner = 0.f, kw = 0.f, kw_partner = 0.f;
  if (head_norms) {
    qw = (float)q_norm[d_own];
    qw_partner = (float)q_norm[d_partner];
    kw = (float)k_norm[d_own];
    kw_partner = (float)k_norm[d_partner];
  }
  if (pdl) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  // Every read of qkv at once, into registers: the group's query elements and their partners,
  // and in the split holding pos the new key's and value's (one round trip to L2, not one per
  // element in turn).
  static_assert(D <= THREADS, "a thread per element of the new key");
  constexpr int PER = MAX_GROUP * D / THREADS;
  const float* q_rows = qkv + (size_t)kv_head * group * D;
  float x[PER], partner[PER];
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int i = threadIdx.x + j * THREADS, d = i % D;
    const bool mine = i < group * D;
    x[j] = mine ? q_rows[i] : 0.f;
    partner[j] = mine ? q_rows[i - d + (d + D / 2) % D] : 0.f;
  }
  if (table_thread) {
    s.cos_pos[threadIdx.x] = cos_x;
    s.sin_pos[threadIdx.x] = sin_x;
  }
  const bool holds_pos = end == length;
  const int dk = threadIdx.x;
  float k_x = 0.f, k_partner = 0.f, v_x = 0.f;
  if (holds_pos && dk < D) {
    const float* k_row = qkv + (size_t)(num_heads + kv_head) * D;
    k_x = k_row[dk];
    k_partner = k_row[(dk + D / 2) % D];
    v_x = qkv[(size_t)(num_heads + kv_heads + kv_head) * D + dk];
  }
  if (head_norms) {   // the heads rounded to T, as ops_triton._head_norm_kernel rounds them
    float squares[PER + 1];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      x[j] = round_to<T>(x[j]);
      partner[j] = round_to<T>(partner[j]);
      squares[j] = x[j] * x[j];
    }
    k_x = round_to<T>(k_x);
    k_partner = round_to<T>(k_partner);
    squares[PER] = k_x * k_x;
#pragma unroll
    for (int j = 0; j <= PER; ++j) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        squares[j] += __shfl_xor_sync(0xffffffff, squares[j], offset);
      if (lane == 0) s.head_squares[warp][j] = squares[j];
    }
  }
  __syncthreads();   // the tables (and the heads' squares) in shared memory
  if (head_norms) {
    // A head's D elements lie in D / 32 consecutive warps: this thread's from warp first on,
    // the key's from warp 0 on (threads 0..D-1).
    constexpr int HEAD_WARPS = D / 32;
    const int first = threadIdx.x / D * HEAD_WARPS;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      float total = 0.f;
#pragma unroll
      for (int w = 0; w < HEAD_WARPS; ++w) total += s.head_squares[first + w][j];
      const float rstd = 1.f / sqrtf(total / D + norm_eps);
      x[j] = round_to<T>(round_to<T>(x[j] * rstd) * qw);
      partner[j] = round_to<T>(round_to<T>(partner[j] * rstd) * qw_partner);
    }
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < HEAD_WARPS; ++w) total += s.head_squares[w][PER];
    const float rstd = 1.f / sqrtf(total / D + norm_eps);
    k_x = round_to<T>(round_to<T>(k_x * rstd) * kw);
    k_partner = round_to<T>(round_to<T>(k_partner * rstd) * kw_partner);
  }
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i < group * D)
      s.q[i / D][i % D] = to_t<T>(rope<D, T>(x[j], partner[j], i % D, s.cos_pos, s.sin_pos));
  }
  if (holds_pos && dk < D) {
    const T k = to_t<T>(rope<D, T>(k_x, k_partner, dk, s.cos_pos, s.sin_pos));
    const T v = to_t<T>(v_x);
    s.k_new[dk] = k;
    s.v_new[dk] = v;
    k_cache[head_base + (size_t)pos * D + dk] = k;
    v_cache[head_base + (size_t)pos * D + dk] = v;
  }
  __syncthreads();

  // The queries as mma A fragments, one per 16 dims.
  uint32_t q_frag[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) ldmatrix4(q_frag[kk], &s.q[lane % 16][kk * 16 + lane / 16 * 8]);
  // A lane's accumulators hold rows lane / 4 (and + 8, padding) of n-tiles of 8: keys of the
  // slice for the scores, dims for the output. Each warp runs its own online softmax over its
  // slices; the warps and then the splits are merged at the end.
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m_row = -INFINITY, l_lane = 0.f;   // row lane / 4: running max, this lane's share of l

  for (int tile = 0; tile < tiles; ++tile) {
    const int slot = tile % STAGES, first = start + tile * TILE + warp * SLICE;
    wait_copies<STAGES - 1>();
    __syncwarp();
    if (pos >= first && pos < first + SLICE) {
      for (int d = lane; d < D; d += 32) {
        s.k[slot][warp][pos - first][d] = s.k_new[d];
        s.v[slot][warp][pos - first][d] = s.v_new[d];
      }
      __syncwarp();
    }
    // Scores of the slice's 16 keys (two n-tiles of 8) for the 16 query rows.
    float score[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[4];   // keys 0-7 dims kk*16 + 0-7, + 8-15; keys 8-15 likewise
      const int mat = lane / 8;
      ldmatrix4(b, &s.k[slot][warp][(mat / 2) * 8 + lane % 8][kk * 16 + (mat % 2) * 8]);
      mma<T>(score[0], q_frag[kk], b[0], b[1]);
      mma<T>(score[1], q_frag[kk], b[2], b[3]);
    }
    // Online softmax for row lane / 4 over its 4 values in this lane and 12 in its quad.
    float tile_max = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int key = first + n * 8 + (lane % 4) * 2 + j;
        score[n][j] = key < end ? score[n][j] * scale : -INFINITY;
        tile_max = fmaxf(tile_max, score[n][j]);
      }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffff, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffff, tile_max, 2));
    const float m_new = fmaxf(m_row, tile_max);
    const bool none = m_new == -INFINITY;   // a slice past the chunk's end, so far
    const float alpha = none ? 1.f : __expf(m_row - m_new);
    float p[2][2];
    float p_sum = 0.f;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        p[n][j] = none ? 0.f : __expf(score[n][j] - m_new);
        p_sum += p[n][j];
      }
    m_row = m_new;
    l_lane = l_lane * alpha + p_sum;
    // Probabilities rounded to the cache dtype as the A operand (rows 8-15 are padding: 0).
    const uint32_t p_frag[4] = {pack<T>(p[0][0], p[0][1]), 0u, pack<T>(p[1][0], p[1][1]), 0u};
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      acc[n][0] *= alpha;
      acc[n][1] *= alpha;
    }
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      uint32_t b[4];   // keys 0-7 and 8-15 of dims n*8 + 0-7, then of dims (n+1)*8 + 0-7
      const int mat = lane / 8;
      ldmatrix4_trans(b, &s.v[slot][warp][(mat % 2) * 8 + lane % 8][(n + mat / 2) * 8]);
      mma<T>(acc[n], p_frag, b[0], b[1]);
      mma<T>(acc[n + 1], p_frag, b[2], b[3]);
    }
    __syncwarp();   // the slot is free: the next tile for it goes in flight
    load_slice(tile + STAGES);
  }
  wait_copies<0>();
  __syncwarp();   // every lane done with the ring before its first slot takes the accumulators
  // The warps' partials: row g = lane / 4 (g < group) of each dims n-tile.
  const float l_row = l_lane + __shfl_xor_sync(0xffffffff, l_lane, 1);
  const float l_quad = l_row + __shfl_xor_sync(0xffffffff, l_row, 2);
  const int g_row = lane / 4;
  if (g_row < group) {
    if (lane % 4 == 0) {
      s.warp_m[warp][g_row] = m_row;
      s.warp_l[warp][g_row] = l_quad;
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      s.warp_acc(warp)[g_row][n * 8 + (lane % 4) * 2] = acc[n][0];
      s.warp_acc(warp)[g_row][n * 8 + (lane % 4) * 2 + 1] = acc[n][1];
    }
  }
  __syncthreads();
  // The split's partial, in the Triton split kernel's layout (rows of group_p per split).
  for (int o = threadIdx.x; o < group * D; o += THREADS) {
    const int g = o / D, d = o % D;
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) m_max = fmaxf(m_max, s.warp_m[w][g]);
    float total = 0.f, value = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float weight = s.warp_m[w][g] == -INFINITY ? 0.f : __expf(s.warp_m[w][g] - m_max);
      total = fmaf(s.warp_l[w][g], weight, total);
      value = fmaf(s.warp_acc(w)[g][d], weight, value);
    }
    accs[(row0 + g) * D + d] = value;
    if (d == 0) {
      maxs[row0 + g] = m_max;
      sums[row0 + g] = total;
    }
  }
}

// A launch's arguments, as physinf_attn_split takes them.
struct SplitArgs {
  const float* qkv;
  void* k_cache;
  void* v_cache;
  const int* pos;
  const float* cos;
  const float* sin;
  const void* q_norm;   // null: no head norms
  const void* k_norm;
  float* maxs;
  float* sums;
  float* accs;
  int max_context;
  float scale;
  float norm_eps;
  int group, group_p, num_heads, kv_heads, splits, min_chunk, pdl;
  cudaStream_t stream;
};

template <int D, typename T, int STAGES>
static int launch(const SplitArgs& a) {
  auto kernel = split_kernel<D, T, STAGES>;
  const int bytes = (int)sizeof(Shared<D, T, STAGES>);
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         bytes);
  if (err != cudaSuccess) return (int)err;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(a.kv_heads, a.splits);
  config.blockDim = dim3(THREADS);
  config.dynamicSmemBytes = bytes;
  config.stream = a.stream;
  cudaLaunchAttribute attrs[1];
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = a.pdl;
  config.attrs = attrs;
  config.numAttrs = 1;
  return (int)cudaLaunchKernelEx(&config, kernel, a.qkv, (T*)a.k_cache, (T*)a.v_cache, a.pos,
                                 a.cos, a.sin, (const T*)a.q_norm, (const T*)a.k_norm, a.maxs,
                                 a.sums, a.accs, a.max_context, a.scale, a.norm_eps, a.group,
                                 a.group_p, a.num_heads, a.kv_heads, a.splits, a.min_chunk,
                                 a.pdl);
}

// STAGES key tiles in flight per warp (AttentionConfig.num_stages, 2 or 3). With 2, a warp of a
// long split (9 tiles at 16385 keys) waits a round trip a tile; with 3 the 4-bit 8B's step at
// 16384 is 4% shorter and the 8-kv-head shapes' at 2048 1-1.7% (docs/PERF.md, v36). Shared
// memory at head size 128: 75 KB a block with 2 (three blocks an SM), 110 KB with 3 (two).
template <int D, typename T>
static int launch_stages(int stages, const SplitArgs& a) {
  if (stages == 2) return launch<D, T, 2>(a);
  if (stages == 3) return launch<D, T, 3>(a);
  return (int)cudaErrorInvalidValue;
}

template <int D>
static int launch_dtype(int bf16, int stages, const SplitArgs& a) {
  if (bf16) return launch_stages<D, __nv_bfloat16>(stages, a);
  return launch_stages<D, __half>(stages, a);
}

// The split kernel of ops_triton.rope_attention for a 16-bit cache (bf16 = 0: float16), head
// size 64 or 128, up to MAX_GROUP query heads a kv head, 2 or 3 key tiles in flight a warp
// (stages); the partials go where ops_triton._attn_reduce_kernel reads them. q_norm and k_norm
// (the cache's dtype, [head_dim]; null for none) RMS-norm the q and k heads first, with
// norm_eps. Returns a cudaError_t (0: launched).
extern "C" int physinf_attn_split(int head_dim, int bf16, const float* qkv, void* k_cache,
                                  void* v_cache, const int* pos, const float* cos,
                                  const float* sin, const void* q_norm, const void* k_norm,
                                  float* maxs, float* sums, float* accs, int max_context,
                                  float scale, float norm_eps, int group, int group_p,
                                  int num_heads, int kv_heads, int splits, int min_chunk,
                                  int stages, int pdl, void* stream) {
  if (group < 1 || group > MAX_GROUP || group > group_p
      || (q_norm == nullptr) != (k_norm == nullptr))
    return (int)cudaErrorInvalidValue;
  const SplitArgs a = {qkv, k_cache, v_cache, pos, cos, sin, q_norm, k_norm, maxs, sums, accs,
                       max_context, scale, norm_eps, group, group_p, num_heads, kv_heads,
                       splits, min_chunk, pdl, (cudaStream_t)stream};
  if (head_dim == 128) return launch_dtype<128>(bf16, stages, a);
  if (head_dim == 64) return launch_dtype<64>(bf16, stages, a);
  return (int)cudaErrorInvalidValue;
}

// Shared memory a block of the split kernel takes (bytes; 0 for a shape it does not build), and
// the most a block can have on a device (its opt-in limit): the caller keeps to the Triton split
// where a block does not fit (110 KB at head size 128 with 3 stages; an L4 gives 99 KB).
template <int D>
static int shared_bytes(int stages) {
  if (stages == 2) return (int)sizeof(Shared<D, __nv_bfloat16, 2>);   // __half's are the same
  if (stages == 3) return (int)sizeof(Shared<D, __nv_bfloat16, 3>);
  return 0;
}

extern "C" int physinf_attn_shared_bytes(int head_dim, int stages) {
  if (head_dim == 128) return shared_bytes<128>(stages);
  if (head_dim == 64) return shared_bytes<64>(stages);
  return 0;
}

extern "C" int physinf_attn_shared_limit(int device) {
  int bytes = 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
      cudaSuccess)
    return 0;
  return bytes;
}

extern "C" const char* physinf_attn_error(int code) {
  return cudaGetErrorString((cudaError_t)code);
}
