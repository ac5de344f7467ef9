"""benchmarks/profile_step.py: the profiler's kernels told apart by kind."""

from benchmark_scripts import benchmark_script

profile_step = benchmark_script('profile_step')


def test_kernels_are_told_apart_by_kind():
    kind = profile_step.kernel_kind
    assert kind('sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64') == 'matmul'
    assert kind('nvjet_tst_192x192_64x3_2x1_v_bz_coopB_TNN') == 'matmul'
    assert kind('void gemv2T_kernel_val<int, int, __nv_bfloat16, float, 128, 16>') == 'matmul'
    assert kind('void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>') \
        == 'attention'
    assert kind('_rows_q4_kernel') == kind('_q4_gemv_kernel') == kind('_attn_split_kernel') \
        == 'triton'
    assert kind('void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add'
                '<float>>') == 'other'
    assert kind('void at::native::reduce_kernel<512, 1>') == 'other'
