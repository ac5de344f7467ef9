// Decode attention of one layer in one kernel: RoPE, the cache write, split-K attention over the
// cache and the merge of the splits (the contract of kernels.rope_attention, whose Triton split
// and reduce kernels take two launches and a round trip through global memory between them).
//
// A kv head's CLUSTER splits are one thread-block cluster. Each block streams its chunk of keys
// and values through a ring of shared-memory tiles filled by bulk copies (TMA) on an mbarrier,
// the first tiles before the PDL wait (the cache below pos never depends on the previous
// kernel), then merges with the other splits through distributed shared memory: no atomics, no
// second kernel. Tiles of 64 keys, chunks (min_chunk, 16 splits), the roundings and the online
// softmax are the Triton kernel's; its 32 splits make other chunks above 2048 keys.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace cg = cooperative_groups;

#ifndef CLUSTER_SPLITS
#define CLUSTER_SPLITS 16
#endif
#ifndef RING_STAGES
#define RING_STAGES 3
#endif
constexpr int CLUSTER = CLUSTER_SPLITS;   // splits per kv head: one cluster (16: non-portable)
constexpr int TILE = 64;       // keys per tile (the Triton kernel's block_t)
constexpr int STAGES = RING_STAGES;   // tiles in flight per block (3: 2 blocks per SM at 128)
constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_GROUP = 8;   // query heads per kv head

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
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float2 pair_f(const __nv_bfloat16* x) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(x));
}
__device__ __forceinline__ float2 pair_f(const __half* x) {
  return __half22float2(*reinterpret_cast<const __half2*>(x));
}
template <int N> struct Lanes;   // N 16-bit elements as one vector
template <> struct Lanes<2> { uint32_t x; };
template <> struct alignas(8) Lanes<4> { uint2 x; };

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)));
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
      ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ int chunk_of(int length, int min_chunk) {
  // Keys per split, as kernels._chunk: spread over CLUSTER splits, never under min_chunk.
  int chunk = max((length + CLUSTER - 1) / CLUSTER, min_chunk);
  return (chunk + TILE - 1) / TILE * TILE;
}

template <int D, typename T>
struct Shared {
  T k[STAGES][TILE][D];
  T v[STAGES][TILE][D];
  float q[MAX_GROUP][D];
  float scores[MAX_GROUP][TILE];   // this tile's scores, then its probabilities
  float alpha[MAX_GROUP];          // this tile's rescale of the running sums
  float m[MAX_GROUP], l[MAX_GROUP];
  float acc[MAX_GROUP][D];         // the split's partial output, read by the cluster's merge
  T k_new[D], v_new[D];
  uint64_t full[STAGES];
};

// RoPE (rotate-half pairs d, d + D/2) of element d of the D-vector at x, input rounded to the
// cache dtype first, as kernels._rotated.
template <int D, typename T>
__device__ __forceinline__ float rotated(const float* x, int d, const float* cos_row,
                                         const float* sin_row) {
  const float a = round_to<T>(x[d]);
  const float partner = round_to<T>(x[(d + D / 2) % D]);
  const float sign = d < D / 2 ? -1.f : 1.f;
  return a * cos_row[d % (D / 2)] + sign * partner * sin_row[d % (D / 2)];
}

