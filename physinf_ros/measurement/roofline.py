"""
The memory floor of one batch-1 decode step: bytes read, t_floor, R_floor, rates and cost.

Definitions (DESIGN.md):
  W        bytes of weights read per decode step: every matrix and vector once, the input
           embedding table only one row, a tied lm_head (the embedding table itself) once;
  W_all    all weight bytes (the paper's convention for "the model's size");
  K(ctx)   2 x layers x kv_heads x head_dim x ctx x bytes per element (keys and values read);
  t_floor  (W + K) / B_peak: the step time if every byte streamed at the datasheet bandwidth;
  R_floor  t_floor / t_step: 1.0 is perfect use of the memory system.

Bytes are counted tensor by tensor (`weight_tensors`) and priced by a byte accounting. `Dense`
gives every element the same width (bf16: 2 bytes); `Gptq4` prices the `linear` matrices of a
4-bit checkpoint as packed codes plus group scales and zeros, and the rest at 16 bits;
`Stacked` prices them as a quantisation stack stores them (WeightFormat, in
engine/decoders/stacks.py).
"""

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Protocol

from .targets import detect
from ..engine.model.config import is_norm, ModelConfig, tensor_inventory

GB = 1e9                      # bandwidths and sizes are decimal, as datasheets print them


@dataclass(frozen=True)
class WeightTensor:
    """
    One weight tensor as a decode step reads it.

    kind is what a byte accounting may care about: 'embedding', 'linear', 'bias', 'norm' or
    'lm_head'. A [rows, cols] matrix; vectors have cols == 1. rows_read is how many rows one
    decode step reads: all of them, except the input embedding table (one row).
    """

    name: str
    kind: str
    rows: int
    cols: int
    rows_read: int


class ByteAccounting(Protocol):
    """How many bytes `rows` rows of a weight tensor occupy in memory."""

    def tensor_bytes(self, tensor: WeightTensor, rows: int) -> float:
        """Return the bytes of `rows` rows of tensor."""


@dataclass(frozen=True)
class Dense:
    """Every element stored at the same width: the bf16, fp16 and fp32 checkpoints."""

    bytes_per_element: float

    def tensor_bytes(self, tensor: WeightTensor, rows: int) -> float:
        return rows * tensor.cols * self.bytes_per_element


@dataclass(frozen=True)
class Gptq4:
    """
    4-bit linears in groups of group_size inputs; the other tensors other_bytes per element.

    A linear [N, K] is K N / 2 bytes of codes, one fp16 scale per group and output, and
    zero_bytes per group and output: 0.5 as GPTQ stores them (exllamav2 reads those), 1 for
    our kernels' uint8 zeros, 0 where the checkpoint is symmetric and the kernels read none.
    Embeddings, head, norms and biases are fp16 in the checkpoint (2 bytes); our engine holds
    them in the model dtype.
    """

    group_size: int
    zero_bytes: float
    other_bytes: float = 2.0

    def tensor_bytes(self, tensor: WeightTensor, rows: int) -> float:
        if tensor.kind != 'linear':
            return rows * tensor.cols * self.other_bytes
        groups = rows * tensor.cols / self.group_size
        return rows * tensor.cols / 2 + groups * (2.0 + self.zero_bytes)


@dataclass(frozen=True)
class Stacked:
    """The linears as a quantisation stack stores them; the other tensors other_bytes each."""

    weight_format: object   # stacks.WeightFormat
    other_bytes: float

    def tensor_bytes(self, tensor: WeightTensor, rows: int) -> float:
        if tensor.kind != 'linear':
            return rows * tensor.cols * self.other_bytes
        return self.weight_format.linear_bytes(rows, tensor.cols)


def weight_tensors(config: ModelConfig) -> List[WeightTensor]:
    """List every weight tensor of a Llama-family model (llama.tensor_inventory), as read."""
    tensors = []
    for name, shape in tensor_inventory(config):
        rows, cols = shape[0], shape[1] if len(shape) == 2 else 1
        rows_read = rows
        if name == 'model.embed_tokens.weight' and not config.tie_word_embeddings:
            kind, rows_read = 'embedding', 1   # the input row of this token
        elif name in ('model.embed_tokens.weight', 'lm_head.weight'):
            # A tied table serves both ends: the lm_head reads it whole every step, and the
            # input row the step also looks up lies inside those same bytes, so it counts once.
            kind = 'lm_head'
        elif is_norm(name):
            kind = 'norm'
        elif name.endswith('.bias'):
            kind = 'bias'
        else:
            kind = 'linear'
        tensors.append(WeightTensor(name, kind, rows, cols, rows_read))
    return tensors


def weight_bytes_all(config: ModelConfig, accounting: ByteAccounting) -> float:
    """W_all: bytes of all weights."""
    return sum(accounting.tensor_bytes(t, t.rows) for t in weight_tensors(config))


def weight_bytes_per_step(config: ModelConfig, accounting: ByteAccounting) -> float:
    """W: bytes of weights one decode step reads."""
    return sum(accounting.tensor_bytes(t, t.rows_read) for t in weight_tensors(config))


