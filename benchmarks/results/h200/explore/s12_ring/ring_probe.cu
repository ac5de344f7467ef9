// Probe: does a persistent GEMV chain whose weights stream through a shared-memory ring, filled
// by one producer warp with bulk copies (TMA, cp.async.bulk) and mbarriers, keep HBM busy
// across its grid barriers? Session 11's persistent step (v15) loaded weights into registers and
// lost 7-8 us at each barrier; here the producer runs ahead into the next phase's weights while
// the consumers wait, because weights never depend on the activations.
//
// One block per SM, launched cooperatively. A chain of phases, each y = W x (bf16 weights, fp32
// out; gate_up phases hold [gate; up] and write silu(gate) * up). A phase's x is an earlier
// phase's y: a grid barrier (a monotonic counter) orders them. Each block owns a contiguous
// range of a phase's rows, so its weights are one or two contiguous spans, cut into slots.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#ifndef SLOTS
#define SLOTS 11
#endif
#ifndef SLOT_BYTES
#define SLOT_BYTES 16384
#endif
constexpr int CONSUMERS = 8;                      // consumer warps; warp CONSUMERS produces
constexpr int THREADS = (CONSUMERS + 1) * 32;
constexpr int MAX_K = 14336;
constexpr int MAX_ROWS = 256;                     // per block and span (gate_up: two spans)
constexpr int STEP = 256;                         // elements a warp takes per step (512 B)

struct Phase {
  const __nv_bfloat16* w;   // [n (x2 for gate_up), k], row-major
  const float* x;           // [k]
  float* y;                 // [n]
  int n, k, gate_up;
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

struct Rows { int lo, count; };
__device__ __forceinline__ Rows rows_of(const Phase& ph, int block, int blocks) {
  int lo = (int)((long long)ph.n * block / blocks);
  int hi = (int)((long long)ph.n * (block + 1) / blocks);
  return {lo, hi - lo};
}

__global__ void __launch_bounds__(THREADS, 1)
ring_chain(const Phase* __restrict__ phases, int num_phases, int* counter) {
  extern __shared__ __align__(128) unsigned char shared[];
  unsigned char* ring = shared;                                         // SLOTS x SLOT_BYTES
  __nv_bfloat16* xs = (__nv_bfloat16*)(shared + SLOTS * SLOT_BYTES);    // the phase's input
  float* acc = (float*)(xs + MAX_K);                                    // 2 x MAX_ROWS
  uint64_t* full = (uint64_t*)(acc + 2 * MAX_ROWS);
  uint64_t* empty = full + SLOTS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int block = blockIdx.x, blocks = gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < SLOTS; ++s) { mbar_init(&full[s], 1); mbar_init(&empty[s], CONSUMERS); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == CONSUMERS) {   // the producer: every slot of every phase, as far ahead as the ring
    if (lane != 0) return;
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    uint32_t it = 0;
    for (int p = 0; p < num_phases; ++p) {
      const Phase ph = phases[p];
      const Rows r = rows_of(ph, block, blocks);
      const long long span = (long long)r.count * ph.k * 2;
      for (int s = 0; s < (ph.gate_up ? 2 : 1); ++s) {
        const unsigned char* src = (const unsigned char*)(ph.w + (long long)(r.lo + s * ph.n) * ph.k);
        for (long long off = 0; off < span; off += SLOT_BYTES, ++it) {
          const int slot = it % SLOTS;
          if (it >= SLOTS) mbar_wait(&empty[slot], ((it / SLOTS) - 1) & 1);
          const uint32_t bytes = (uint32_t)min((long long)SLOT_BYTES, span - off);
          mbar_expect(&full[slot], bytes);
          bulk_load(ring + slot * SLOT_BYTES, src + off, bytes, &full[slot], policy);
        }
      }
    }
    return;
  }

