"""
GPTQ 4-bit checkpoints as ExLlamaV2 0.3.2 reads them: layout, quantisation, bytes per step.

Each quantised linear (float weight [out N, in K]) is stored as
  ``<linear>.qweight`` int32 [K / 8, N]      input k's 4-bit code in nibble k % 8 of row k // 8
  ``<linear>.qzeros``  int32 [K / g, N / 8]  column n's zero in nibble n % 8, stored as zero - 1
  ``<linear>.scales``  fp16  [K / g, N]
  ``<linear>.g_idx``   int32 [K], optional   group of each input row (act order); else k // g
  ``<linear>.bias``    fp16  [N], optional
and w[n, k] = scales[g(k), n] * (code[k, n] - zero[g(k), n]). The "minus one" of qzeros is the
original GPTQ ("v1") convention: exllamav2 adds 1 to every stored nibble (q_matrix.cu,
``dequant_4bit_8_prep_zero(zeros + 1)``), or subtracts 0x11111111 first when the config says
``checkpoint_format: gptq_v2``. We write symmetric v1 checkpoints: zero 8 everywhere, so every
qzeros word is 0x77777777. Symmetric because v1 cannot store a zero of 0 (an asymmetric group
that is all non-negative would need it), and the gptq_v2 correction borrows across nibbles when
a zero is 0; the kernel reads a zero per group and column either way, so it costs the same.
We write no g_idx: exllamav2 takes any non-zero g_idx as act order and then gathers the
activations through a permutation in every GEMV.

Embeddings, lm_head and norms stay fp16. exllamav2 needs every quantised dimension to be a
multiple of 32 and a power-of-two group size that divides K.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

from .source import quant_method
from ..model.config import ModelConfig, tensor_inventory

BITS = 4
CODES_PER_WORD = 32 // BITS
SYMMETRIC_ZERO = 8
GROUP_SIZES = (128, 64, 32)
ARCHITECTURES = {'llama': 'LlamaForCausalLM', 'mistral': 'MistralForCausalLM',
                 'qwen2': 'Qwen2ForCausalLM', 'qwen3': 'Qwen3ForCausalLM',
                 'smollm3': 'SmolLM3ForCausalLM', 'phi3': 'Phi3ForCausalLM',
                 'gemma3_text': 'Gemma3ForCausalLM'}


@dataclass(frozen=True)
class GptqSpec:
    """How a checkpoint is quantised: 4 bits, symmetric, no act order, one group size."""

    group_size: int = 128

    def quantization_config(self) -> dict:
        """Return the quantization_config that transformers and AutoGPTQ put in config.json."""
        return {'quant_method': 'gptq', 'bits': BITS, 'group_size': self.group_size,
                'sym': True, 'desc_act': False, 'static_groups': False,
                'true_sequential': True, 'damp_percent': 0.0, 'checkpoint_format': 'gptq',
                'physinf_method': 'round-to-nearest'}

    @classmethod
    def from_hf(cls, hf: dict) -> Optional['GptqSpec']:
        """Read the spec of a GPTQ config.json; None if unquantised, ValueError if unusable."""
        if quant_method(hf) != 'gptq':
            return None
        q = hf['quantization_config']
        if q.get('bits', BITS) != BITS:
            raise ValueError(f'GPTQ with {q.get("bits")} bits: only 4-bit is supported')
        if q.get('checkpoint_format', 'gptq') != 'gptq':
            raise ValueError(f'GPTQ checkpoint_format {q["checkpoint_format"]!r}: only the '
                             'original "gptq" (v1 zeros) format is read here')
        return cls(group_size=int(q.get('group_size', 128)))


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a checkpoint: its name, dtype and shape."""

    name: str
    dtype: torch.dtype
    shape: Tuple[int, ...]

    @property
    def nbytes(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count * torch.empty((), dtype=self.dtype).element_size()


def pick_group_size(config: ModelConfig) -> int:
    """128 where it divides every quantised input dimension, else 64, else 32."""
    inputs = (config.hidden_size, config.q_size, config.intermediate_size)
    for size in GROUP_SIZES:
        if all(k % size == 0 for k in inputs):
            return size
    raise ValueError(f'no GPTQ group size in {GROUP_SIZES} divides the input sizes {inputs}')


def quantized_specs(prefix: str, out_features: int, in_features: int,
                    group_size: int) -> List[TensorSpec]:
    """qweight, qzeros and scales of one linear, in the order they are written."""
    if out_features % 32 or in_features % 32:
        raise ValueError(f'{prefix}: exllamav2 needs dimensions that are multiples of 32, '
                         f'got [{out_features}, {in_features}]')
    if in_features % group_size:
        raise ValueError(f'{prefix}: group size {group_size} does not divide {in_features}')
    groups = in_features // group_size
    return [TensorSpec(prefix + '.qweight', torch.int32,
                       (in_features // CODES_PER_WORD, out_features)),
            TensorSpec(prefix + '.qzeros', torch.int32, (groups, out_features // CODES_PER_WORD)),
            TensorSpec(prefix + '.scales', torch.float16, (groups, out_features))]


def checkpoint_plan(config: ModelConfig, spec: GptqSpec) -> List[TensorSpec]:
    """Every tensor of a GPTQ checkpoint of this shape, in file order; floats are fp16."""
    plan = []
    for name, shape in tensor_inventory(config):
        if len(shape) == 2 and name.startswith('model.layers.'):   # a linear's weight
            plan += quantized_specs(name[:-len('.weight')], *shape, spec.group_size)
        else:
            plan.append(TensorSpec(name, torch.float16, shape))
    return plan


def weight_bytes(config: ModelConfig, spec: GptqSpec) -> Tuple[int, int]:
    """
    Return (W, W_all) in bytes for a GPTQ checkpoint of this shape, as written by this package.

    W_all is every weight byte of the checkpoint (its size on disk, less the headers): packed
    4-bit codes (K N / 2), zeros (K N / 2g), fp16 scales (2 K N / g) and fp16 biases of each
    quantised linear, fp16 norms, the fp16 embedding table and the fp16 lm_head. W is what one
    decode step reads: the same, but of the embedding table only the one row of this token;
    a tied lm_head (the table itself) counts once. No g_idx is written, so none is read.
    For Llama-3.1-8B at group size 128: W = 4,677,189,632 and W_all = 5,727,854,592.
    """
    plan = checkpoint_plan(config, spec)
    w_all = sum(t.nbytes for t in plan)
    row = config.hidden_size * 2
    table = config.vocab_size * row
    w = w_all if config.tie_word_embeddings else w_all - table + row
    return w, w_all


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit codes [K, N] (0..15) into int32 [K / 8, N]: code of k in nibble k % 8."""
    k, n = codes.shape
    nibbles = codes.to(torch.int64).view(k // CODES_PER_WORD, CODES_PER_WORD, n)
    shifts = (BITS * torch.arange(CODES_PER_WORD, device=codes.device)).view(1, -1, 1)
    return _to_int32((nibbles << shifts).sum(dim=1))


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_codes along dim 0: int32 [R, N] -> codes int32 [8 R, N]."""
    shifts = (BITS * torch.arange(CODES_PER_WORD, device=packed.device)).view(1, -1, 1)
    # An arithmetic shift then a 4-bit mask reads each nibble, the sign bit included.
    codes = (packed.to(torch.int32).unsqueeze(1) >> shifts) & 0xF
    return codes.reshape(-1, packed.shape[1])


def pack_zeros(zeros: torch.Tensor) -> torch.Tensor:
    """Pack zero points [G, N] (1..16) into qzeros int32 [G, N / 8], stored minus one (v1)."""
    stored = (zeros.to(torch.int64) - 1).T.contiguous()          # nibbles run along N
    return pack_codes(stored).T.contiguous()


def unpack_zeros(qzeros: torch.Tensor) -> torch.Tensor:
    """Zero points [G, N] from v1 qzeros [G, N / 8] (stored nibble + 1, as exllamav2 reads)."""
    return unpack_codes(qzeros.T.contiguous()).T + 1


def _to_int32(words: torch.Tensor) -> torch.Tensor:
    # Bit patterns of 32-bit words held in int64 (0 .. 2^32 - 1) as two's complement int32.
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)


def quantize(weight: torch.Tensor, group_size: int) -> Dict[str, torch.Tensor]:
    """
    Round-to-nearest symmetric 4-bit quantisation of weight [N, K] in groups along K.

    scale = 2 max|w| / 15 per group and column, rounded up to the next fp16 value so that
    |w - dequantize(...)| <= scale / 2 everywhere (the largest w maps to code 15 or 0 after
    clamping, within half a step). Returns qweight, qzeros and scales as stored.
    """
    n, k = weight.shape
    w = weight.detach().float().T.reshape(k // group_size, group_size, n)   # [G, g, N]
    amax = w.abs().amax(dim=1)                                              # [G, N]
    # 1 + 2^-10 covers fp16 rounding (relative error <= 2^-11), so scale >= 2 amax / 15.
    target = (2.0 * amax / 15.0) * (1.0 + 2.0 ** -10)
    scales = target.clamp(min=2.0 ** -14, max=65504.0).half()
    codes = torch.round(w / scales.float().unsqueeze(1)) + SYMMETRIC_ZERO
    codes = codes.clamp(0, 2 ** BITS - 1).to(torch.int32).reshape(k, n)
    zeros = torch.full((k // group_size, n), SYMMETRIC_ZERO, dtype=torch.int32,
                       device=weight.device)
    return {'qweight': pack_codes(codes), 'qzeros': pack_zeros(zeros), 'scales': scales}


def dequantize(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
               g_idx: Optional[torch.Tensor] = None,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """
    Float weight [N, K] of one GPTQ linear: scales * (code - zero), computed exactly in fp32.

    float32 is the exact value (an fp16 scale times a small integer is exact in fp32); with
    dtype=float16 the result equals exllamav2's ``reconstruct`` bit for bit (it rounds the same
    product to fp16). Its GEMV kernel instead sums (code - zero) * x in fp16 and scales each
    partial sum, which is the same arithmetic up to fp16 accumulation.
    """
    zeros = unpack_zeros(qzeros)                                    # [G, N]
    k = qweight.shape[0] * CODES_PER_WORD
    if g_idx is None:
        group = torch.arange(k, device=qweight.device) // (k // zeros.shape[0])
    else:
        group = g_idx.long()
    return _weight(qweight, scales, zeros, group, dtype)


def _weight(qweight: torch.Tensor, scales: torch.Tensor, zeros, group: torch.Tensor,
            dtype: torch.dtype) -> torch.Tensor:
    # The float weight [N, K]: scales and zeros [G, N] (or one zero for all) picked by the
    # group of each input row, exact in float32, then rounded to dtype.
    codes = unpack_codes(qweight)                                   # [K, N]
    if torch.is_tensor(zeros):
        zeros = zeros[group]
    w = scales.float()[group] * (codes - zeros).float()             # [K, N]
    return w.T.contiguous().to(dtype)


def dequantize_state(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Replace every quantised linear of a state dict by its float ``.weight``; in place."""
    for key in [k for k in state if k.endswith('.qweight')]:
        prefix = key[:-len('.qweight')]
        state[prefix + '.weight'] = dequantize(
            state.pop(key), state.pop(prefix + '.qzeros'), state.pop(prefix + '.scales'),
            state.pop(prefix + '.g_idx', None))
    return state


@dataclass
class PackedLinear:
    """
    A 4-bit linear as the decode kernels read it: GPTQ's own layout, zeros unpacked.

      codes   int32 [K / 8, N]   input k's code in nibble k % 8 of row k // 8 (qweight)
      scales  fp16  [K / g, N]
      zeros   uint8 [K / g, N]   None when every zero is 8 (symmetric: no bytes read)
    w[n, k] = scales[k // g, n] * (code[k, n] - zero[k // g, n]), with g >= 8 so that a word's
    8 codes share one group. dtype is the model dtype, which the activations are rounded to,
    as for float weights.
    """

    codes: torch.Tensor
    scales: torch.Tensor
    zeros: Optional[torch.Tensor]
    group_size: int
    dtype: torch.dtype

    @property
    def shape(self) -> Tuple[int, int]:
        """(N, K), as a float weight's shape."""
        return self.codes.shape[1], self.codes.shape[0] * CODES_PER_WORD

    @property
    def nbytes(self) -> int:
        """Bytes one GEMV reads: codes, scales and (if any) zeros."""
        parts = [self.codes, self.scales] + ([self.zeros] if self.zeros is not None else [])
        return sum(t.nbytes for t in parts)

    def dense(self, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """Return the float weight [N, K], exact in float32, in dtype (default: the model's)."""
        k = self.shape[1]
        group = torch.arange(k, device=self.codes.device) // self.group_size
        zeros = SYMMETRIC_ZERO if self.zeros is None else self.zeros.to(torch.int32)
        return _weight(self.codes, self.scales, zeros, group, dtype or self.dtype)

    @classmethod
    def from_gptq(cls, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                  g_idx: Optional[torch.Tensor], dtype: torch.dtype,
                  device: torch.device) -> 'PackedLinear':
        """Take one GPTQ linear onto device (class doc layout); act order is refused."""
        k = qweight.shape[0] * CODES_PER_WORD
        group_size = k // scales.shape[0]
        if group_size % CODES_PER_WORD:
            raise ValueError(f'group size {group_size}: the 4-bit kernels need a multiple of 8')
        if g_idx is not None and not torch.equal(
                g_idx.long().cpu(), torch.arange(k) // group_size):
            raise ValueError('act-order GPTQ (a g_idx that permutes the groups) runs only on '
                             'backend exllamav2')
        zeros = unpack_zeros(qzeros.to(device))                               # [G, N], 1..16
        return cls(qweight.to(device).contiguous(), scales.to(device).contiguous(),
                   None if bool((zeros == SYMMETRIC_ZERO).all())
                   else zeros.to(torch.uint8).contiguous(),
                   group_size, dtype)

    @classmethod
    def cat(cls, parts: List['PackedLinear']) -> 'PackedLinear':
        """Stack linears of one input along their outputs (QKV, gate/up), as torch.cat would."""
        first = parts[0]
        if any(p.group_size != first.group_size for p in parts):
            raise ValueError('fused linears must share a group size')
        zeros = None
        if any(p.zeros is not None for p in parts):
            zeros = torch.cat([p.zeros if p.zeros is not None else torch.full_like(
                p.scales, SYMMETRIC_ZERO, dtype=torch.uint8) for p in parts], dim=1)
        return cls(torch.cat([p.codes for p in parts], dim=1),
                   torch.cat([p.scales for p in parts], dim=1), zeros, first.group_size,
                   first.dtype)


def dense(w) -> torch.Tensor:
    """Return a float weight as it is, a PackedLinear dequantised (in its model dtype)."""
    return w.dense() if isinstance(w, PackedLinear) else w
