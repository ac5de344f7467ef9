"""The Triton kernels against ops_torch: on a GPU natively, elsewhere in Triton's interpreter."""

from kernel_device import DEVICE
from physinf_ros.engine import sampling
from physinf_ros.engine.kernels import ops_torch, ops_triton
from physinf_ros.engine.kernels.config import KernelConfig
from physinf_ros.engine.kernels.shapes import AttentionConfig, GemvConfig
from physinf_ros.engine.model import families, llama
from physinf_ros.engine.model.config import ModelConfig
from physinf_ros.engine.model.llama import (decode_one_token, from_state_dict, fuse_gate_up,
                                            gate_up_block, KVCache, rms_norm, rope_tables,
                                            synthetic_state_dict)
from poisoned_scratch import poison_scratch
import pytest
from tiny_models import tiny_config, twin_caches
import torch


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def rand(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, device=DEVICE) * scale).to(dtype)


# The torch reference rounds each GEMV output and the SiLU product to bf16 (as transformers
# does); the kernels keep float32, so bf16 cases agree to a few bf16 roundings (2^-8 each) and
# float32 ones far closer. A wrong index or a missed tile shows as an error of order one.
TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('n, k', [(96, 200), (64, 64)])
def test_rms_matvec(dtype, n, k):
    x, g, w, b = rand(k), rand(k, dtype=dtype), rand(n, k, dtype=dtype), rand(n, dtype=dtype)
    for bias in (None, b):
        out = ops_triton.rms_matvec(x, g, w, bias, 1e-6)
        assert rel(out, ops_torch.rms_matvec(x, g, w, bias, 1e-6)) < TOL[dtype]


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('i', [72, 36, 35])   # gate/up blocks of 8, 4 and 1 rows
def test_rms_gate_up_silu(dtype, i):
    x, g, w = rand(200), rand(200, dtype=dtype), rand(2 * i, 200, dtype=dtype, scale=0.1)
    out = ops_triton.rms_gate_up_silu(x, g, w, 1e-5)
    assert rel(out, ops_torch.rms_gate_up_silu(x, g, w, 1e-5)) < TOL[dtype]


@pytest.mark.parametrize('i, block', [(72, 8), (36, 4), (35, 1)])
def test_gate_up_layout_keeps_gate_and_up_apart(i, block):
    # Both ops read fuse_gate_up's blocks as gate and up: a swapped or shifted row would give
    # an error of order one (the inputs are float32, so the ops agree to float32 sums).
    x, g, gate, up = rand(200), rand(200), rand(i, 200, scale=0.1), rand(i, 200, scale=0.1)
    assert gate_up_block(i) == block
    normed = rms_norm(x, g, 1e-5)
    expected = torch.nn.functional.silu(gate @ normed) * (up @ normed)
    w = fuse_gate_up(gate, up)
    assert torch.equal(w[block:2 * block], up[:block])
    for ops in (ops_triton, ops_torch):
        assert rel(ops.rms_gate_up_silu(x, g, w, 1e-5), expected) < 1e-5


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_matvec_add_accumulates_into_the_residual(dtype):
    x, a, w = rand(80), rand(300), rand(80, 300, dtype=dtype)
    expected = x.clone()
    ops_torch.matvec_add(expected, a, w)
    ops_triton.matvec_add(x, a, w)
    assert rel(x, expected) < TOL[dtype]


