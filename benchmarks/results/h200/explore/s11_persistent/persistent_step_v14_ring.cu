// Every layer of a 16-bit Llama-family decode step in one persistent kernel (persistent.py).
//
// One block per SM walks its share of the step's work, phase by phase: QKV (RMSNorm + GEMV +
// bias), attention (RoPE, this token's key and value into the cache, split over the cached
// keys, the splits of a head merged by the last block to finish one), o_proj (+= residual),
// gate/up (RMSNorm + GEMV + SiLU(gate) * up) and down (+= residual), for every layer. A grid
// barrier separates the phases, since each reads all of the one before.
//
// What the phases stream (weight tiles, and the cached keys and values, none of which depend
// on this step's activations) goes through one ring of 16 KB shared-memory stages per block,
// filled by cp.async STAGES - 1 tiles ahead of the tile being summed, across phase boundaries:
// while a block waits at a barrier for the others, its next tiles are already on their way,
// so the memory system does not idle between ops the way it does between kernels.
//
// Rounding follows kernels.py (and so transformers): GEMV inputs normed in float32, rounded to
// the weight dtype, scaled by the norm weight, rounded again; float32 sums; q and k rounded
// before RoPE, q after it; probabilities rounded to the cache dtype before they weigh values.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace persistent_step {

#ifndef PHYSINF_THREADS
#define PHYSINF_THREADS 256
#endif
#ifndef PHYSINF_TILE_BYTES
#define PHYSINF_TILE_BYTES 16384
#endif
#ifndef PHYSINF_STAGES
#define PHYSINF_STAGES 10
#endif
constexpr int THREADS = PHYSINF_THREADS;
constexpr int WARPS = THREADS / 32;
constexpr int TILE_BYTES = PHYSINF_TILE_BYTES;
constexpr int VECTORS = TILE_BYTES / 16 / THREADS;   // 16-byte copies per thread per tile
constexpr int ROWS = WARPS;                          // GEMV tile: one row per warp
constexpr int COLS = TILE_BYTES / 2 / ROWS;          // GEMV tile: 1024 columns
constexpr int STAGES = PHYSINF_STAGES;
constexpr int MAX_GROUP = 8;                         // query heads per kv head
constexpr int MAX_PAIRS = 1024 / THREADS;            // (head, dim) outputs per thread
constexpr int MAX_NORMED = 8192 / THREADS;           // normed inputs per thread: H <= 8192
constexpr int MAX_KEYS = TILE_BYTES / 4 / 64;        // keys per attention tile (head_dim 64)

enum Phase { QKV = 0, ATTN = 1, OPROJ = 2, GATE_UP = 3, DOWN = 4, PHASES = 5 };

struct Layer {
  const void* wqkv;
  const void* bqkv;        // nullptr: no bias
  const void* wo;
  const void* w_gate_up;
  const void* w_down;
  const void* attn_norm;
  const void* mlp_norm;
  void* k_cache;           // [kv_heads, max_context, D]
  void* v_cache;
};

struct Params {
  const Layer* layers;
  const int64_t* token;
  const int* pos;
  const void* embed;
  const float* cos;        // [max_context, D / 2]
  const float* sin;
  float* x;                // residual [H]
  float* qkv;              // [(Hq + 2 Hkv) D]
  float* attn;             // [Hq D]
  float* h;                // [I]
  float* part_ml;          // [Hkv, blocks, G, 2]
  float* part_acc;         // [Hkv, blocks, G, D]
  unsigned* head_count;    // [Hkv]
  unsigned* barrier;       // [64]: arrivals at 0, generation at 32
  int layers_n, hidden, inter, heads, kv_heads, head_dim, max_context;
  float eps, scale;
};

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half(v); }
template <typename T> __device__ __forceinline__ float round_to(float v) {
  return to_f<T>(from_f<T>(v));
}

