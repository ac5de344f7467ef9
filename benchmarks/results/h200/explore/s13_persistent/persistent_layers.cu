// Every decoder layer of a batch-1 decode step in one persistent kernel (16-bit Llama weights).
//
// One block per SM, launched cooperatively. Each block owns a contiguous share of every
// linear's rows, and one thread of it (the producer) streams that share's weights, and its
// attention item's cached keys and values, through a shared-memory ring with bulk copies
// (cp.async.bulk) completing on mbarriers. Weights never depend on activations, so the producer
// runs ahead across the grid barriers that order the phases: while the consumers wait at a
// barrier, or attend, the next phase's weights are already arriving. Per layer, five phases:
//   qkv   RMSNorm (each block normalises the whole residual itself) + QKV GEMV (+ bias)
//   attn  RoPE, this token's key and value into the cache, attention over 0..pos: a block per
//         (kv head, split); the last split of a head to finish merges the head's splits
//   o     o_proj GEMV added into the float32 residual (each block adds its own rows)
//   mlp   RMSNorm + gate and up GEMVs, silu(gate) * up
//   down  down_proj GEMV added into the residual
// PERF.md, session 13, has the design's measurements; session 12 the ring it grew from.
// Compile-time: HEAD_DIM (64 or 128), GROUP (query heads per kv head), WEIGHT_BF16 (else fp16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef GROUP
#define GROUP 4
#endif
#ifdef WEIGHT_BF16
typedef __nv_bfloat16 wtype;
typedef __nv_bfloat162 wtype2;
__device__ __forceinline__ float2 to_float2(wtype2 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ wtype to_w(float v) { return __float2bfloat16_rn(v); }
__device__ __forceinline__ float from_w(wtype v) { return __bfloat162float(v); }
#else
typedef __half wtype;
typedef __half2 wtype2;
__device__ __forceinline__ float2 to_float2(wtype2 v) { return __half22float2(v); }
__device__ __forceinline__ wtype to_w(float v) { return __float2half_rn(v); }
__device__ __forceinline__ float from_w(wtype v) { return __half2float(v); }
#endif

#ifndef SLOTS   // probe (run 15): the ring's depth
#define SLOTS 6
#endif
constexpr int SLOT_BYTES = 32768;                 // session 12: 6 x 32 KB beat 11 x 16 KB
constexpr int SLOT_ELEMS = SLOT_BYTES / 2;
constexpr int CONSUMERS = 8;                      // consumer warps; warp CONSUMERS produces
constexpr int THREADS = (CONSUMERS + 1) * 32;
constexpr int MAX_K = 14336;                      // the widest GEMV input (Llama-3.1-8B's MLP)
constexpr int MAX_ROWS = 256;                     // rows of a span a block may own
constexpr int STEP = 256;                         // elements a warp reads per step (16 B a lane)
constexpr int STEPS_PER_WARP = SLOT_ELEMS / STEP / CONSUMERS;   // a warp's share of a slot
constexpr int MAX_ROWS_PER_WARP = 3;              // rows a warp's share can touch (K >= 1024)
constexpr int D = HEAD_DIM;
constexpr int LANES_PER_TOKEN = D / 8;            // a lane holds 8 dims of a head
constexpr int TOKEN_GROUPS = 32 / LANES_PER_TOKEN;  // tokens a warp takes at once
constexpr int TOKENS = SLOT_BYTES / 2 / (D * 2);  // keys per slot (values in its second half)
constexpr int TOKENS_PER_LANE = TOKENS / CONSUMERS / TOKEN_GROUPS;
constexpr int SHARED_BYTES = SLOTS * SLOT_BYTES + MAX_K * 2 + (2 * MAX_ROWS + 64 + D) * 4
                             + 2 * SLOTS * 8;
static_assert(D == 64 || D == 128, "head_dim 64 or 128");
static_assert(CONSUMERS * (D + 2) * GROUP * 4 <= MAX_K * 2 && (GROUP + 2) * D * 4 <= MAX_K * 2,
              "attention scratch fits in xs");
static_assert(SHARED_BYTES <= 232448, "one block per SM, at most 227 KB");

struct LayerWeights {
  const wtype* attn_norm;   // [H]
  const wtype* wqkv;        // [q + 2 kv, H]
  const wtype* bqkv;        // [q + 2 kv] or null
  const wtype* wo;          // [H, q]
  const wtype* mlp_norm;    // [H]
  const wtype* w_gate_up;   // [2 I, H]
  const wtype* w_down;      // [H, I]
};

struct Args {
  const LayerWeights* layers;
  int num_layers;
  const wtype* embed;       // [V, H]: the first layer's input is row token of it
  const long long* token;   // [1]
  float* h;                 // [H] the residual, the last layer's output
  float* qkv;               // [q + 2 kv]
  float* attn;              // [q]
  float* mlp;               // [I]
  float* partial;           // [kv_heads, splits, GROUP, D + 2]: each split's max, sum, values
  wtype* k_cache;           // [layers, kv_heads, max_context, D]
  wtype* v_cache;
  const int* pos;           // the token's position: its key and value go there
  const float* cos;         // [max_context, D / 2]
  const float* sin;
  int* counters;            // [1 + kv_heads], zero between launches: the grid's, each head's
  int hidden, inter, heads, kv_heads, max_context, splits;
  float eps, scale;
};

__device__ __forceinline__ uint32_t smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               ::"r"(smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(smem(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;"
      ::"r"(smem(dst)), "l"(src), "r"(bytes), "r"(smem(bar)), "l"(policy) : "memory");
}
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 32) : "memory");
}
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A block's share of a linear's n rows, and of a kv head's keys: the producer and the
// consumers compute both the same way, so they agree on every slot.
struct Rows { int lo, count; };
__device__ __forceinline__ Rows rows_of(int n, int block, int blocks) {
  const int lo = (int)((long long)n * block / blocks);
  return {lo, (int)((long long)n * (block + 1) / blocks) - lo};
}
struct Item { int kv_head, split, start, end, cached; };   // keys [start, end); [start, cached)
__device__ __forceinline__ Item item_of(const Args& a, int block, int pos) {
  Item it{-1, 0, 0, 0, 0};
  if (block >= a.kv_heads * a.splits) return it;
  const int length = pos + 1;
  const int chunk = (length + a.splits - 1) / a.splits;
  it.kv_head = block / a.splits;
  it.split = block % a.splits;
  it.start = min(it.split * chunk, length);
  it.end = min(it.start + chunk, length);
  it.cached = max(it.start, min(it.end, pos));   // row pos is this step's: not in the cache yet
  return it;
}
__device__ __forceinline__ long long cache_row(const Args& a, int layer, int kv_head, int t) {
  return (((long long)layer * a.kv_heads + kv_head) * a.max_context + t) * D;
}

