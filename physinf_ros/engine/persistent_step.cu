// Every layer of a 16-bit Llama-family decode step in one persistent kernel (persistent.py).
//
// One block per SM runs its share of every phase of every layer: QKV (RMSNorm + GEMV + bias),
// attention (RoPE, this token's key and value into the cache, the cached keys split over the
// blocks, the parts of a head merged by the last block to finish one), o_proj (+= residual),
// gate/up (RMSNorm + GEMV + SiLU(gate) * up) and down (+= residual). A grid barrier separates
// the phases, since each reads all of the one before.
//
// GEMV phases: a block owns a contiguous range of output rows, whose weights are one contiguous
// span of memory (two for gate/up). Its warps split that span evenly and stream it with 16-byte
// register loads, two batches in flight per lane, with no block-wide synchronisation until the
// phase ends; a lane adds its sums into the block's row accumulators in shared memory when it
// crosses into the next row. Weights never depend on this step's activations, so each warp
// issues the first two batches of its next phase before it waits at the barrier: the memory
// system keeps streaming while the blocks wait for each other, which is the time lost between
// kernels in the per-op step (docs/PERF.md).
// Attention: each block takes a contiguous range of tiles of cached keys and values (half a
// tile each), staged in shared memory by cp.async two tiles ahead; its first two tiles are
// issued before the barrier that precedes the phase.
//
// Rounding follows kernels.py (and so transformers): GEMV inputs normed in float32, rounded to
// the weight dtype, scaled by the norm weight, rounded again; float32 sums; q and k rounded
// before RoPE, q after it; probabilities rounded to the cache dtype before they weigh values.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace persistent_step {

constexpr int THREADS = 512;
constexpr int WARPS = THREADS / 32;
constexpr int BATCH = 3;                         // 16-byte weight loads per lane per batch
constexpr int WARP_STEP = 32 * 8;                // elements a warp covers per load
constexpr int KV_TILE_BYTES = 32768;             // keys, then values, of one attention tile
constexpr int KV_VECTORS = KV_TILE_BYTES / 16 / THREADS;
constexpr int MAX_GROUP = 8;                     // query heads per kv head
constexpr int MAX_PAIRS = 1024 / THREADS;        // (head, dim) outputs per thread: G D <= 1024
constexpr int MAX_KEYS = KV_TILE_BYTES / 4 / 64; // keys per attention tile (head_dim 64)
constexpr int MAX_BLOCK_ROWS = 1024;             // accumulators per block (gate/up: both halves)
constexpr int INPUT_UNROLL = 2;                  // float4 input loads in flight per thread
constexpr int MAX_SPLITS = 160;                  // blocks on one kv head
constexpr int MIN_SPLIT_TILES = 4;               // attention tiles per block, at least

enum Phase { QKV = 0, ATTN = 1, OPROJ = 2, GATE_UP = 3, DOWN = 4 };

#ifdef PHYSINF_TRACE
// explore/s11: %globaltimer at each event of each layer of each block, for the probe.
constexpr int TRACE_EVENTS = 24, TRACE_LAYERS = 8, TRACE_BLOCKS = 160;
__device__ unsigned long long g_trace[TRACE_BLOCKS * TRACE_LAYERS * TRACE_EVENTS];
#define TRACE(layer, event)                                                                     \
  do {                                                                                          \
    if (threadIdx.x == 0 && (layer) < TRACE_LAYERS) {                                           \
      unsigned long long t;                                                                     \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));                                     \
      g_trace[(blockIdx.x * TRACE_LAYERS + (layer)) * TRACE_EVENTS + (event)] = t;              \
    }                                                                                           \
  } while (0)
#else
#define TRACE(layer, event) do {} while (0)
#endif

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
  float* part_ml;          // [Hkv, splits <= blocks, G, 2]
  float* part_acc;         // [Hkv, splits <= blocks, G, D]
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
// the vector instead made nvcc load it as eight 16-bit values: PERF.md, session 11).
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

// A weight vector, read once per step: not kept in L1, first out of L2.
__device__ __forceinline__ uint4 stream16(const void* p, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
  return v;
}

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

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// The step's shape, the same in every block.
struct Shape {
  int blocks, block, len, pos;
  int H, I, Hq, Hkv, G, D, keys, n_qkv, k_attn;
  int tiles_head;                        // cached-key tiles per kv head
  int splits;                            // blocks per kv head
};