def kv_bytes(config: ModelConfig, ctx: int, bytes_per_element: float) -> float:
    """K(ctx): bytes of keys and values a step at context ctx reads (sliding layers: a window)."""
    sliding = len(config.sliding_layers)
    keys = (config.num_layers - sliding) * ctx + sliding * min(ctx, config.sliding_window)
    return 2 * config.num_kv_heads * config.head_dim * keys * bytes_per_element


def t_floor_s(weight_bytes: float, kv_cache_bytes: float, bandwidth_gbs: float) -> float:
    """Return t_floor in seconds: (W + K) / B_peak, B_peak in GB/s."""
    return (weight_bytes + kv_cache_bytes) / (bandwidth_gbs * GB)


def r_floor(t_floor: float, t_step: float) -> Optional[float]:
    """Return R_floor = t_floor / t_step (same units); None without a valid step time."""
    return t_floor / t_step if t_step and t_step > 0 else None


def tokens_per_s(step_ms: float) -> Optional[float]:
    """Decode rate of a step that takes step_ms."""
    return 1000.0 / step_ms if step_ms and step_ms > 0 else None


def cost_per_mtok(step_ms: float, price_per_hour: Optional[float]) -> Optional[float]:
    """Cost of a million decoded tokens at price_per_hour; None without a price."""
    rate = tokens_per_s(step_ms)
    if price_per_hour is None or rate is None:
        return None
    return price_per_hour / (rate * 3600.0) * 1e6


@dataclass(frozen=True)
class Floor:
    """The memory floor of a model on a target: bytes per step, and t_floor by context."""

    config: ModelConfig
    accounting: ByteAccounting
    kv_bytes_per_element: float
    bandwidth_gbs: float

    @property
    def weight_bytes(self) -> float:
        return weight_bytes_per_step(self.config, self.accounting)

    @property
    def weight_bytes_all(self) -> float:
        return weight_bytes_all(self.config, self.accounting)

    def kv_bytes(self, ctx: int) -> float:
        return kv_bytes(self.config, ctx, self.kv_bytes_per_element)

    def t_floor_ms(self, ctx: int) -> float:
        return 1000.0 * t_floor_s(self.weight_bytes, self.kv_bytes(ctx), self.bandwidth_gbs)

    def at(self, ctx: int, step_ms: Optional[float]) -> Dict[str, Optional[float]]:
        """W, K, t_floor_ms and R_floor of a step at context ctx that took step_ms."""
        t_floor = self.t_floor_ms(ctx)
        return {'W_bytes': self.weight_bytes, 'W_all_bytes': self.weight_bytes_all,
                'K_bytes': self.kv_bytes(ctx), 't_floor_ms': t_floor,
                'R_floor': r_floor(t_floor, step_ms)}


def decoder_accounting(decoder) -> ByteAccounting:
    """How a loaded decoder's weights are stored (its step_facts): Dense, Gptq4 or Stacked."""
    facts = decoder.step_facts()
    if facts.weight_format is not None:
        return Stacked(facts.weight_format, facts.element_bytes)
    if facts.group_size:
        return Gptq4(facts.group_size, facts.zero_bytes, facts.element_bytes)
    if facts.quant_method:   # EXL2 mixes bit widths per layer: its bytes are not modelled here
        raise ValueError(f'the bytes per step of a {facts.quant_method} checkpoint are not '
                         'modelled')
    return Dense(facts.element_bytes)


def decoder_floor(decoder, bandwidth_gbs: float) -> Floor:
    """
    Return the Floor of a loaded decoder: its weights as stored, its KV cache's width.

    Raises ValueError where the decoder's bytes are not modelled (a transformers model outside
    the Llama family, an EXL2 checkpoint).
    """
    facts = decoder.step_facts()
    return Floor(facts.config, decoder_accounting(decoder), facts.kv_bytes_per_element,
                 bandwidth_gbs)


class LiveFloor:
    """
    R_floor and t_floor for a serving decoder, for its diagnostics.

    Built once when the decoder is ready (the target is found by the device's name; an unknown
    GPU or the CPU gets a measured copy bandwidth); `values` is then cheap.
    """

    def __init__(self, decoder, log: Callable[[str], None] = lambda _: None):
        self.target = None
        self.floor: Optional[Floor] = None
        try:
            self.target = detect(decoder.device, log=log)
            self.floor = decoder_floor(decoder, self.target.bandwidth_gbs)
        except (OSError, ValueError, KeyError) as exc:
            # Diagnostics without R_floor beat a decoder that does not start.
            log(f'R_floor is not reported: {exc}')

    def values(self, ctx: int, step_ms_p50: float) -> Dict[str, object]:
        """Return t_floor_ms and R_floor at context ctx (NaN while unknown) and B_peak."""
        nan = float('nan')
        t_floor, ratio = nan, None
        if self.floor is not None and ctx > 0:
            t_floor = self.floor.t_floor_ms(ctx)
            ratio = r_floor(t_floor, step_ms_p50)
        target = self.target
        return {'t_floor_ms': t_floor, 'R_floor': nan if ratio is None else ratio,
                'B_peak_gbs': target.bandwidth_gbs if target else nan,
                'B_peak_source': ('measured' if target.measured else 'datasheet')
                if target else 'unknown'}