// ---------------------------------------------------------------------------- the producer
struct Producer {
  unsigned char* ring;
  uint64_t *full, *empty;
  uint64_t policy;
  uint32_t it = 0;

  __device__ __forceinline__ unsigned char* acquire(uint32_t bytes) {
    const int slot = it % SLOTS;
    if (it >= SLOTS) mbar_wait(&empty[slot], ((it / SLOTS) - 1) & 1);
    mbar_expect(&full[slot], bytes);
    return ring + slot * SLOT_BYTES;
  }
  __device__ void span(const wtype* w, long long elems) {
    const unsigned char* src = (const unsigned char*)w;
    for (long long off = 0; off < elems; off += SLOT_ELEMS, ++it) {
      const uint32_t bytes = (uint32_t)min((long long)SLOT_ELEMS, elems - off) * 2;
      unsigned char* dst = acquire(bytes);
      bulk_load(dst, src + off * 2, bytes, &full[it % SLOTS], policy);
    }
  }
  __device__ void keys_values(const Args& a, int layer, const Item& item) {
    for (int t = item.start; t < item.cached; t += TOKENS, ++it) {
      const uint32_t bytes = (uint32_t)min(TOKENS, item.cached - t) * D * 2;
      unsigned char* dst = acquire(2 * bytes);
      const long long row = cache_row(a, layer, item.kv_head, t);
      bulk_load(dst, a.k_cache + row, bytes, &full[it % SLOTS], policy);
      bulk_load(dst + SLOT_BYTES / 2, a.v_cache + row, bytes, &full[it % SLOTS], policy);
    }
  }
};