__device__ __forceinline__ int share(int total, int part, int parts) {
  return (int)((long long)total * part / parts);
}

// What one warp streams in a GEMV phase: elements [begin, end) of its block's span, at
// (e < split ? a : b) + e, rows of k elements; the block's rows start at row0.
template <typename T>
struct Span {
  const T* a;
  const T* b;
  int split, begin, end, k, row0, rows;
};

template <typename T>
__device__ Span<T> gemv_span(const Params& p, const Shape& s, int layer, int phase) {
  const Layer& L = p.layers[layer];
  int n = s.H, k = s.H;
  const T* w;
  switch (phase) {
    case QKV: n = s.n_qkv; w = static_cast<const T*>(L.wqkv); break;
    case GATE_UP: n = s.I; w = static_cast<const T*>(L.w_gate_up); break;
    case OPROJ: k = s.k_attn; w = static_cast<const T*>(L.wo); break;
    default: k = s.I; w = static_cast<const T*>(L.w_down); break;
  }
  Span<T> sp;
  sp.k = k;
  sp.row0 = share(n, s.block, s.blocks);
  sp.rows = share(n, s.block + 1, s.blocks) - sp.row0;
  sp.a = w + (long long)sp.row0 * k;
  sp.split = sp.rows * k;
  // gate/up: the up rows of the same outputs follow the gate rows in the span.
  sp.b = phase == GATE_UP ? w + ((long long)s.I + sp.row0) * k - sp.split : sp.a;
  const int total = (phase == GATE_UP ? 2 : 1) * sp.split / 8;   // 16-byte vectors
  const int warp = threadIdx.x >> 5;
  sp.begin = share(total, warp, WARPS) * 8;
  sp.end = share(total, warp + 1, WARPS) * 8;
  return sp;
}

template <typename T>
__device__ __forceinline__ void load_batch(const Span<T>& sp, int base, uint4* batch,
                                           uint64_t policy) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < BATCH; ++i) {
    const int e = base + i * WARP_STEP + lane * 8;
    if (e < sp.end) batch[i] = stream16((e < sp.split ? sp.a : sp.b) + e, policy);
  }
}

// This warp's share of a GEMV phase into the block's row accumulators (acc_rows), given its
// first two batches already in flight.
template <typename T>
__device__ void gemv_phase(const Span<T>& sp, uint4* now, uint4* next, const float* xs,
                           float* acc_rows, uint64_t policy) {
  const int lane = threadIdx.x & 31;
  int e = sp.begin + lane * 8;
  int row = e / sp.k, col = e - row * sp.k;
  float sum[8] = {};   // 8 chains, summed when the row ends
  for (int base = sp.begin; base < sp.end; base += BATCH * WARP_STEP) {
#pragma unroll
    for (int i = 0; i < BATCH; ++i) {
      if (base + i * WARP_STEP + lane * 8 < sp.end) {
        if (col >= sp.k) {   // into the next row (k >= 256: one step crosses one boundary)
          float total = 0.f;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            total += sum[j];
            sum[j] = 0.f;
          }
          atomicAdd(acc_rows + row, total);
          col -= sp.k;
          ++row;
        }
        float w[8];
        unpack8<T>(now[i], w);
        const float4 x0 = *reinterpret_cast<const float4*>(xs + col);
        const float4 x1 = *reinterpret_cast<const float4*>(xs + col + 4);
        sum[0] += w[0] * x0.x;
        sum[1] += w[1] * x0.y;
        sum[2] += w[2] * x0.z;
        sum[3] += w[3] * x0.w;
        sum[4] += w[4] * x1.x;
        sum[5] += w[5] * x1.y;
        sum[6] += w[6] * x1.z;
        sum[7] += w[7] * x1.w;
      }
      col += WARP_STEP;
    }
#pragma unroll
    for (int i = 0; i < BATCH; ++i) now[i] = next[i];
    load_batch(sp, base + 2 * BATCH * WARP_STEP, next, policy);
  }
  if (sp.begin + lane * 8 < sp.end) {
    float total = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) total += sum[j];
    atomicAdd(acc_rows + row, total);
  }
}