@pytest.mark.parametrize('ahead', [2, 3])
def test_gemvs_with_more_tiles_ahead_of_the_wait_match_the_torch_path(ahead):
    # Tiles before the wait and in flight shift by `ahead`: every tile must still be summed
    # once, also where a split holds fewer tiles than that (K of 3 tiles in 2 splits: 2 and 1).
    x, g, a = rand(192), rand(192, dtype=torch.bfloat16), rand(40)
    w = rand(40, 192, dtype=torch.bfloat16)
    config = KernelConfig()
    for kind in ('rms_matvec', 'matvec_add'):
        config = config.with_gemv(kind, 40, 192, GemvConfig(8, 64, 2, 4, ahead))
    out = ops_triton.rms_matvec(x, g, w, None, 1e-6, config=config)
    assert rel(out, ops_torch.rms_matvec(x, g, w, None, 1e-6)) < TOL[torch.bfloat16]
    expected, residual = a.clone(), a.clone()
    ops_torch.matvec_add(expected, x, w)
    ops_triton.matvec_add(residual, x, w, config=config)
    assert rel(residual, expected) < TOL[torch.bfloat16]
    # Gate/up's two halves each keep their own tiles in flight: 48 outputs in 8-row blocks.
    gate, up = rand(48, 192, dtype=torch.bfloat16), rand(48, 192, dtype=torch.bfloat16)
    w_gate_up = fuse_gate_up(gate, up)
    config = config.with_gemv('gate_up', 48, 192, GemvConfig(8, 64, 1, 4, ahead))
    for op in ('rms_gate_up_silu', 'rms_gate_up_gelu'):
        out = getattr(ops_triton, op)(x, g, w_gate_up, 1e-6, config=config)
        assert rel(out, getattr(ops_torch, op)(x, g, w_gate_up, 1e-6)) < TOL[torch.bfloat16]
    with pytest.raises(ValueError, match='tiles_ahead'):
        GemvConfig(tiles_ahead=4)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('heads, kv_heads', [(4, 2), (9, 3), (7, 1)])
def test_rope_cache_and_attention(dtype, heads, kv_heads):
    dim, max_context = 32, 300
    config = ModelConfig('llama', 10, heads * dim, 8, 1, heads, kv_heads, dim, 1e-5, 10000.0)
    cos, sin = rope_tables(config, max_context, DEVICE)
    caches = twin_caches(config, max_context, DEVICE, dtype)
    for length in (1, 17, 250):   # the new key in the only split, a middle one, the last
        pos = torch.tensor([length - 1], dtype=torch.int32, device=DEVICE)
        qkv = rand((heads + 2 * kv_heads) * dim)
        ref = ops_torch.rope_attention(qkv, pos, cos, sin, caches[0].k[0], caches[0].v[0],
                                       heads)
        out = ops_triton.rope_attention(qkv, pos, cos, sin, caches[1].k[0], caches[1].v[0], heads)
        assert rel(out, ref) < TOL[dtype]
        # bf16: Triton's interpreter rounds to bf16 by truncation, torch to nearest: one ulp.
        assert rel(caches[1].k, caches[0].k) < TOL[dtype] / 3
        assert rel(caches[1].v, caches[0].v) < TOL[dtype] / 3


def test_attention_under_a_register_cap_matches_the_uncapped_kernel():
    # The cap is a compile directive (kernels.yaml's Llama-3.2-1B row): natively the capped
    # kernel must give the uncapped one's result; the interpreter checks it is launched.
    heads, kv_heads, dim, max_context = 8, 2, 64, 300
    config = ModelConfig('llama', 10, heads * dim, 8, 1, heads, kv_heads, dim, 1e-5, 10000.0)
    cos, sin = rope_tables(config, max_context, DEVICE)
    capped = KernelConfig().with_flag('attention.max_registers', '168')
    caches = [KVCache.allocate(config, max_context, DEVICE, torch.bfloat16) for _ in range(2)]
    caches[0].k.copy_(rand(*caches[0].k.shape, dtype=torch.bfloat16))
    caches[0].v.copy_(rand(*caches[0].v.shape, dtype=torch.bfloat16))
    caches[1].k.copy_(caches[0].k)
    caches[1].v.copy_(caches[0].v)
    for length in (17, 250):
        pos = torch.tensor([length - 1], dtype=torch.int32, device=DEVICE)
        qkv = rand((heads + 2 * kv_heads) * dim)
        out = ops_triton.rope_attention(qkv, pos, cos, sin, caches[0].k[0], caches[0].v[0], heads)
        out_capped = ops_triton.rope_attention(qkv, pos, cos, sin, caches[1].k[0],
                                               caches[1].v[0], heads, capped)
        assert rel(out_capped, out) < 1e-6
        assert torch.equal(caches[1].k, caches[0].k) and torch.equal(caches[1].v, caches[0].v)