// --------------------------------------------------------------------------- the consumers
struct Ring {
  unsigned char* ring;
  uint64_t *full, *empty;
  uint32_t it = 0;
  __device__ __forceinline__ const unsigned char* wait() {
    const int slot = it % SLOTS;
    mbar_wait(&full[slot], (it / SLOTS) & 1);
    return ring + slot * SLOT_BYTES;
  }
  __device__ __forceinline__ void release(int lane) {
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[it % SLOTS]);
    ++it;
  }
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

// acc[r] += the dot of the span's row r with xs, for a span of rows * k elements in the ring.
// A warp takes STEPS_PER_WARP consecutive 256-element steps of each slot (k % 256 == 0: a
// step stays in one row) and reduces once per row it touched.
__device__ void gemv_span(Ring& ring, const wtype* xs, float* acc, int rows, int k, int warp,
                          int lane) {
  const long long elems = (long long)rows * k;
  for (long long off = 0; off < elems; off += SLOT_ELEMS) {
    const unsigned char* slot = ring.wait();
    const int steps = (int)(min((long long)SLOT_ELEMS, elems - off) / STEP);
    const int step0 = warp * STEPS_PER_WARP;
#ifdef NO_MATH   // probe (run 14): consumers only wait for each slot and free it
    if (false) {
#else
    if (step0 < steps) {
#endif
      const long long e0 = off + (long long)step0 * STEP;
      const int row0 = (int)(e0 / k);
      int col = (int)(e0 - (long long)row0 * k);
      uint4 wv[STEPS_PER_WARP], xv[STEPS_PER_WARP];
      int rel[STEPS_PER_WARP];
      int r = 0;
#pragma unroll
      for (int g = 0; g < STEPS_PER_WARP; ++g) {
        if (g > 0) {
          col += STEP;
          if (col >= k) { col -= k; ++r; }
        }
        rel[g] = step0 + g < steps ? r : MAX_ROWS_PER_WARP;   // past the span: no row
        wv[g] = *(const uint4*)(slot + (step0 + g) * STEP * 2 + lane * 16);
        xv[g] = *(const uint4*)(xs + col + lane * 8);
      }
      float sum[MAX_ROWS_PER_WARP] = {};
#pragma unroll
      for (int g = 0; g < STEPS_PER_WARP; ++g) {
        const wtype2* w2 = (const wtype2*)&wv[g];
        const wtype2* x2 = (const wtype2*)&xv[g];
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 a = to_float2(w2[j]), b = to_float2(x2[j]);
          s = fmaf(a.x, b.x, s);
          s = fmaf(a.y, b.y, s);
        }
#pragma unroll
        for (int q = 0; q < MAX_ROWS_PER_WARP; ++q) sum[q] += rel[g] == q ? s : 0.f;
      }
      const int touched = min(r + 1, rows - row0);   // warp-uniform
#pragma unroll
      for (int q = 0; q < MAX_ROWS_PER_WARP; ++q) {
        if (q < touched) {
          const float total = warp_sum(sum[q]);
          if (lane == 0) atomicAdd(&acc[row0 + q], total);
        }
      }
    }
    ring.release(lane);
  }
}

// xs = x (or rms_norm(x) * norm in the weight dtype, rounded as transformers rounds it). x is
// another block's write (read from L2), or in the first layer the embedding row. All of a
// thread's loads are issued before any is used: in a loop each would wait out L2's latency.
constexpr int IN_VECS = (MAX_K + CONSUMERS * 32 * 4 - 1) / (CONSUMERS * 32 * 4);
constexpr int MAX_HIDDEN = 8192;                  // a normalised input's width
constexpr int NORM_VECS = MAX_HIDDEN / (CONSUMERS * 32 * 4);
__device__ void load_input(wtype* xs, const float* x, const wtype* row, const wtype* norm, int k,
                           float eps, float* red) {
  float4 v[IN_VECS];
  uint2 nv[NORM_VECS];   // the norm's weights, loaded with x: after the reduction they cost 3 us
#pragma unroll
  for (int j = 0; j < IN_VECS; ++j) {
    const int i = (j * CONSUMERS * 32 + threadIdx.x) * 4;
    v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (norm && j < NORM_VECS && i < k) nv[j] = *(const uint2*)(norm + i);
    if (i < k) {
      if (row) {
        const uint2 raw = *(const uint2*)(row + i);
        const float2 a = to_float2(*(const wtype2*)&raw.x), b = to_float2(*(const wtype2*)&raw.y);
        v[j] = make_float4(a.x, a.y, b.x, b.y);
      } else {
        v[j] = __ldcg((const float4*)(x + i));
      }
    }
  }
  float rstd = 1.f;
  if (norm) {
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < IN_VECS; ++j)
      ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    ss = warp_sum(ss);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = ss;
    consumers_sync();
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < CONSUMERS; ++w) total += red[w];
    rstd = rsqrtf(total / k + eps);
  }