struct Smem {
  float acc_rows[MAX_BLOCK_ROWS];  // a GEMV phase's sums for the block's rows
  float qs[MAX_GROUP * 128];       // rotated queries of the current kv head
  float k_new[128], v_new[128];    // this token's rotated key and value
  float scores[MAX_GROUP * MAX_KEYS];   // scores, then probabilities, of a tile of keys
  float m[MAX_GROUP], l[MAX_GROUP], alpha[MAX_GROUP];
  float merge_w[MAX_SPLITS * MAX_GROUP], merge_l[MAX_SPLITS * MAX_GROUP];   // a head's parts
  float red[WARPS];                // block sums of the norms
  int flag;
};

// The GEMV input of a normed phase: rms_norm(src) * norm, rounded as kernels._input does
// (float32 values of the rounded inputs: no conversion per product).
// 4 consecutive 16-bit values as floats (one 8-byte load).
template <typename T> __device__ __forceinline__ float4 load4(const T* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  float f[8];
  unpack8<T>(make_uint4(u.x, u.y, 0u, 0u), f);
  return make_float4(f[0], f[1], f[2], f[3]);
}

// The GEMV input of a normed phase: rms_norm(src) * norm, rounded as kernels._input does
// (float32 values of the rounded inputs: no conversion per product). Every load of a thread
// is issued before any is used: one round trip to L2, not one per element.
template <typename T>
__device__ void prepare_normed(const float* src, const T* embed_row, const T* norm, int n,
                               float eps, float* xs, Smem& sm) {
  // Raw inputs into xs first (four float4 loads in flight per thread), then normed in place.
  float ss = 0.f;
  for (int c0 = threadIdx.x * 4; c0 < n; c0 += INPUT_UNROLL * THREADS * 4) {
    float4 v[INPUT_UNROLL];
#pragma unroll
    for (int i = 0; i < INPUT_UNROLL; ++i) {
      const int c = c0 + i * THREADS * 4;
      if (c < n)
        v[i] = embed_row ? load4(embed_row + c) : __ldcg(reinterpret_cast<const float4*>(src + c));
    }
#pragma unroll
    for (int i = 0; i < INPUT_UNROLL; ++i) {
      const int c = c0 + i * THREADS * 4;
      if (c < n) {
        ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
        *reinterpret_cast<float4*>(xs + c) = v[i];
      }
    }
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) sm.red[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) total += sm.red[w];
  const float rstd = 1.f / sqrtf(total / n + eps);
  for (int c0 = threadIdx.x * 4; c0 < n; c0 += INPUT_UNROLL * THREADS * 4) {
    float4 g[INPUT_UNROLL];
#pragma unroll
    for (int i = 0; i < INPUT_UNROLL; ++i)
      if (c0 + i * THREADS * 4 < n) g[i] = load4(norm + c0 + i * THREADS * 4);
#pragma unroll
    for (int i = 0; i < INPUT_UNROLL; ++i) {
      const int c = c0 + i * THREADS * 4;
      if (c < n) {
        const float4 x = *reinterpret_cast<const float4*>(xs + c);
        *reinterpret_cast<float4*>(xs + c) = make_float4(
            round_to<T>(round_to<T>(x.x * rstd) * g[i].x),
            round_to<T>(round_to<T>(x.y * rstd) * g[i].y),
            round_to<T>(round_to<T>(x.z * rstd) * g[i].z),
            round_to<T>(round_to<T>(x.w * rstd) * g[i].w));
      }
    }
  }
  __syncthreads();
}

template <typename T>
__device__ void prepare_plain(const float* src, int n, float* xs) {
  for (int c0 = threadIdx.x * 4; c0 < n; c0 += INPUT_UNROLL * THREADS * 4) {
    float4 v[INPUT_UNROLL];
#pragma unroll
    for (int i = 0; i < INPUT_UNROLL; ++i)
      if (c0 + i * THREADS * 4 < n)
        v[i] = __ldcg(reinterpret_cast<const float4*>(src + c0 + i * THREADS * 4));
#pragma unroll
    for (int i = 0; i < INPUT_UNROLL; ++i) {
      const int c = c0 + i * THREADS * 4;
      if (c < n)
        *reinterpret_cast<float4*>(xs + c) = make_float4(round_to<T>(v[i].x), round_to<T>(v[i].y),
                                                         round_to<T>(v[i].z), round_to<T>(v[i].w));
    }
  }
  __syncthreads();
}