template <int D, typename T>
__global__ void __launch_bounds__(THREADS, 2)
attention_kernel(const float* __restrict__ qkv, T* __restrict__ k_cache, T* __restrict__ v_cache,
                 const int* __restrict__ pos_ptr, const float* __restrict__ cos,
                 const float* __restrict__ sin, float* __restrict__ out, int max_context,
                 float scale, int group, int num_heads, int kv_heads, int min_chunk, int pdl) {
  extern __shared__ __align__(128) unsigned char raw[];
  Shared<D, T>& s = *reinterpret_cast<Shared<D, T>*>(raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int split = blockIdx.x, kv_head = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // pos was advanced by the previous step and the cache below it written by earlier ones: the
  // first tiles are read before the wait. Row pos is stale until this step writes it: the
  // split that holds it uses k_new and v_new there instead.
  const int length = *pos_ptr + 1, pos = length - 1;
  const int chunk = chunk_of(length, min_chunk);
  const int start = split * chunk, end = min(start + chunk, length);
  const int tiles = start < length ? (end - start + TILE - 1) / TILE : 0;
  const size_t head_base = (size_t)kv_head * max_context * D;
  auto issue = [&](int tile) {   // one thread: tile's keys and values into its ring slot
    const int slot = tile % STAGES, t0 = start + tile * TILE;
    const uint32_t bytes = (uint32_t)(min(TILE, end - t0) * D * sizeof(T));
    mbar_expect(&s.full[slot], 2 * bytes);
    bulk_load(&s.k[slot][0][0], k_cache + head_base + (size_t)t0 * D, bytes, &s.full[slot]);
    bulk_load(&s.v[slot][0][0], v_cache + head_base + (size_t)t0 * D, bytes, &s.full[slot]);
  };
  if (threadIdx.x == 0) {
    for (int i = 0; i < STAGES; ++i) mbar_init(&s.full[i]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int i = 0; i < min(STAGES, tiles); ++i) issue(i);
  }
  if (pdl) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  const float* cos_row = cos + (size_t)pos * (D / 2);
  const float* sin_row = sin + (size_t)pos * (D / 2);
  for (int i = threadIdx.x; i < group * D; i += THREADS) {
    const int g = i / D, d = i % D;
    s.q[g][d] = round_to<T>(rotated<D, T>(qkv + (size_t)(kv_head * group + g) * D, d, cos_row,
                                          sin_row));
  }
  const bool holds_pos = tiles > 0 && end == length;
  if (holds_pos) {
    for (int d = threadIdx.x; d < D; d += THREADS) {
      const T k = to_t<T>(rotated<D, T>(qkv + (size_t)(num_heads + kv_head) * D, d, cos_row,
                                        sin_row));
      const T v = to_t<T>(qkv[(size_t)(num_heads + kv_heads + kv_head) * D + d]);
      s.k_new[d] = k;
      s.v_new[d] = v;
      k_cache[head_base + (size_t)pos * D + d] = k;
      v_cache[head_base + (size_t)pos * D + d] = v;
    }
  }
  if (threadIdx.x < MAX_GROUP) {
    s.m[threadIdx.x] = -INFINITY;
    s.l[threadIdx.x] = 0.f;
  }
  __syncthreads();

  // Scores: a thread per (query head, key). Lane l reads the key's dims in chunks starting at
  // chunk l, so the 32 keys of a warp, one row apart, fall in different banks.
  constexpr int CHUNK = D / 32;                 // dims per chunk: 8 bytes of a 16-bit key
  // Values: a thread per (slice of the tile's keys, pair of dims), for every query head; the
  // slices' partial sums are added once, after the last tile.
  constexpr int PAIRS = D / 2;
  constexpr int SLICES = THREADS / PAIRS;       // 4 at head_dim 128, 8 at 64
  constexpr int KEYS_PER_SLICE = TILE / SLICES;
  static_assert(sizeof(T) * STAGES * TILE * D >= sizeof(float) * SLICES * MAX_GROUP * D,
                "the slices' sums reuse the ring's keys");
  const int pair = threadIdx.x % PAIRS, slice = threadIdx.x / PAIRS;
  float acc[MAX_GROUP][2];
#pragma unroll
  for (int g = 0; g < MAX_GROUP; ++g) acc[g][0] = acc[g][1] = 0.f;

  for (int tile = 0; tile < tiles; ++tile) {
    const int slot = tile % STAGES, t0 = start + tile * TILE;
    const int valid = min(TILE, end - t0);
    mbar_wait(&s.full[slot], (tile / STAGES) & 1);
    for (int item = threadIdx.x; item < group * TILE; item += THREADS) {
      const int g = item / TILE, t = item % TILE;
      float dot = -INFINITY;
      if (t < valid) {
        const T* key = t0 + t == pos ? s.k_new : s.k[slot][t];
        const float* q = s.q[g];
        dot = 0.f;
#pragma unroll 8
        for (int i = 0; i < 32; ++i) {
          const int c = (i + lane) % 32;
          T k_chunk[CHUNK];
          *reinterpret_cast<Lanes<CHUNK>*>(k_chunk) =
              *reinterpret_cast<const Lanes<CHUNK>*>(key + c * CHUNK);
#pragma unroll
          for (int j = 0; j < CHUNK; ++j) dot = fmaf(q[c * CHUNK + j], to_f(k_chunk[j]), dot);
        }
        dot *= scale;
      }
      s.scores[g][t] = dot;
    }
    __syncthreads();
    // The online softmax, a warp per query head: probabilities rounded to the cache dtype for
    // the product with the values, the running sum kept in float32, as kernels._attend.
    for (int g = warp; g < group; g += WARPS) {
      const float a = s.scores[g][lane], b = s.scores[g][lane + 32];
      float tile_max = fmaxf(a, b);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffff, tile_max, o));
      const float m_old = s.m[g], m_new = fmaxf(m_old, tile_max);
      const float pa = __expf(a - m_new), pb = __expf(b - m_new);
      float sum = pa + pb;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
      __syncwarp();
      s.scores[g][lane] = round_to<T>(pa);
      s.scores[g][lane + 32] = round_to<T>(pb);
      if (lane == 0) {
        const float alpha = __expf(m_old - m_new);
        s.alpha[g] = alpha;
        s.l[g] = s.l[g] * alpha + sum;
        s.m[g] = m_new;
      }
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < MAX_GROUP; ++g) {
      if (g < group) {
        acc[g][0] *= s.alpha[g];
        acc[g][1] *= s.alpha[g];
      }
    }
    const int first = slice * KEYS_PER_SLICE, last = min(first + KEYS_PER_SLICE, valid);
    for (int t = first; t < last; ++t) {
      const float2 v = pair_f((t0 + t == pos ? s.v_new : s.v[slot][t]) + 2 * pair);
#pragma unroll
      for (int g = 0; g < MAX_GROUP; ++g) {
        if (g < group) {
          const float p = s.scores[g][t];
          acc[g][0] = fmaf(p, v.x, acc[g][0]);
          acc[g][1] = fmaf(p, v.y, acc[g][1]);
        }
      }
    }
    __syncthreads();   // the slot and the scores are free again
    if (threadIdx.x == 0 && tile + STAGES < tiles) issue(tile + STAGES);
  }
  // The slices' sums, through the ring's memory (no copy is in flight any more).
  float* parts = reinterpret_cast<float*>(&s.k[0][0][0]);   // [SLICES][MAX_GROUP][D]