#pragma unroll
  for (int j = 0; j < IN_VECS; ++j) {
    const int i = (j * CONSUMERS * 32 + threadIdx.x) * 4;
    if (i >= k) continue;
    const float f[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
    if (!norm) {
#pragma unroll
      for (int e = 0; e < 4; ++e) xs[i + e] = to_w(f[e]);
    } else if (j < NORM_VECS) {
      const wtype* nw = (const wtype*)&nv[j];
#pragma unroll
      for (int e = 0; e < 4; ++e) xs[i + e] = to_w(from_w(to_w(f[e] * rstd)) * from_w(nw[e]));
    }
  }
}

// The grid barrier: every block has finished phase `done` - 1 (a monotonic counter).
__device__ __forceinline__ void grid_wait(int* counter, int done) {
  if (threadIdx.x == 0)
    while (ld_acquire(counter) < done) { }
  consumers_sync();
}
__device__ __forceinline__ int grid_arrive(int* counter) {
  consumers_sync();
  int old = 0;
  if (threadIdx.x == 0) {
    __threadfence();
    old = atomicAdd(counter, 1);
  }
  return old;
}

// A lane holds dims 8c..8c+7 of a head (c = lane % LANES_PER_TOKEN); their RoPE partners
// (d +- D/2) are in the lane LANES_PER_TOKEN / 2 away.
__device__ void rotate(float (&v)[8], int c, const float* rope) {
  // Rotate-half RoPE of one head; v holds this lane's dims, rounded to the cache dtype first.
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = from_w(to_w(v[j]));
  float partner[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) partner[j] = __shfl_xor_sync(0xffffffff, v[j], LANES_PER_TOKEN / 2);
  const bool low = c < LANES_PER_TOKEN / 2;
  const int half = (c % (LANES_PER_TOKEN / 2)) * 8;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float cs = rope[half + j], sn = rope[D / 2 + half + j];
    v[j] = low ? v[j] * cs - partner[j] * sn : v[j] * cs + partner[j] * sn;
  }
}

struct Softmax {   // a lane's running max (log2 units), sum and values per query head
  float m[GROUP], l[GROUP], acc[GROUP][8];
};

// AT_ONCE keys and values for this lane's token group: s = q . k over the token's lanes. All
// heads' and tokens' sums are formed before any is reduced: one head at a time, the
// reductions' latency was the loop's time (2.5 us a slot, PERF.md session 13).
#ifndef AT_ONCE
#define AT_ONCE 2
#endif
static_assert(TOKENS_PER_LANE % AT_ONCE == 0, "attend takes a lane's tokens AT_ONCE at a time");
__device__ __forceinline__ void attend(Softmax& st, const float (&q)[GROUP][8],
                                       const float (&k)[AT_ONCE][8],
                                       const float (&v)[AT_ONCE][8],
                                       const bool (&valid)[AT_ONCE]) {
  float s[AT_ONCE][GROUP];
#pragma unroll
  for (int t = 0; t < AT_ONCE; ++t)
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      s[t][g] = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) s[t][g] = fmaf(q[g][j], k[t][j], s[t][g]);
    }
#pragma unroll
  for (int o = 1; o < LANES_PER_TOKEN; o <<= 1)
#pragma unroll
    for (int t = 0; t < AT_ONCE; ++t)