// A GEMV phase's outputs from the block's row accumulators, which are zeroed for the next.
template <typename T>
__device__ void epilogue(const Params& p, const Layer& L, int phase, const Span<T>& sp,
                         Smem& sm) {
  __syncthreads();
  for (int t = threadIdx.x; t < sp.rows; t += THREADS) {
    const int row = sp.row0 + t;
    const float sum = sm.acc_rows[t];
    if (phase == QKV) {
      p.qkv[row] = sum + (L.bqkv ? to_f<T>(static_cast<const T*>(L.bqkv)[row]) : 0.f);
    } else if (phase == GATE_UP) {
      const float up = sm.acc_rows[sp.rows + t];
      p.h[row] = sum / (1.f + __expf(-sum)) * up;
      sm.acc_rows[sp.rows + t] = 0.f;
    } else {
      p.x[row] = __ldcg(p.x + row) + sum;   // this block's rows of the residual: no atomics
    }
    sm.acc_rows[t] = 0.f;
  }
}

// Attention: each kv head's tiles are split over `splits` blocks (blocks head * splits + j),
// at least MIN_SPLIT_TILES each, so that a head's parts are few to merge at short contexts and
// every block works at long ones.
__device__ void attention_range(const Shape& s, int& begin, int& end) {
  begin = end = 0;
  if (s.block >= s.Hkv * s.splits) return;
  const int head = s.block / s.splits, j = s.block % s.splits;
  begin = head * s.tiles_head + share(s.tiles_head, j, s.splits);
  end = head * s.tiles_head + share(s.tiles_head, j + 1, s.splits);
}