#pragma unroll
  for (int g = 0; g < MAX_GROUP; ++g) {
    if (g < group) {
      parts[(slice * MAX_GROUP + g) * D + 2 * pair] = acc[g][0];
      parts[(slice * MAX_GROUP + g) * D + 2 * pair + 1] = acc[g][1];
    }
  }
  __syncthreads();
  for (int o = threadIdx.x; o < group * D; o += THREADS) {
    float sum = 0.f;
#pragma unroll
    for (int r = 0; r < SLICES; ++r) sum += parts[(r * MAX_GROUP) * D + o];
    s.acc[o / D][o % D] = sum;
  }
  // Every split's partial (m = -inf, l = 0, acc = 0 where it holds no keys) is in its shared
  // memory; each block of the cluster merges a share of the group's outputs from all of them.
  cluster.sync();
  const int outputs = group * D, share = (outputs + CLUSTER - 1) / CLUSTER;
  for (int i = threadIdx.x; i < share; i += THREADS) {
    const int o = split * share + i;
    if (o < outputs) {
      const int g = o / D, d = o % D;
      float m[CLUSTER], l[CLUSTER], a[CLUSTER];
      float m_max = -INFINITY;
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) {
        const Shared<D, T>* other = cluster.map_shared_rank(&s, r);
        m[r] = other->m[g];
        l[r] = other->l[g];
        a[r] = other->acc[g][d];
        m_max = fmaxf(m_max, m[r]);
      }
      float total = 0.f, value = 0.f;
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) {
        const float w = m[r] == -INFINITY ? 0.f : __expf(m[r] - m_max);
        total = fmaf(l[r], w, total);
        value = fmaf(a[r], w, value);
      }
      out[(size_t)(kv_head * group + g) * D + d] = value / total;
    }
  }
  cluster.sync();   // no block leaves while another still reads its shared memory
}