#pragma unroll
      for (int g = 0; g < GROUP; ++g) s[t][g] += __shfl_xor_sync(0xffffffff, s[t][g], o);
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    float m_new = st.m[g];
#pragma unroll
    for (int t = 0; t < AT_ONCE; ++t) {
      s[t][g] = valid[t] ? s[t][g] : -INFINITY;
      m_new = fmaxf(m_new, s[t][g]);
    }
    const bool none = m_new == -INFINITY;   // nothing seen yet: keep the state
    const float alpha = none ? 1.f : exp2f(st.m[g] - m_new);
    float p[AT_ONCE];
    float l = st.l[g] * alpha;
#pragma unroll
    for (int t = 0; t < AT_ONCE; ++t) {
      p[t] = none ? 0.f : exp2f(s[t][g] - m_new);
      l += p[t];
    }
    st.l[g] = l;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float acc = st.acc[g][j] * alpha;
#pragma unroll
      for (int t = 0; t < AT_ONCE; ++t) acc = fmaf(p[t], v[t][j], acc);
      st.acc[g][j] = acc;
    }
    st.m[g] = m_new;
  }
}

__device__ __forceinline__ void load8(const wtype* p, float (&out)[8]) {
  const uint4 raw = *(const uint4*)p;
  const wtype2* w2 = (const wtype2*)&raw;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = to_float2(w2[j]);
    out[2 * j] = f.x;
    out[2 * j + 1] = f.y;
  }
}

// The attention phase of one block: its (kv head, split) item, then the head's merge if this
// block is the last of its head's splits to finish.
__device__ void attention(const Args& a, Ring& ring, int layer, const Item& item, int pos,
                          const float* rope, float* scratch, int* flag, int warp, int lane) {
  const int c = lane % LANES_PER_TOKEN, group_lane = lane / LANES_PER_TOKEN;
  const int q_base = item.kv_head * GROUP;
  const float qscale = a.scale * 1.4426950408889634f;   // exp2 units
  const bool has_new = item.start < item.end && item.end == pos + 1;
  // The block's rows of qkv (its queries, this token's key and value) are staged in shared
  // memory once: read by every warp from L2 they took 5 us (run 10).
  const int k_row = a.heads + item.kv_head, v_row = a.heads + a.kv_heads + item.kv_head;
  for (int i = threadIdx.x; i < (GROUP + 2) * D / 4; i += CONSUMERS * 32) {
    const int r = i / (D / 4);
    const int src = r < GROUP ? q_base + r : (r == GROUP ? k_row : v_row);
    ((float4*)scratch)[i] = __ldcg((const float4*)(a.qkv + src * D) + i % (D / 4));
  }
  consumers_sync();
  float q[GROUP][8], k_new[8], v_new[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int g = 0; g < GROUP; ++g) q[g][j] = scratch[g * D + c * 8 + j];
    k_new[j] = scratch[GROUP * D + c * 8 + j];
    v_new[j] = from_w(to_w(scratch[(GROUP + 1) * D + c * 8 + j]));
  }
  consumers_sync();   // the merge below reuses scratch
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    rotate(q[g], c, rope);
#pragma unroll
    for (int j = 0; j < 8; ++j) q[g][j] *= qscale;
  }
  rotate(k_new, c, rope);
#pragma unroll
  for (int j = 0; j < 8; ++j) k_new[j] = from_w(to_w(k_new[j]));
  if (has_new && warp == 0 && group_lane == 0) {   // this token's key and value into the cache
    const long long row = cache_row(a, layer, item.kv_head, pos) + c * 8;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      a.k_cache[row + j] = to_w(k_new[j]);
      a.v_cache[row + j] = to_w(v_new[j]);
    }
  }
  Softmax st;
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    st.m[g] = -INFINITY;
    st.l[g] = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) st.acc[g][j] = 0.f;
  }
#ifdef SKIP_ATTENTION   // probe (run 12): the keys' slots freed unread, no merge, attn stale
  for (int t0 = item.start; t0 < item.cached; t0 += TOKENS) {
    ring.wait();
    ring.release(lane);
  }
  return;