// One attention tile's keys and values into a shared-memory stage (this thread's copies).
template <typename T>
__device__ void issue_kv(const Params& p, const Shape& s, const Layer& L, int tile,
                         uint32_t stage, uint64_t policy) {
  const int head = tile / s.tiles_head;
  const int t0 = (tile - head * s.tiles_head) * s.keys;
  const long long origin = ((long long)head * p.max_context + t0) * s.D;
  const T* k_tile = static_cast<const T*>(L.k_cache) + origin;
  const T* v_tile = static_cast<const T*>(L.v_cache) + origin;
  const int vectors_key = s.D / 8, rows = s.len - t0;
#pragma unroll
  for (int j = 0; j < KV_VECTORS; ++j) {
    const int v = threadIdx.x + j * THREADS;
    const int e = v % (KV_VECTORS * THREADS / 2);   // a vector of the K half, then the V half
    if (e / vectors_key < rows)
      copy16(stage + v * 16, (v < KV_VECTORS * THREADS / 2 ? k_tile : v_tile) + e * 8, policy);
  }
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

// One tile of keys and values (in a stage) into the running softmax of the group.
template <typename T>
__device__ void attend(const Shape& s, const Layer& L, int max_context, float scale, int head,
                       int key_tile, T* stage, Smem& sm, float* acc) {
  const int t0 = key_tile * s.keys;
  T* ks = stage;
  T* vs = stage + s.keys * s.D;
  if (s.pos >= t0 && s.pos < t0 + s.keys) {
    // The tile of the new position: its cached row is stale until stored here.
    const long long slot = ((long long)head * max_context + s.pos) * s.D;
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
        if (lane % lanes == 0) sm.scores[g * s.keys + key] = key < valid ? dot * scale : -INFINITY;
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

// This block's part of a kv head's attention out to global memory; the last of the head's
// blocks to get there merges all parts into the attention output, loading them in parallel.
__device__ void finish_head(const Params& p, const Shape& s, int head, Smem& sm,
                            const float* acc) {
  const int j = s.block % s.splits;
  const long long part = (long long)head * s.splits + j;
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
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned arrived = atomicAdd(p.head_count + head, 1u);
    sm.flag = arrived == (unsigned)(s.splits - 1);
    if (sm.flag) p.head_count[head] = 0;   // every part is in: ready for the next layer
    __threadfence();
  }
  __syncthreads();
  if (!sm.flag) return;
  const long long first = (long long)head * s.splits;
  // Each part's max and sum, then per query head the common max and each part's weight.
  for (int i = threadIdx.x; i < s.splits * s.G; i += THREADS) {
    sm.merge_w[i] = __ldcg(p.part_ml + (first * s.G + i) * 2);
    sm.merge_l[i] = __ldcg(p.part_ml + (first * s.G + i) * 2 + 1);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (warp < s.G) {
    float best = -INFINITY;
    for (int b = lane; b < s.splits; b += 32) best = fmaxf(best, sm.merge_w[b * s.G + warp]);
#pragma unroll
    for (int o = 16; o; o >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, o));
    float total = 0.f;
    for (int b = lane; b < s.splits; b += 32) {
      const float w = __expf(sm.merge_w[b * s.G + warp] - best);
      sm.merge_w[b * s.G + warp] = w;
      total += w * sm.merge_l[b * s.G + warp];
    }
    total = warp_sum(total);
    if (lane == 0) sm.alpha[warp] = 1.f / total;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < MAX_PAIRS; ++i) {
    const int pair = threadIdx.x + i * THREADS;
    if (pair < s.G * s.D) {
      const int g = pair / s.D;
      float out = 0.f;
#pragma unroll 8
      for (int b = 0; b < s.splits; ++b)
        out += sm.merge_w[b * s.G + g] * __ldcg(p.part_acc + (first + b) * s.G * s.D + pair);
      p.attn[(long long)head * s.G * s.D + pair] = out * sm.alpha[g];
    }
  }
  __syncthreads();
}

__device__ void wait_tiles(bool next_in_flight) {
  if (next_in_flight) asm volatile("cp.async.wait_group 1;" ::: "memory");
  else asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
}

// The attention phase of one layer; its first two tiles were issued before the barrier.
template <typename T>
__device__ void attention_phase(const Params& p, const Shape& s, const Layer& L, int begin,
                                int end, unsigned char* stages, uint32_t stages_smem,
                                Smem& sm, uint64_t policy) {
  float acc[MAX_PAIRS];
  int head = -1;
  for (int tile = begin; tile < end; ++tile) {
    const int stage = (tile - begin) & 1;
    wait_tiles(tile + 1 < end);
    const int tile_head = tile / s.tiles_head;
    if (tile_head != head) {
      if (head >= 0) finish_head(p, s, head, sm, acc);
      begin_head<T>(p, s, tile_head, sm, acc);
      head = tile_head;
    }
    attend<T>(s, L, p.max_context, p.scale, head, tile - tile_head * s.tiles_head,
              reinterpret_cast<T*>(stages + stage * KV_TILE_BYTES), sm, acc);
    __syncthreads();   // the stage is free
    if (tile + 2 < end) {
      issue_kv<T>(p, s, L, tile + 2, stages_smem + stage * KV_TILE_BYTES, policy);
      commit();
    }
  }
  if (head >= 0) finish_head(p, s, head, sm, acc);
}

template <typename T>
__global__ void __launch_bounds__(THREADS, 1) persistent_layers(const Params p) {
  // Dynamic shared memory: the GEMV input (float32), then two attention stages.
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
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
  s.keys = KV_TILE_BYTES / 4 / s.D;   // half a tile of keys, half of values
  s.n_qkv = (s.Hq + 2 * s.Hkv) * s.D;
  s.k_attn = s.Hq * s.D;
  s.tiles_head = (s.len + s.keys - 1) / s.keys;
  s.splits = min(min(s.blocks / s.Hkv, MAX_SPLITS),
                 (s.tiles_head + MIN_SPLIT_TILES - 1) / MIN_SPLIT_TILES);
  const int widest = max(max(s.H, s.I), s.k_attn);
  float* xs = reinterpret_cast<float*>(dynamic_smem);
  unsigned char* stages = dynamic_smem + (widest * 4 + 127) / 128 * 128;
  const uint32_t stages_smem = static_cast<uint32_t>(__cvta_generic_to_shared(stages));
  uint64_t policy;   // weights and cached keys are read once per step: first out of L2
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  const T* embed_row = static_cast<const T*>(p.embed) + *p.token * (long long)s.H;
  if (s.block == 0)   // the residual starts as the token's embedding
    for (int c = threadIdx.x; c < s.H; c += THREADS) p.x[c] = to_f<T>(embed_row[c]);
  for (int t = threadIdx.x; t < MAX_BLOCK_ROWS; t += THREADS) sm.acc_rows[t] = 0.f;
  int attn_begin, attn_end;
  attention_range(s, attn_begin, attn_end);

  uint4 now[BATCH], next[BATCH];
  Span<T> sp = gemv_span<T>(p, s, 0, QKV);
  load_batch(sp, sp.begin, now, policy);
  load_batch(sp, sp.begin + BATCH * WARP_STEP, next, policy);
  for (int layer = 0; layer < p.layers_n; ++layer) {
    const Layer& L = p.layers[layer];
    // QKV: the first two batches are in flight (issued before the barrier).
    TRACE(layer, 0);
    if (layer > 0) grid_barrier(p.barrier, s.blocks);
    TRACE(layer, 1);
    prepare_normed<T>(p.x, layer == 0 ? embed_row : nullptr,
                      static_cast<const T*>(L.attn_norm), s.H, p.eps, xs, sm);
    TRACE(layer, 2);
    gemv_phase<T>(sp, now, next, xs, sm.acc_rows, policy);
    TRACE(layer, 3);
    epilogue<T>(p, L, QKV, sp, sm);
    for (int i = 0; i < 2 && attn_begin + i < attn_end; ++i) {
      issue_kv<T>(p, s, L, attn_begin + i, stages_smem + i * KV_TILE_BYTES, policy);
      commit();
    }
    TRACE(layer, 4);
    grid_barrier(p.barrier, s.blocks);
    TRACE(layer, 5);
    attention_phase<T>(p, s, L, attn_begin, attn_end, stages, stages_smem, sm, policy);
    sp = gemv_span<T>(p, s, layer, OPROJ);
    load_batch(sp, sp.begin, now, policy);
    load_batch(sp, sp.begin + BATCH * WARP_STEP, next, policy);
    TRACE(layer, 6);
    grid_barrier(p.barrier, s.blocks);
    TRACE(layer, 7);
    prepare_plain<T>(p.attn, s.k_attn, xs);
    TRACE(layer, 8);
    gemv_phase<T>(sp, now, next, xs, sm.acc_rows, policy);
    TRACE(layer, 9);
    epilogue<T>(p, L, OPROJ, sp, sm);
    sp = gemv_span<T>(p, s, layer, GATE_UP);
    load_batch(sp, sp.begin, now, policy);
    load_batch(sp, sp.begin + BATCH * WARP_STEP, next, policy);
    TRACE(layer, 10);
    grid_barrier(p.barrier, s.blocks);
    TRACE(layer, 11);
    prepare_normed<T>(p.x, nullptr, static_cast<const T*>(L.mlp_norm), s.H, p.eps, xs, sm);
    TRACE(layer, 12);
    gemv_phase<T>(sp, now, next, xs, sm.acc_rows, policy);
    TRACE(layer, 13);
    epilogue<T>(p, L, GATE_UP, sp, sm);
    sp = gemv_span<T>(p, s, layer, DOWN);
    load_batch(sp, sp.begin, now, policy);
    load_batch(sp, sp.begin + BATCH * WARP_STEP, next, policy);
    TRACE(layer, 14);
    grid_barrier(p.barrier, s.blocks);
    TRACE(layer, 15);
    prepare_plain<T>(p.h, s.I, xs);
    TRACE(layer, 16);
    gemv_phase<T>(sp, now, next, xs, sm.acc_rows, policy);
    TRACE(layer, 17);
    epilogue<T>(p, L, DOWN, sp, sm);
    if (layer + 1 < p.layers_n) {
      sp = gemv_span<T>(p, s, layer + 1, QKV);
      load_batch(sp, sp.begin, now, policy);
      load_batch(sp, sp.begin + BATCH * WARP_STEP, next, policy);
    }
    TRACE(layer, 18);
  }
}

int smem_bytes(const Params& p) {
  int widest = p.hidden > p.inter ? p.hidden : p.inter;
  widest = widest > p.heads * p.head_dim ? widest : p.heads * p.head_dim;
  return (widest * 4 + 127) / 128 * 128 + 2 * KV_TILE_BYTES;
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
  return (int)cudaLaunchKernelEx(&config, persistent_layers<T>, p);
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
  return err == cudaSuccess ? persistent_step::smem_bytes(*p) + (int)attributes.sharedSizeBytes
                            : -1;
}

// The accumulators a block has for one GEMV phase's rows (persistent.py checks the model).
int physinf_persistent_block_rows() { return persistent_step::MAX_BLOCK_ROWS; }

int physinf_persistent_layers(int bf16, const Params* p, int blocks, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return bf16 ? persistent_step::launch<__nv_bfloat16>(*p, blocks, s)
              : persistent_step::launch<__half>(*p, blocks, s);
}

#ifdef PHYSINF_TRACE
int physinf_persistent_trace(void* host, int bytes) {
  return (int)cudaMemcpyFromSymbol(host, persistent_step::g_trace, bytes);
}
#endif

const char* physinf_persistent_error(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}