def test_attention_merges_every_split_when_few_hold_keys(monkeypatch):
    # Splits past the keys store partials of no weight; the merge reads all of them. Scratch
    # memory is poisoned with NaN so that a partial left unwritten would show.
    heads, kv_heads, dim, max_context = 4, 2, 32, 64
    config = ModelConfig('llama', 10, heads * dim, 8, 1, heads, kv_heads, dim, 1e-5, 10000.0)
    cos, sin = rope_tables(config, max_context, DEVICE)
    cache = KVCache.allocate(config, max_context, DEVICE, torch.float32)
    cache.k.copy_(rand(*cache.k.shape))
    cache.v.copy_(rand(*cache.v.shape))
    pos = torch.tensor([2], dtype=torch.int32, device=DEVICE)   # one split of keys of several
    qkv = rand((heads + 2 * kv_heads) * dim)
    ref = ops_torch.rope_attention(qkv, pos, cos, sin, cache.k[0].clone(), cache.v[0].clone(),
                                   heads)
    poison_scratch(monkeypatch)
    out = ops_triton.rope_attention(qkv, pos, cos, sin, cache.k[0], cache.v[0], heads)
    assert rel(out, ref) < TOL[torch.float32]


def test_whole_step_matches_the_torch_path():
    config = ModelConfig.from_hf(tiny_config('qwen2.5-7b'))
    weights = from_state_dict(config, synthetic_state_dict(config, DEVICE, torch.float32),
                              DEVICE, torch.float32)
    cos, sin = rope_tables(config, 64, DEVICE)
    caches = [KVCache.allocate(config, 64, DEVICE, torch.float32) for _ in range(2)]
    prompt = torch.arange(3, 12, device=DEVICE)
    for cache in caches:
        families.prefill(llama, weights, cache, prompt, cos, sin)
    token = torch.tensor([5], device=DEVICE)
    ops = ops_triton.KernelOps(KernelConfig())   # as a decoder holds them
    for step in range(4):
        pos = torch.tensor([len(prompt) + step], dtype=torch.int32, device=DEVICE)
        ref = decode_one_token(weights, caches[0], token, pos, cos, sin, ops_torch)
        out = decode_one_token(weights, caches[1], token, pos, cos, sin, ops)
        assert rel(out, ref) < 1e-5
        token = torch.argmax(ref).view(1)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_greedy_head_takes_the_argmax_in_the_gemv(dtype):
    x, g = rand(96), rand(96, dtype=dtype)
    w = rand(1000, 96, dtype=dtype)
    logits = torch.empty(1000, device=DEVICE)
    token = torch.zeros(1, dtype=torch.long, device=DEVICE)
    pos = torch.tensor([41], dtype=torch.int32, device=DEVICE)
    slot = ops_triton.argmax_slot(DEVICE)
    ops_triton.greedy_head(x, g, w, 1e-5, logits, token, pos, slot)
    assert rel(logits, ops_torch.rms_matvec(x, g, w, None, 1e-5)) < TOL[dtype]
    assert token.item() == torch.argmax(logits).item()
    assert pos.item() == 42
    # With a host row per position in flight, the token also goes to the row of its position
    # (41 % 2 before this step advanced it), as the torch twin writes it.
    host_out, expected = (torch.zeros(2, 2, dtype=torch.long, pin_memory=DEVICE.type == 'cuda')
                          for _ in range(2))
    pos.fill_(41)
    ops_triton.greedy_head(x, g, w, 1e-5, logits, token, pos, slot, host_out=host_out)
    if DEVICE.type == 'cuda':   # the row is host memory: read once the step is done
        torch.cuda.synchronize()
    ops_torch.step_end(token, pos - 1, expected)
    assert host_out[1, 0].item() == token.item() and host_out[0, 0].item() == 0
    assert torch.equal(host_out[:, 0], expected[:, 0]) and pos.item() == 42
    # A tie: a later row equal to the best one; the lower index wins, as with torch.argmax.
    best = torch.argmax(logits).item()
    w[999 if best < 999 else 0] = w[best]
    ops_triton.greedy_head(x, g, w, 1e-5, logits, token, pos, slot)
    assert token.item() == min(best, 0 if best == 999 else best) and pos.item() == 43
    # The slot is left ready for the next step: a best logit lower than the last step's wins.
    other = (best + 500) % 1000
    lower = w * 0.1
    lower[other] = w[best] * 0.5
    ops_triton.greedy_head(x, g, lower, 1e-5, logits, token, pos, slot)
    assert token.item() == other and pos.item() == 44