#endif
  for (int t0 = item.start; t0 < item.cached; t0 += TOKENS) {
    const unsigned char* slot = ring.wait();
    const int count = min(TOKENS, item.cached - t0);
#pragma unroll
    for (int i = 0; i < TOKENS_PER_LANE; i += AT_ONCE) {
      float k[AT_ONCE][8], v[AT_ONCE][8];
      bool valid[AT_ONCE];
#pragma unroll
      for (int u = 0; u < AT_ONCE; ++u) {
        const int t = (warp * TOKENS_PER_LANE + i + u) * TOKEN_GROUPS + group_lane;
        valid[u] = t < count;
        const int row = valid[u] ? t : 0;
        load8((const wtype*)slot + row * D + c * 8, k[u]);
        load8((const wtype*)(slot + SLOT_BYTES / 2) + row * D + c * 8, v[u]);
      }
      attend(st, q, k, v, valid);
    }
    ring.release(lane);
  }
  if (warp == 0) {
    float kk[AT_ONCE][8] = {}, vv[AT_ONCE][8] = {};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      kk[0][j] = k_new[j];
      vv[0][j] = v_new[j];
    }
    bool valid[AT_ONCE] = {};
    valid[0] = has_new && group_lane == 0;
    attend(st, q, kk, vv, valid);
  }
  // Merge the warp's token groups (lanes LANES_PER_TOKEN apart), then the warps in shared
  // memory.
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
#pragma unroll
    for (int o = LANES_PER_TOKEN; o < 32; o <<= 1) {
      const float m_o = __shfl_xor_sync(0xffffffff, st.m[g], o);
      const float l_o = __shfl_xor_sync(0xffffffff, st.l[g], o);
      const float m_new = fmaxf(st.m[g], m_o);
      const float wa = m_new == -INFINITY ? 0.f : exp2f(st.m[g] - m_new);
      const float wb = m_new == -INFINITY ? 0.f : exp2f(m_o - m_new);
      st.l[g] = st.l[g] * wa + l_o * wb;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float acc_o = __shfl_xor_sync(0xffffffff, st.acc[g][j], o);
        st.acc[g][j] = st.acc[g][j] * wa + acc_o * wb;
      }
      st.m[g] = m_new;
    }
    if (group_lane == 0) {
      float* out = scratch + (warp * GROUP + g) * (D + 2);
      if (c == 0) { out[D] = st.m[g]; out[D + 1] = st.l[g]; }
#pragma unroll
      for (int j = 0; j < 8; ++j) out[c * 8 + j] = st.acc[g][j];
    }
  }
  consumers_sync();
  float* part = a.partial + ((long long)item.kv_head * a.splits + item.split) * GROUP * (D + 2);
  for (int i = threadIdx.x; i < GROUP * (D + 2); i += CONSUMERS * 32) {
    const int g = i / (D + 2), d = i % (D + 2);
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < CONSUMERS; ++w) m = fmaxf(m, scratch[(w * GROUP + g) * (D + 2) + D]);
    float total = 0.f;
    for (int w = 0; w < CONSUMERS; ++w) {
      const float* s = scratch + (w * GROUP + g) * (D + 2);
      const float weight = m == -INFINITY ? 0.f : exp2f(s[D] - m);
      total += (d == D ? 0.f : s[d]) * weight;
    }
    part[i] = d == D ? m : total;   // d == D + 1 sums the warps' sums, like the values
  }
  // The head's splits: the last block to arrive merges them.
  const int old = grid_arrive(&a.counters[1 + item.kv_head]);
  if (threadIdx.x == 0) *flag = old == (layer + 1) * a.splits - 1;
  consumers_sync();
  if (!*flag) return;
  __threadfence();
  // Each thread merges its (head, dim) outputs over the splits with every load in flight at
  // once, 16 splits at a time: staged through shared memory the merge took 3.7 us, this way
  // 3.2 (8B, ctx 2048, runs 7 and 9).
  const float* head = a.partial + (long long)item.kv_head * a.splits * GROUP * (D + 2);
  for (int i = threadIdx.x; i < GROUP * D; i += CONSUMERS * 32) {
    const int g = i / D, d = i % D;
    float m = -INFINITY, l = 0.f, out = 0.f;
    for (int s0 = 0; s0 < a.splits; s0 += 16) {
      float ms[16], ls[16], vs[16];
#pragma unroll
      for (int u = 0; u < 16; ++u) {
        const float* p = head + ((s0 + u) * GROUP + g) * (D + 2);
        const bool in = s0 + u < a.splits;
        ms[u] = in ? __ldcg(p + D) : -INFINITY;
        ls[u] = in ? __ldcg(p + D + 1) : 0.f;
        vs[u] = in ? __ldcg(p + d) : 0.f;
      }
      float m_new = m;
#pragma unroll
      for (int u = 0; u < 16; ++u) m_new = fmaxf(m_new, ms[u]);
      const float scale = m == -INFINITY ? 0.f : exp2f(m - m_new);
      l *= scale;
      out *= scale;
#pragma unroll
      for (int u = 0; u < 16; ++u) {   // an empty split's max is -inf: weight 0
        const float w = ms[u] == -INFINITY ? 0.f : exp2f(ms[u] - m_new);
        l = fmaf(w, ls[u], l);
        out = fmaf(w, vs[u], out);
      }
      m = m_new;
    }
    a.attn[(q_base + g) * D + d] = out / l;
  }
}