template <int D, typename T>
static int launch(const float* qkv, void* k_cache, void* v_cache, const int* pos,
                  const float* cos, const float* sin, float* out, int max_context, float scale,
                  int group, int num_heads, int kv_heads, int min_chunk, int pdl,
                  cudaStream_t stream) {
  auto kernel = attention_kernel<D, T>;
  const int bytes = (int)sizeof(Shared<D, T>);
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         bytes);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (err != cudaSuccess) return (int)err;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(CLUSTER, kv_heads);
  config.blockDim = dim3(THREADS);
  config.dynamicSmemBytes = bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = CLUSTER;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = pdl;
  config.attrs = attrs;
  config.numAttrs = 2;
  return (int)cudaLaunchKernelEx(&config, kernel, qkv, (T*)k_cache, (T*)v_cache, pos, cos, sin,
                                 out, max_context, scale, group, num_heads, kv_heads, min_chunk,
                                 pdl);
}

extern "C" int physinf_attention(int head_dim, int bf16, const float* qkv, void* k_cache,
                                 void* v_cache, const int* pos, const float* cos,
                                 const float* sin, float* out, int max_context, float scale,
                                 int group, int num_heads, int kv_heads, int min_chunk, int pdl,
                                 void* stream) {
  if (group < 1 || group > MAX_GROUP) return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  if (head_dim == 128 && bf16)
    return launch<128, __nv_bfloat16>(qkv, k_cache, v_cache, pos, cos, sin, out, max_context,
                                      scale, group, num_heads, kv_heads, min_chunk, pdl, st);
  if (head_dim == 128)
    return launch<128, __half>(qkv, k_cache, v_cache, pos, cos, sin, out, max_context, scale,
                               group, num_heads, kv_heads, min_chunk, pdl, st);
  if (head_dim == 64 && bf16)
    return launch<64, __nv_bfloat16>(qkv, k_cache, v_cache, pos, cos, sin, out, max_context,
                                     scale, group, num_heads, kv_heads, min_chunk, pdl, st);
  if (head_dim == 64)
    return launch<64, __half>(qkv, k_cache, v_cache, pos, cos, sin, out, max_context, scale,
                              group, num_heads, kv_heads, min_chunk, pdl, st);
  return (int)cudaErrorInvalidValue;
}

extern "C" const char* physinf_attention_error(int code) {
  return cudaGetErrorString((cudaError_t)code);
}

// How many clusters of this kernel can be resident at once (cudaOccupancyMaxActiveClusters).
extern "C" int physinf_attention_clusters(int head_dim, int kv_heads) {
  auto kernel = head_dim == 128 ? attention_kernel<128, __nv_bfloat16>
                                : attention_kernel<64, __nv_bfloat16>;
  const int bytes = head_dim == 128 ? (int)sizeof(Shared<128, __nv_bfloat16>)
                                    : (int)sizeof(Shared<64, __nv_bfloat16>);
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(CLUSTER, kv_heads);
  config.blockDim = dim3(THREADS);
  config.dynamicSmemBytes = bytes;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = CLUSTER;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = -1;
  cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  return err == cudaSuccess ? clusters : -(int)err;
}