def test_the_masked_greedy_end_takes_the_best_allowed_logit():
    n = 3000   # three programs, the last one partial
    logits = rand(n)
    words = (n + 31) // 32
    bits = torch.randint(-2 ** 31, 2 ** 31, (words,), dtype=torch.int32,
                         generator=torch.Generator().manual_seed(5)).to(DEVICE)
    token = torch.zeros(1, dtype=torch.long, device=DEVICE)
    pos = torch.tensor([41], dtype=torch.int32, device=DEVICE)
    host_out = torch.zeros(2, 2, dtype=torch.long, pin_memory=DEVICE.type == 'cuda')
    ops = ops_triton.KernelOps(ops_triton.DEFAULT_CONFIG)
    expected = torch.zeros(1, dtype=torch.long, device=DEVICE)
    for case in ('random', 'best disallowed', 'tie', 'one allowed', 'none allowed'):
        if case == 'best disallowed':
            best = int(torch.argmax(logits))
            word = int(bits[best // 32]) & ~(1 << (best % 32))   # the winner masked off
            bits[best // 32] = word - (1 << 32) if word >= 1 << 31 else word
        elif case == 'tie':   # the best allowed logit again at a later allowed row
            best = int(torch.argmax(sampling.mask_logits(logits, bits)))
            later = next(i for i in range(n - 1, best, -1) if bits[i // 32] >> (i % 32) & 1)
            logits[later] = logits[best]
        elif case == 'one allowed':
            bits.zero_()
            bits[n // 32 - 1] = 1 << 7
        elif case == 'none allowed':
            bits.zero_()
        ops.masked_greedy_end(logits, bits, token, pos, host_out)
        if DEVICE.type == 'cuda':
            torch.cuda.synchronize()
        ops_torch.masked_greedy_end(logits, bits, expected, pos - 1, host_out[:, :1].clone())
        assert token.item() == expected.item(), case
        assert host_out[(pos.item() - 1) % 2, 0].item() == token.item(), case
    assert pos.item() == 46
    assert token.item() == 0   # nothing allowed: row 0, as torch.argmax of all -inf


def test_the_embedding_kernel_gives_the_tokens_row_as_float32():
    table = rand(50, 300, dtype=torch.bfloat16)[:, :200]   # rows strided as in a wider table
    token = torch.tensor([37], device=DEVICE)
    out = ops_triton.embed(table, token)
    assert out.dtype == torch.float32 and torch.equal(out, ops_torch.embed(table, token))
    assert torch.equal(out, table[37].float())
    with pytest.raises(ValueError, match='contiguous'):
        ops_triton.embed(table.t(), token)


@pytest.mark.gpu
def test_a_step_timed_by_its_kernels_spans_what_runs_between_them():
    # embed stamps the step's start; the last kernel (step_end, greedy_head's finish) writes
    # the token and the ns since then into the pinned host row of the position: at least a
    # spin queued between them, at most the events that bracket everything. The two clocks
    # differ (the GPU's timer, the events' timestamps), so each bound allows 2 us, about four
    # of the events' half-microsecond resolution.
    table, token = rand(50, 256, dtype=torch.bfloat16), torch.tensor([3], device=DEVICE)
    x, g, w = rand(256), rand(256, dtype=torch.bfloat16), rand(1000, 256, dtype=torch.bfloat16)
    clock, logits = ops_triton.step_clock(DEVICE), torch.empty(1000, device=DEVICE)
    pos = torch.tensor([5], dtype=torch.int32, device=DEVICE)
    host_out = torch.zeros(2, 2, dtype=torch.long, pin_memory=True)
    for end in ('step_end', 'greedy_head'):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        events[0].record()
        ops_triton.embed(table, token, clock)
        events[1].record()
        torch.cuda._sleep(1_000_000)   # about 0.5 ms
        events[2].record()
        row = pos.item() % 2
        if end == 'step_end':
            ops_triton.step_end(token, pos, host_out, clock)
        else:
            ops_triton.greedy_head(x, g, w, 1e-5, logits, token, pos,
                                   ops_triton.argmax_slot(DEVICE), clock=clock, host_out=host_out)
        events[3].record()
        events[3].synchronize()   # the host reads the row once the event after the step is done
        spin_ms, whole_ms = events[1].elapsed_time(events[2]), events[0].elapsed_time(events[3])
        assert host_out[row, 0].item() == token.item()
        assert spin_ms - 0.002 <= host_out[row, 1].item() / 1e6 <= whole_ms + 0.002, (
            end, spin_ms, whole_ms)


def test_deterministic_kernels_never_split_k():
    # Split K's parts meet in float atomics in the order they finish; deterministic kernels
    # take every tuned shape unsplit, the step's, the rows' and the CUDA 4-bit kernels' alike.
    rows = [{'kind': kind, 'n': 4096, 'k': 4096, 'block_n': 16, 'block_k': 512, 'split_k': 4,
             'num_warps': 8} for kind in ('matvec_add', 'rows_matvec_add', 'matvec_add_q4',
                                          'matvec_add_q4cuda')]
    tuned = KernelConfig().with_tuning({'gemv': rows})
    fixed = tuned.with_flag('DETERMINISTIC', '1')
    assert fixed.deterministic and not tuned.deterministic
    for kind in ('matvec_add', 'rows_matvec_add', 'matvec_add_q4'):
        assert tuned.gemv(kind, 4096, 4096).split_k > 1
        unsplit = fixed.gemv(kind, 4096, 4096)
        assert unsplit.split_k == 1
        assert unsplit.block_n == tuned.gemv(kind, 4096, 4096).block_n   # only the split goes
    assert tuned.q4_cuda_shape('matvec_add', 4096, 4096, None, True, None).split_k == 4
    assert fixed.q4_cuda_shape('matvec_add', 4096, 4096, None, True, None).split_k == 1
    assert fixed.facts()['deterministic'] is True


def test_an_ab_builds_one_configuration_per_arm():
    base = KernelConfig().with_tuning({
        'attention': {'splits': 16},
        'gemv': [{'kind': 'rms_matvec', 'n': 6144, 'k': 4096, 'block_n': 4, 'block_k': 1024,
                  'split_k': 1, 'num_warps': 8}]})
    arm = base.with_flag('EVICT_FIRST', '0').with_flag('ATTENTION.min_chunk', '256')
    assert base.evict_first and not arm.evict_first
    assert arm.attention == AttentionConfig(16, 256, 64, 4)
    assert base.attention.min_chunk == 128 and KernelConfig().attention.splits == 32
    assert arm.tuned == base.tuned and not KernelConfig().tuned
    assert base.with_flag('half2', '0').half2 is False
    for name in ('PREFETCH', 'ATTENTION.nothing', 'tuned'):
        with pytest.raises(ValueError, match='not a kernel switch'):
            base.with_flag(name, '1')
    with pytest.raises(TypeError):
        base.tuned['rms_matvec', 1, 1] = GemvConfig()   # frozen: build another


def test_attention_shapes_override_the_gpus_attention_shape_per_model_shape():
    base = KernelConfig().with_tuning({
        'attention': {'splits': 16},
        'attention_shapes': [{'kv_heads': 2, 'head_dim': 128, 'min_chunk': 64}]})
    entry = AttentionConfig(splits=16)
    assert base.attention_for(8, 128) == entry and base.attention_for(2, 64) == entry
    # A row changes only what it lists; the rest is the entry's attention shape.
    assert base.attention_for(2, 128) == AttentionConfig(splits=16, min_chunk=64)
    # An A/B's attention flag holds for every model shape, listed or not.
    arm = base.with_flag('ATTENTION.num_warps', '8')
    assert arm.attention_for(2, 128).num_warps == 8 and arm.attention_for(8, 128).num_warps == 8
    assert base.attention_for(2, 128).num_warps == 4
    assert base.facts()['attention_shapes'] == [
        {'kv_heads': 2, 'head_dim': 128, 'splits': 16, 'min_chunk': 64, 'block_t': 64,
         'num_warps': 4, 'num_stages': 3, 'max_registers': 0, 'cuda': False}]
    assert not KernelConfig().attention_shapes
    with pytest.raises(TypeError):
        base.attention_shapes[8, 64] = entry   # frozen: build another


def test_attention_shapes_the_kernels_cannot_tile_are_refused_with_the_reason():
    for flag, value in (('attention.splits', '48'), ('attention.block_t', '96'),
                        ('attention.splits', '0')):
        with pytest.raises(ValueError, match='must be a power of two'):
            KernelConfig().with_flag(flag, value)
    with pytest.raises(ValueError, match='must be a power of two'):
        KernelConfig().with_tuning({'attention_shapes': [
            {'kv_heads': 2, 'head_dim': 128, 'splits': 24}]})
    assert KernelConfig().with_flag('attention.splits', '64').attention.splits == 64
    for value in ('8', '256', '-1'):
        with pytest.raises(ValueError, match='max_registers must be 0 .no cap. or 24-255'):
            KernelConfig().with_flag('attention.max_registers', value)
    # The CUDA split kernel is built with rings of 2 and 3 tiles; Triton pipelines any depth.
    cuda = KernelConfig().with_flag('attention.cuda', '1')
    for value in ('1', '4'):
        with pytest.raises(ValueError, match=r'num_stages must be one of \(2, 3\) for the CUDA'):
            cuda.with_flag('attention.num_stages', value)
    assert KernelConfig().with_flag('attention.num_stages', '4').attention.num_stages == 4
    with pytest.raises(ValueError, match='num_stages'):
        KernelConfig().with_flag('attention.num_stages', '0')


GEMV_KINDS = ('rms_matvec', 'gate_up', 'matvec_add')   # the bf16 kinds kernels.yaml tunes


@pytest.mark.gpu
def test_every_tuned_bf16_gemv_shape_of_this_gpu_matches_the_torch_path():
    # config/kernels.yaml's launch shapes for this GPU, each on its own matrix shape (the
    # interpreter would take minutes on the heads' 128k rows): a tile the kernel mishandles at
    # a shape it was chosen for shows here, not only in a benchmark's speed.
    config = KernelConfig.for_device(DEVICE)
    shapes = [(kind, n, k) for kind, n, k in config.tuned if kind in GEMV_KINDS]
    if not shapes:
        pytest.skip(f'config/kernels.yaml tunes no bf16 GEMV for {torch.cuda.get_device_name()}')
    for kind, n, k in shapes:
        x, g = rand(k), rand(k, dtype=torch.bfloat16)
        if kind == 'rms_matvec':
            w = rand(n, k, dtype=torch.bfloat16)
            out, expected = (ops_triton.rms_matvec(x, g, w, None, 1e-5, config=config),
                             ops_torch.rms_matvec(x, g, w, None, 1e-5))
        elif kind == 'gate_up':
            w = rand(2 * n, k, dtype=torch.bfloat16, scale=0.1)
            out, expected = (ops_triton.rms_gate_up_silu(x, g, w, 1e-5, config=config),
                             ops_torch.rms_gate_up_silu(x, g, w, 1e-5))
        else:
            w, out = rand(n, k, dtype=torch.bfloat16), rand(n)
            expected = out.clone()
            ops_torch.matvec_add(expected, x, w)
            ops_triton.matvec_add(out, x, w, config=config)
        assert rel(out, expected) < TOL[torch.bfloat16], (kind, n, k, config.gemv(kind, n, k))


def test_every_gpu_entry_of_kernels_yaml_builds_a_configuration():
    import yaml
    from physinf_ros.resources import config_path
    entries = yaml.safe_load(config_path('kernels.yaml').read_text())
    assert 'NVIDIA H200' in entries
    for name, entry in entries.items():
        config = KernelConfig().with_tuning(entry)   # unknown fields raise TypeError
        for (kv_heads, head_dim), shape in config.attention_shapes.items():
            assert shape != config.attention, f'{name}: ({kv_heads}, {head_dim}) changes nothing'