__global__ void __launch_bounds__(THREADS, 1) persistent_layers(const Args a) {
  extern __shared__ __align__(128) unsigned char shared[];
  unsigned char* ring = shared;
  wtype* xs = (wtype*)(shared + SLOTS * SLOT_BYTES);
  float* acc = (float*)(xs + MAX_K);                       // 2 x MAX_ROWS
  float* red = acc + 2 * MAX_ROWS;                         // 64 floats of small talk
  float* rope = red + 64;                                  // cos, sin at pos [D / 2 each]
  uint64_t* full = (uint64_t*)(rope + D);
  uint64_t* empty = full + SLOTS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int block = blockIdx.x, blocks = gridDim.x;
  const int pos = a.pos[0];
  const int q_rows = a.heads * D, qkv_rows = (a.heads + 2 * a.kv_heads) * D;
  const Rows r_qkv = rows_of(qkv_rows, block, blocks), r_h = rows_of(a.hidden, block, blocks),
             r_i = rows_of(a.inter, block, blocks);
  const Item item = item_of(a, block, pos);
  if (threadIdx.x == 0) {
    for (int s = 0; s < SLOTS; ++s) { mbar_init(&full[s], 1); mbar_init(&empty[s], CONSUMERS); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == CONSUMERS) {   // the producer: every slot of the step, as far ahead as the ring
    if (lane != 0) return;
    Producer p{ring, full, empty};
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p.policy));
    for (int l = 0; l < a.num_layers; ++l) {
      const LayerWeights& w = a.layers[l];
      p.span(w.wqkv + (long long)r_qkv.lo * a.hidden, (long long)r_qkv.count * a.hidden);
      if (item.kv_head >= 0) p.keys_values(a, l, item);
      p.span(w.wo + (long long)r_h.lo * q_rows, (long long)r_h.count * q_rows);
      p.span(w.w_gate_up + (long long)r_i.lo * a.hidden, (long long)r_i.count * a.hidden);
      p.span(w.w_gate_up + (long long)(a.inter + r_i.lo) * a.hidden,
             (long long)r_i.count * a.hidden);
      p.span(w.w_down + (long long)r_h.lo * a.inter, (long long)r_h.count * a.inter);
    }
    return;
  }

  Ring rg{ring, full, empty};
  int* grid = a.counters;
  for (int i = threadIdx.x; i < D; i += CONSUMERS * 32)   // read before the first barrier
    rope[i] = i < D / 2 ? a.cos[(long long)pos * (D / 2) + i]
                        : a.sin[(long long)pos * (D / 2) + i - D / 2];
  int phase = 0;
  const wtype* embedding = a.embed + a.token[0] * a.hidden;
  for (int l = 0; l < a.num_layers; ++l) {
    const LayerWeights& w = a.layers[l];
    const wtype* first = l == 0 ? embedding : nullptr;   // the residual before layer 0
    // qkv
    if (phase) grid_wait(grid, phase * blocks);
    // A thread's own output row's addend (bias, residual) is loaded before the GEMV: in the
    // epilogue its latency was the phase's tail (rows per block <= the consumer threads).
    const int row = threadIdx.x;
    float addend = row < r_qkv.count && w.bqkv ? from_w(w.bqkv[r_qkv.lo + row]) : 0.f;
    load_input(xs, a.h, first, w.attn_norm, a.hidden, a.eps, red);
    if (row < r_qkv.count) acc[row] = 0.f;
    consumers_sync();
    gemv_span(rg, xs, acc, r_qkv.count, a.hidden, warp, lane);
    consumers_sync();
    if (row < r_qkv.count) a.qkv[r_qkv.lo + row] = acc[row] + addend;
    grid_arrive(grid);
    // attn
    grid_wait(grid, ++phase * blocks);
    if (item.kv_head >= 0)
      attention(a, rg, l, item, pos, rope, (float*)xs, (int*)(red + 32), warp, lane);
    grid_arrive(grid);
    // o
    grid_wait(grid, ++phase * blocks);
    if (row < r_h.count)
      addend = first ? from_w(first[r_h.lo + row]) : __ldcg(a.h + r_h.lo + row);
    load_input(xs, a.attn, nullptr, nullptr, q_rows, 0.f, red);
    if (row < r_h.count) acc[row] = 0.f;
    consumers_sync();
    gemv_span(rg, xs, acc, r_h.count, q_rows, warp, lane);
    consumers_sync();
    if (row < r_h.count) a.h[r_h.lo + row] = addend + acc[row];
    grid_arrive(grid);
    // mlp
    grid_wait(grid, ++phase * blocks);
#ifdef DELAY_NS   // probe (run 12): a stall of DELAY_NS here: does the ring absorb it?
    if (threadIdx.x == 0) {
      unsigned long long t0, t;
      asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t0));
      do { asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); } while (t - t0 < DELAY_NS);
    }
    consumers_sync();