  uint32_t it = 0;
  for (int p = 0; p < num_phases; ++p) {
    const Phase ph = phases[p];
    const Rows r = rows_of(ph, block, blocks);
    if (p > 0) {   // phase p reads what phase p - 1 wrote, on every SM
      if (threadIdx.x == 0)
        while (ld_acquire(counter) < p * blocks) { }
      consumers_sync();
    }
    for (int i = threadIdx.x; i < ph.k; i += CONSUMERS * 32)
      xs[i] = __float2bfloat16_rn(__ldcg(ph.x + i));
    const int spans = ph.gate_up ? 2 : 1;
    for (int i = threadIdx.x; i < spans * MAX_ROWS; i += CONSUMERS * 32) acc[i] = 0.f;
    consumers_sync();
    const long long span = (long long)r.count * ph.k * 2;
    for (int s = 0; s < spans; ++s) {
      for (long long off = 0; off < span; off += SLOT_BYTES, ++it) {
        const int slot = it % SLOTS;
        mbar_wait(&full[slot], (it / SLOTS) & 1);
        const int steps = (int)(min((long long)SLOT_BYTES, span - off) / (STEP * 2));
        const int first = (int)(off / 2);   // the slot's first element in the span
#ifndef NO_MATH   // NO_MATH: the consumers only wait for each slot and free it (a TMA-only bound)
#ifdef STEP_REDUCE   // run 1: a reduction after every 512-byte step
        for (int step = warp; step < steps; step += CONSUMERS) {
          const int e = first + step * STEP + lane * 8;
          const int row = e / ph.k, col = e % ph.k;
          const uint4 wv = *(const uint4*)(ring + slot * SLOT_BYTES + step * STEP * 2 + lane * 16);
          const uint4 xv = *(const uint4*)(xs + col);
          const __nv_bfloat162* w2 = (const __nv_bfloat162*)&wv;
          const __nv_bfloat162* x2 = (const __nv_bfloat162*)&xv;
          float sum = 0.f;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float2 a = __bfloat1622float2(w2[j]), b = __bfloat1622float2(x2[j]);
            sum = fmaf(a.x, b.x, sum);
            sum = fmaf(a.y, b.y, sum);
          }
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
          if (lane == 0) atomicAdd(&acc[s * MAX_ROWS + row], sum);
        }
#else   // a warp takes GROUP consecutive steps (one row: K is a multiple of GROUP * STEP),
        // all its loads first, one reduction
        constexpr int GROUP = SLOT_BYTES / (STEP * 2) / CONSUMERS;
        const int step0 = warp * GROUP;
        if (step0 < steps) {
          const int e0 = first + step0 * STEP;
          const int row = e0 / ph.k, col0 = e0 % ph.k;
          uint4 wv[GROUP], xv[GROUP];
#pragma unroll
          for (int g = 0; g < GROUP; ++g) {
            wv[g] = *(const uint4*)(ring + slot * SLOT_BYTES + (step0 + g) * STEP * 2 + lane * 16);
            xv[g] = *(const uint4*)(xs + col0 + g * STEP + lane * 8);
          }
          float sum = 0.f;
#pragma unroll
          for (int g = 0; g < GROUP; ++g) {
            const __nv_bfloat162* w2 = (const __nv_bfloat162*)&wv[g];
            const __nv_bfloat162* x2 = (const __nv_bfloat162*)&xv[g];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const float2 a = __bfloat1622float2(w2[j]), b = __bfloat1622float2(x2[j]);
              sum = fmaf(a.x, b.x, sum);
              sum = fmaf(a.y, b.y, sum);
            }
          }
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
          if (lane == 0) atomicAdd(&acc[s * MAX_ROWS + row], sum);
        }
#endif
#else
        (void)steps;
        (void)first;
#endif
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[slot]);
      }
    }
    consumers_sync();
    for (int i = threadIdx.x; i < r.count; i += CONSUMERS * 32) {
      float v = acc[i];
      if (ph.gate_up) v = v / (1.f + __expf(-v)) * acc[MAX_ROWS + i];
      ph.y[r.lo + i] = v;
    }
    consumers_sync();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(counter, 1);
    }
  }
}

extern "C" int ring_launch(const void* phases, int num_phases, int* counter, int blocks,
                           void* stream) {
  const int bytes = SLOTS * SLOT_BYTES + MAX_K * 2 + 2 * MAX_ROWS * 4 + 2 * SLOTS * 8;
  cudaError_t err = cudaFuncSetAttribute(ring_chain, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         bytes);
  if (err != cudaSuccess) return (int)err;
  err = cudaMemsetAsync(counter, 0, sizeof(int), (cudaStream_t)stream);
  if (err != cudaSuccess) return (int)err;
  void* args[] = {(void*)&phases, (void*)&num_phases, (void*)&counter};
  return (int)cudaLaunchCooperativeKernel((void*)ring_chain, blocks, THREADS, args, bytes,
                                          (cudaStream_t)stream);
}

extern "C" int ring_smem_bytes() {
  return SLOTS * SLOT_BYTES + MAX_K * 2 + 2 * MAX_ROWS * 4 + 2 * SLOTS * 8;
}
extern "C" const char* ring_error(int code) { return cudaGetErrorString((cudaError_t)code); }