// 8 packed 16-bit values as floats, by bit operations on the words (taking the address of
// the vector instead made nvcc load it as eight 16-bit values).
template <typename T> __device__ __forceinline__ void unpack8(const uint4& u, float* f);
template <> __device__ __forceinline__ void unpack8<__nv_bfloat16>(const uint4& u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
template <> __device__ __forceinline__ void unpack8<__half>(const uint4& u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(__halves2half2(__ushort_as_half((unsigned short)(w[i] & 0xffff)),
                                                   __ushort_as_half((unsigned short)(w[i] >> 16))));
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

__device__ __forceinline__ uint4 load16(const void* p) { return *static_cast<const uint4*>(p); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// All blocks arrive before any leaves; the last to arrive resets the count and opens the next
// generation, so the barrier serves every phase of every step without a reset of its own.
__device__ void grid_barrier(unsigned* barrier, unsigned blocks) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* count = barrier;
    unsigned* generation = barrier + 32;
    const unsigned seen = ld_acquire(generation);
    __threadfence();
    if (atomicAdd(count, 1u) == blocks - 1) {
      atomicExch(count, 0u);
      __threadfence();
      atomicAdd(generation, 1u);
    } else {
      while (ld_acquire(generation) == seen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

__device__ __forceinline__ void copy16(uint32_t dst, const void* src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;"
               :: "r"(dst), "l"(src), "l"(policy) : "memory");
}

// The step's shape, the same in every block.
struct Shape {
  int blocks, block, len, pos;
  int H, I, Hq, Hkv, G, D, keys, n_qkv, k_attn;
  int chunks_h, chunks_attn, chunks_i;   // 1024-column chunks of each K
  int tiles_head;                        // cached-key tiles per kv head
};

__device__ __forceinline__ int share(long long total, int part, int parts) {
  return (int)(total * part / parts);
}

// This block's tiles of a phase, as [begin, end) in the phase's numbering: whole row groups
// for QKV and gate/up (their epilogues need whole rows), any tile boundary for the others
// (they add into the residual, or are merged per head).
__device__ void phase_range(const Shape& s, int phase, int block, int& begin, int& end) {
  int groups = 0, chunks = 1;
  switch (phase) {
    case QKV: groups = s.n_qkv / ROWS; chunks = s.chunks_h; break;
    case GATE_UP: groups = s.I / (ROWS / 2); chunks = s.chunks_h; break;
    case ATTN: groups = s.Hkv * s.tiles_head; break;
    case OPROJ: groups = s.H / ROWS * s.chunks_attn; break;
    default: groups = s.H / ROWS * s.chunks_i; break;
  }
  begin = share(groups, block, s.blocks) * chunks;
  end = share(groups, block + 1, s.blocks) * chunks;
}

// Where a walk through this block's tiles stands: layer, phase, tile, and the tile as (row
// group or kv head, chunk or key tile), counted on rather than divided out per tile.
struct Cursor {
  int layer, phase, tile, end, major, minor, minors;
};

__device__ int minors_of(const Shape& s, int phase) {
  switch (phase) {
    case ATTN: return s.tiles_head;
    case OPROJ: return s.chunks_attn;
    case DOWN: return s.chunks_i;
    default: return s.chunks_h;
  }
}

__device__ void settle(const Shape& s, int layers_n, Cursor& c) {
  // Move past empty ranges to the next tile that exists (layer == layers_n at the end).
  while (c.layer < layers_n && c.tile >= c.end) {
    if (++c.phase == PHASES) {
      c.phase = 0;
      ++c.layer;
    }
    if (c.layer < layers_n) {
      phase_range(s, c.phase, s.block, c.tile, c.end);
      c.minors = minors_of(s, c.phase);
      c.major = c.tile / c.minors;
      c.minor = c.tile - c.major * c.minors;
    }
  }
}

__device__ __forceinline__ void advance(const Shape& s, int layers_n, Cursor& c) {
  ++c.tile;
  if (++c.minor == c.minors) {
    c.minor = 0;
    ++c.major;
  }
  if (c.tile >= c.end) settle(s, layers_n, c);
}

// Issue this thread's share of one tile's copies into a ring stage: the tile's origin once,
// then per copy only an offset.
template <typename T>
__device__ void issue(const Params& p, const Shape& s, const Cursor& c, uint32_t stage,
                      uint64_t policy) {
  const Layer& L = p.layers[c.layer];
  if (c.phase == ATTN) {
    const int head = c.major;
    const int t0 = c.minor * s.keys;
    const long long origin = ((long long)head * p.max_context + t0) * s.D;
    const T* k_tile = static_cast<const T*>(L.k_cache) + origin;
    const T* v_tile = static_cast<const T*>(L.v_cache) + origin;
    const int vectors_key = s.D / 8, rows = s.len - t0;
#pragma unroll
    for (int j = 0; j < VECTORS; ++j) {
      const int v = threadIdx.x + j * THREADS;
      const int e = v % (VECTORS * THREADS / 2);   // a vector of the K half, then the V half
      if (e / vectors_key < rows)
        copy16(stage + v * 16, (v < VECTORS * THREADS / 2 ? k_tile : v_tile) + e * 8, policy);
    }
    return;
  }
  const T* w;
  int k = s.H;
  int up = 0;   // gate/up: rows ROWS / 2 on are the up rows, I rows further
  if (c.phase == QKV) {
    w = static_cast<const T*>(L.wqkv);
  } else if (c.phase == GATE_UP) {
    w = static_cast<const T*>(L.w_gate_up);
    up = (s.I - ROWS / 2) * k;
  } else if (c.phase == OPROJ) {
    w = static_cast<const T*>(L.wo);
    k = s.k_attn;
  } else {
    w = static_cast<const T*>(L.w_down);
    k = s.I;
  }
  const int col0 = c.minor * COLS;
  const int rows_per_group = c.phase == GATE_UP ? ROWS / 2 : ROWS;
  const T* tile = w + (long long)c.major * rows_per_group * k + col0;
  const int cols = k - col0;
  // Offsets within a tile fit 32 bits (16 rows of at most 16384, the up rows 2^27 further).
#pragma unroll
  for (int j = 0; j < VECTORS; ++j) {
    const int v = threadIdx.x + j * THREADS;
    const int row = v / (COLS / 8), col = (v % (COLS / 8)) * 8;
    if (col < cols) copy16(stage + v * 16, tile + (row * k + (row >= ROWS / 2 ? up : 0) + col), policy);
  }
}

struct Smem {
  float qs[MAX_GROUP * 128];       // rotated queries of the current kv head
  float k_new[128], v_new[128];    // this token's rotated key and value
  float scores[MAX_GROUP * MAX_KEYS];   // scores, then probabilities, of a tile of keys
  float m[MAX_GROUP], l[MAX_GROUP], alpha[MAX_GROUP];
  float red[WARPS];        // block sums of the norms
  float gate_up[WARPS];    // a gate/up group's row sums, for its epilogue
  int flag;
};

// The GEMV input of a normed phase: rms_norm(src) * norm, rounded as kernels._input does.
template <typename T>
__device__ void prepare_normed(const float* src, const T* embed_row, const T* norm, int n,
                               float eps, float* xs, Smem& sm) {
  float v[MAX_NORMED];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < MAX_NORMED; ++i) {
    const int c = threadIdx.x + i * THREADS;
    v[i] = 0.f;
    if (c < n) v[i] = embed_row ? to_f<T>(embed_row[c]) : __ldcg(src + c);
    ss += v[i] * v[i];
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) sm.red[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) total += sm.red[w];
  const float rstd = 1.f / sqrtf(total / n + eps);
#pragma unroll
  for (int i = 0; i < MAX_NORMED; ++i) {
    const int c = threadIdx.x + i * THREADS;
    if (c < n) xs[c] = round_to<T>(round_to<T>(v[i] * rstd) * to_f<T>(norm[c]));
  }
  __syncthreads();
}

template <typename T>
__device__ void prepare_plain(const float* src, int n, float* xs) {
  for (int c = threadIdx.x; c < n; c += THREADS) xs[c] = round_to<T>(__ldcg(src + c));
  __syncthreads();
}

// Attention tiles are shared out as [T b / blocks, T (b + 1) / blocks): the block holding tile
// t is the largest b with T b / blocks <= t.
__device__ int block_of(const Shape& s, int tile) {
  const int total = s.Hkv * s.tiles_head;
  return ((tile + 1) * s.blocks - 1) / total;
}

// Whether block b has any attention tiles (with fewer tiles than blocks, some have none).
__device__ bool has_tiles(const Shape& s, int b) {
  const int total = s.Hkv * s.tiles_head;
  return total * b / s.blocks < total * (b + 1) / s.blocks;
}

// A kv head's queries rotated for pos (and its new key and value) into shared memory.
template <typename T>
__device__ void begin_head(const Params& p, const Shape& s, int head, Smem& sm, float* acc) {
  const int half = s.D / 2;
  for (int i = threadIdx.x; i < (s.G + 1) * s.D; i += THREADS) {
    const int g = i / s.D, d = i % s.D;
    // rows g < G: the group's queries; row G: the key (kernels._rotated).
    const int row = g < s.G ? head * s.G + g : s.Hq + head;
    const float* q = p.qkv + (long long)row * s.D;
    const float x = round_to<T>(__ldcg(q + d));
    const float partner = round_to<T>(__ldcg(q + (d + half) % s.D));
    const float c = p.cos[(long long)s.pos * half + d % half];
    const float sn = p.sin[(long long)s.pos * half + d % half];
    const float r = x * c + (d < half ? -partner : partner) * sn;
    if (g < s.G) sm.qs[g * s.D + d] = round_to<T>(r);
    else sm.k_new[d] = round_to<T>(r);
  }
  for (int d = threadIdx.x; d < s.D; d += THREADS)
    sm.v_new[d] = round_to<T>(__ldcg(p.qkv + (long long)(s.Hq + s.Hkv + head) * s.D + d));
  if (threadIdx.x < MAX_GROUP) {
    sm.m[threadIdx.x] = -INFINITY;
    sm.l[threadIdx.x] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < MAX_PAIRS; ++i) acc[i] = 0.f;
  __syncthreads();
}

// One tile of keys and values (in a ring stage) into the running softmax of the group.
template <typename T>
__device__ void attend(const Params& p, const Shape& s, const Layer& L, int head, int key_tile,
                       T* stage, Smem& sm, float* acc) {
  const int t0 = key_tile * s.keys;
  T* ks = stage;
  T* vs = stage + s.keys * s.D;
  if (s.pos >= t0 && s.pos < t0 + s.keys) {
    // The tile of the new position: its cached row is stale until stored here.
    const long long slot = ((long long)head * p.max_context + s.pos) * s.D;
    for (int d = threadIdx.x; d < s.D; d += THREADS) {
      const T k = from_f<T>(sm.k_new[d]), v = from_f<T>(sm.v_new[d]);
      ks[(s.pos - t0) * s.D + d] = k;
      vs[(s.pos - t0) * s.D + d] = v;
      static_cast<T*>(L.k_cache)[slot + d] = k;
      static_cast<T*>(L.v_cache)[slot + d] = v;
    }
    __syncthreads();
  }
  const int valid = min(s.keys, s.len - t0);
  // Scores: D / 8 lanes per key, 8 dims (one 16-byte load) per lane.
  const int lanes = s.D / 8;
  const int per_warp = 32 / lanes;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int k0 = 0; k0 < s.keys; k0 += per_warp * WARPS) {
    const int key = k0 + warp * per_warp + lane / lanes;
    const int d0 = (lane % lanes) * 8;
    float kf[8];
    unpack8<T>(load16(ks + key * s.D + d0), kf);
#pragma unroll
    for (int g = 0; g < MAX_GROUP; ++g) {
      if (g < s.G) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot += sm.qs[g * s.D + d0 + i] * kf[i];
        for (int o = lanes / 2; o; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (lane % lanes == 0) sm.scores[g * s.keys + key] = key < valid ? dot * p.scale : -INFINITY;
      }
    }
  }
  __syncthreads();
  // Online softmax, one warp per query head.
  if (warp < s.G) {
    float* row = sm.scores + warp * s.keys;
    float best = -INFINITY;
    for (int t = lane; t < s.keys; t += 32) best = fmaxf(best, row[t]);
#pragma unroll
    for (int o = 16; o; o >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, o));
    const float m_new = fmaxf(sm.m[warp], best);
    float sum = 0.f;
    for (int t = lane; t < s.keys; t += 32) {
      const float e = __expf(row[t] - m_new);
      sum += e;
      row[t] = round_to<T>(e);
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      const float alpha = __expf(sm.m[warp] - m_new);
      sm.alpha[warp] = alpha;
      sm.l[warp] = sm.l[warp] * alpha + sum;
      sm.m[warp] = m_new;
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < MAX_PAIRS; ++i) {
    const int pair = threadIdx.x + i * THREADS;
    if (pair < s.G * s.D) {
      const int g = pair / s.D, d = pair % s.D;
      const float* prob = sm.scores + g * s.keys;
      float a = acc[i] * sm.alpha[g];
      for (int t = 0; t < valid; ++t) a += prob[t] * to_f<T>(vs[t * s.D + d]);
      acc[i] = a;
    }
  }
}

// This block's part of a kv head's attention out to global memory; the last block of the head
// to get there merges all parts into the attention output.
__device__ void finish_head(const Params& p, const Shape& s, int head, Smem& sm,
                            const float* acc) {
  const long long part = (long long)head * s.blocks + s.block;
  if (threadIdx.x < s.G) {
    p.part_ml[(part * s.G + threadIdx.x) * 2] = sm.m[threadIdx.x];
    p.part_ml[(part * s.G + threadIdx.x) * 2 + 1] = sm.l[threadIdx.x];
  }
#pragma unroll
  for (int i = 0; i < MAX_PAIRS; ++i) {
    const int pair = threadIdx.x + i * THREADS;
    if (pair < s.G * s.D) p.part_acc[part * s.G * s.D + pair] = acc[i];
  }
  __syncthreads();
  // The blocks holding this head's tiles: those with tiles from the first one's to the last's.
  const int first = block_of(s, head * s.tiles_head);
  const int last = block_of(s, (head + 1) * s.tiles_head - 1);
  if (threadIdx.x == 0) {
    int parts = 0;
    for (int b = first; b <= last; ++b) parts += has_tiles(s, b);
    __threadfence();
    const unsigned arrived = atomicAdd(p.head_count + head, 1u);
    sm.flag = arrived == (unsigned)(parts - 1);
    if (sm.flag) p.head_count[head] = 0;   // every part is in: ready for the next layer
    __threadfence();
  }
  __syncthreads();
  if (!sm.flag) return;
#pragma unroll
  for (int i = 0; i < MAX_PAIRS; ++i) {
    const int pair = threadIdx.x + i * THREADS;
    if (pair < s.G * s.D) {
      const int g = pair / s.D;
      float best = -INFINITY;
      for (int b = first; b <= last; ++b)
        if (has_tiles(s, b))
          best = fmaxf(best, __ldcg(p.part_ml + (((long long)head * s.blocks + b) * s.G + g) * 2));
      float total = 0.f, out = 0.f;
      for (int b = first; b <= last; ++b) {
        if (!has_tiles(s, b)) continue;
        const long long at = (long long)head * s.blocks + b;
        const float w = __expf(__ldcg(p.part_ml + (at * s.G + g) * 2) - best);
        total += w * __ldcg(p.part_ml + (at * s.G + g) * 2 + 1);
        out += w * __ldcg(p.part_acc + at * s.G * s.D + pair);
      }
      p.attn[(long long)head * s.G * s.D + pair] = out / total;
    }
  }
}

// What a block carries from tile to tile.
struct State {
  int phase_index = -1;     // layer * PHASES + phase being summed
  int head = -1;            // kv head whose attention is in progress
  float row_sum[8] = {};    // this lane's part of its warp's row, over the chunks so far
  float acc[MAX_PAIRS];     // attention: this thread's (head, dim) sums
};

template <typename T>
__device__ void end_phase(const Params& p, const Shape& s, State& st, Smem& sm) {
  if (st.phase_index % PHASES == ATTN && st.head >= 0) {
    finish_head(p, s, st.head, sm, st.acc);
    st.head = -1;
  }
}

template <typename T>
__device__ void begin_phase(const Params& p, const Shape& s, State& st, Smem& sm, float* xs) {
  const int layer = st.phase_index / PHASES, phase = st.phase_index % PHASES;
  int begin, end;
  phase_range(s, phase, s.block, begin, end);
  if (begin == end) return;   // nothing of this phase here: only its barrier
  const Layer& L = p.layers[layer];
  const T* embed_row = static_cast<const T*>(p.embed) + *p.token * (long long)s.H;
  switch (phase) {
    case QKV:
      prepare_normed<T>(p.x, layer == 0 ? embed_row : nullptr, static_cast<const T*>(L.attn_norm),
                        s.H, p.eps, xs, sm);
      break;
    case OPROJ: prepare_plain<T>(p.attn, s.k_attn, xs); break;
    case GATE_UP:
      prepare_normed<T>(p.x, nullptr, static_cast<const T*>(L.mlp_norm), s.H, p.eps, xs, sm);
      break;
    case DOWN: prepare_plain<T>(p.h, s.I, xs); break;
    default: break;
  }
}

// Pass every phase boundary up to phase index `target`, with its barrier.
template <typename T>
__device__ void reach(const Params& p, const Shape& s, State& st, Smem& sm, float* xs,
                      int target) {
  while (st.phase_index < target) {
    if (st.phase_index >= 0) end_phase<T>(p, s, st, sm);
    if (++st.phase_index > 0) grid_barrier(p.barrier, s.blocks);
    begin_phase<T>(p, s, st, sm, xs);
  }
}

// One GEMV tile (ROWS rows x up to COLS columns in a ring stage) into the warps' row sums.
template <typename T>
__device__ void gemv_tile(const Params& p, const Shape& s, const Layer& L, const Cursor& c,
                          const T* stage, const float* xs, State& st, Smem& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int k = c.phase == OPROJ ? s.k_attn : c.phase == DOWN ? s.I : s.H;
  const int group = c.major, chunk = c.minor, chunks = c.minors;
  const int col0 = chunk * COLS, cols = min(COLS, k - col0);
  const T* w = stage + warp * COLS;
#pragma unroll
  for (int j = 0; j < COLS / 256; ++j) {
    const int col = j * 256 + lane * 8;
    if (col < cols) {
      float wf[8];
      unpack8<T>(load16(w + col), wf);
      const float4 x0 = *reinterpret_cast<const float4*>(xs + col0 + col);
      const float4 x1 = *reinterpret_cast<const float4*>(xs + col0 + col + 4);
      const float xf[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) st.row_sum[i] += wf[i] * xf[i];   // 8 chains, not one
    }
  }
  const bool residual = c.phase == OPROJ || c.phase == DOWN;
  if (chunk != chunks - 1 && !(residual && c.tile == c.end - 1)) return;
  float lane_sum = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    lane_sum += st.row_sum[i];
    st.row_sum[i] = 0.f;
  }
  const float sum = warp_sum(lane_sum);
  if (lane) return;
  if (c.phase == QKV) {
    const int row = group * ROWS + warp;
    p.qkv[row] = sum + (L.bqkv ? to_f<T>(static_cast<const T*>(L.bqkv)[row]) : 0.f);
  } else if (c.phase == GATE_UP) {
    sm.gate_up[warp] = sum;
  } else {
    atomicAdd(p.x + group * ROWS + warp, sum);
  }
}

template <typename T>
__global__ void __launch_bounds__(THREADS, 1) persistent_layers(const Params p) {
  extern __shared__ __align__(128) unsigned char ring[];   // STAGES tiles, then the input
  // (the GEMV input in float32, already rounded to T: no conversion per product)
  __shared__ Smem sm;
  Shape s;
  s.blocks = gridDim.x;
  s.block = blockIdx.x;
  s.pos = *p.pos;
  s.len = s.pos + 1;
  s.H = p.hidden;
  s.I = p.inter;
  s.Hq = p.heads;
  s.Hkv = p.kv_heads;
  s.G = p.heads / p.kv_heads;
  s.D = p.head_dim;
  s.keys = TILE_BYTES / 4 / s.D;   // half a tile of keys, half of values
  s.n_qkv = (s.Hq + 2 * s.Hkv) * s.D;
  s.k_attn = s.Hq * s.D;
  s.chunks_h = (s.H + COLS - 1) / COLS;
  s.chunks_attn = (s.k_attn + COLS - 1) / COLS;
  s.chunks_i = (s.I + COLS - 1) / COLS;
  s.tiles_head = (s.len + s.keys - 1) / s.keys;
  float* xs = reinterpret_cast<float*>(ring + STAGES * TILE_BYTES);
  const uint32_t ring_base = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
  uint64_t policy;   // weights and cached keys are read once per step: first out of L2
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  const int layers_n = p.layers_n;
  if (s.block == 0) {   // the residual starts as the token's embedding
    const T* row = static_cast<const T*>(p.embed) + *p.token * (long long)s.H;
    for (int c = threadIdx.x; c < s.H; c += THREADS) p.x[c] = to_f<T>(row[c]);
  }

  Cursor produce{0, QKV, 0, 0, 0, 0, 1};
  phase_range(s, QKV, s.block, produce.tile, produce.end);
  produce.minors = minors_of(s, QKV);
  produce.major = produce.tile / produce.minors;
  settle(s, layers_n, produce);
  Cursor consume = produce;
  for (int i = 0; i < STAGES - 1; ++i) {
    if (produce.layer < layers_n) {
      issue<T>(p, s, produce, ring_base + i * TILE_BYTES, policy);
      advance(s, layers_n, produce);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  State st;
  for (int i = 0; consume.layer < layers_n; ++i) {
    if (produce.layer < layers_n) {
      issue<T>(p, s, produce, ring_base + ((i + STAGES - 1) % STAGES) * TILE_BYTES, policy);
      advance(s, layers_n, produce);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    // The barriers come after the next tiles are in flight: they load while this block waits.
    reach<T>(p, s, st, sm, xs, consume.layer * PHASES + consume.phase);
    asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 1) : "memory");
    __syncthreads();
    T* stage = reinterpret_cast<T*>(ring + (i % STAGES) * TILE_BYTES);
    const Layer& L = p.layers[consume.layer];
    const bool gate_up_done = consume.phase == GATE_UP && consume.minor == consume.minors - 1;
    const int group = consume.major;
    if (consume.phase == ATTN) {
      const int head = consume.major;
      if (head != st.head) {
        if (st.head >= 0) finish_head(p, s, st.head, sm, st.acc);
        begin_head<T>(p, s, head, sm, st.acc);
        st.head = head;
      }
      attend<T>(p, s, L, head, consume.minor, stage, sm, st.acc);
    } else {
      gemv_tile<T>(p, s, L, consume, stage, xs, st, sm);
    }
    __syncthreads();
    if (gate_up_done && threadIdx.x < ROWS / 2) {
      const float gate = sm.gate_up[threadIdx.x], up = sm.gate_up[threadIdx.x + ROWS / 2];
      p.h[group * (ROWS / 2) + threadIdx.x]
          = gate / (1.f + __expf(-gate)) * up;
    }
    advance(s, layers_n, consume);
  }
  reach<T>(p, s, st, sm, xs, layers_n * PHASES - 1);
  end_phase<T>(p, s, st, sm);
  asm volatile("cp.async.wait_all;" ::: "memory");
}

int smem_bytes(const Params& p) {
  int inputs = p.hidden;
  inputs = inputs > p.inter ? inputs : p.inter;
  inputs = inputs > p.heads * p.head_dim ? inputs : p.heads * p.head_dim;
  return STAGES * TILE_BYTES + (inputs * 4 + 15) / 16 * 16;
}

template <typename T>
int launch(const Params& p, int blocks, cudaStream_t stream) {
  const int smem = smem_bytes(p);
  cudaError_t err = cudaFuncSetAttribute(persistent_layers<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return (int)err;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(THREADS);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  // Cooperative: every block resident at once, which the grid barrier needs (else an error).
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeCooperative;
  attribute[0].val.cooperative = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  err = cudaLaunchKernelEx(&config, persistent_layers<T>, p);
  return (int)err;
}

}  // namespace persistent_step

using persistent_step::Params;

extern "C" {

// Shared memory one block needs for these shapes, dynamic and static (persistent.py checks it
// against the GPU's limit), or -1 if the kernel's attributes cannot be read.
int physinf_persistent_smem(int bf16, const Params* p) {
  cudaFuncAttributes attributes;
  const cudaError_t err = bf16
      ? cudaFuncGetAttributes(&attributes, persistent_step::persistent_layers<__nv_bfloat16>)
      : cudaFuncGetAttributes(&attributes, persistent_step::persistent_layers<__half>);
  return err == cudaSuccess ? persistent_step::smem_bytes(*p) + (int)attributes.sharedSizeBytes : -1;
}

int physinf_persistent_layers(int bf16, const Params* p, int blocks, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return bf16 ? persistent_step::launch<__nv_bfloat16>(*p, blocks, s)
              : persistent_step::launch<__half>(*p, blocks, s);
}

const char* physinf_persistent_error(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}