#endif
    load_input(xs, a.h, nullptr, w.mlp_norm, a.hidden, a.eps, red);
    if (row < r_i.count) acc[row] = acc[MAX_ROWS + row] = 0.f;
    consumers_sync();
    gemv_span(rg, xs, acc, r_i.count, a.hidden, warp, lane);
    gemv_span(rg, xs, acc + MAX_ROWS, r_i.count, a.hidden, warp, lane);
    consumers_sync();
    if (row < r_i.count) {
      const float g = acc[row];
      a.mlp[r_i.lo + row] = g / (1.f + __expf(-g)) * acc[MAX_ROWS + row];
    }
    grid_arrive(grid);
    // down
    grid_wait(grid, ++phase * blocks);
    if (row < r_h.count) addend = __ldcg(a.h + r_h.lo + row);   // o's write, this block's
    load_input(xs, a.mlp, nullptr, nullptr, a.inter, 0.f, red);
    if (row < r_h.count) acc[row] = 0.f;
    consumers_sync();
    gemv_span(rg, xs, acc, r_h.count, a.inter, warp, lane);
    consumers_sync();
    if (row < r_h.count) a.h[r_h.lo + row] = addend + acc[row];
    const int old = grid_arrive(grid);
    ++phase;
    // The last block of the step zeroes the counters for the next launch: every other block
    // has passed its last wait by the time it arrives here.
    if (l == a.num_layers - 1 && threadIdx.x == 0 && old == phase * blocks - 1) {
      for (int i = 0; i <= a.kv_heads; ++i) a.counters[i] = 0;
      __threadfence();
    }
  }
}

extern "C" int physinf_layers_shared_bytes() { return SHARED_BYTES; }

extern "C" int physinf_layers_launch(const Args* args, int blocks, void* stream) {
  cudaError_t err = cudaFuncSetAttribute(
      persistent_layers, cudaFuncAttributeMaxDynamicSharedMemorySize, SHARED_BYTES);
  if (err != cudaSuccess) return (int)err;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(THREADS);
  config.dynamicSmemBytes = SHARED_BYTES;
  config.stream = (cudaStream_t)stream;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeCooperative;   // every block resident: the grid barriers
  attribute.val.cooperative = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return (int)cudaLaunchKernelEx(&config, persistent_layers, *args);
}

extern "C" const char* physinf_cuda_error(int code) {
  return cudaGetErrorString((cudaError_t)code);
}
