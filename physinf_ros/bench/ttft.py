"""
Time to first token, cold and with the KV cache of a history reused, against the compute floor.

A cold prefill of a history and a new turn, against the same turn reusing the history's KV
cache, each next to the prefill's compute floor.

Per history length h (random token ids, seeded as the step sessions' prompts are): cold is a
prefill of h + turn tokens from position 0 (reuse off, the cache first holding an unrelated
sequence); reused is the same prefill once the cache holds the h-token history (the decoder
keeps the shared prefix and computes only the turn). Each is timed on the host around
Decoder.prefill, which returns the first token: TTFT as a caller sees it. History 0 is a
cold turn alone (a short prompt's TTFT), with nothing to reuse.

The compute floor is the FLOPs the prefill must do over the GPU's dense bf16 peak
(config/targets.yaml, bf16_dense_tflops): 2 x the layers' linear parameters x the tokens
computed, plus 2 x the lm_head's parameters (the last token only), plus attention, 4 x heads x
head_dim per (query, key) pair over the causal pairs of the new tokens (each sees the cached
prefix and the new tokens up to itself). fraction_of_peak = floor / measured.
"""

from dataclasses import dataclass
import statistics
import time
from typing import Callable, List, Optional, Sequence

from .protocol import GREEDY, prompt_ids, vocab_size
from ..engine.model.config import ModelConfig

SCHEMA = 'physinf_ros.ttft'   # a results file of physinf-bench --ttft (physinf-report reads it)
SCHEMA_VERSION = 1
TURN_TOKENS = 32
DEFAULT_HISTORIES = (512, 1024, 2048, 4096, 8192, 16384)


def linear_params(config: ModelConfig) -> int:
    """Return the parameters of every layer's linears (the per-token matmul weights)."""
    h, q, kv, i = config.hidden_size, config.q_size, config.kv_size, config.intermediate_size
    return config.num_layers * (h * (q + 2 * kv) + q * h + 3 * i * h)


def prefill_flops(config: ModelConfig, new_tokens: int, cached_tokens: int = 0) -> float:
    """Return the FLOPs of a prefill computing new_tokens after cached_tokens kept ones."""
    pairs = new_tokens * cached_tokens + new_tokens * (new_tokens + 1) / 2
    attention = 4.0 * config.num_layers * config.num_heads * config.head_dim * pairs
    return (2.0 * linear_params(config) * new_tokens
            + 2.0 * config.vocab_size * config.hidden_size + attention)


def floor_ms(flops: float, tflops: Optional[float]) -> Optional[float]:
    """Return the compute floor in ms at a peak of tflops (None where the peak is unknown)."""
    return None if not tflops else flops / (tflops * 1e12) * 1e3


@dataclass
class TtftRow:
    """One history length: cold and reused TTFT (medians) and their compute floors."""

    history: int
    turn: int
    cold_ms: List[float]
    reused_ms: List[float]
    cached_tokens: int
    cold_floor_ms: Optional[float]
    reused_floor_ms: Optional[float]
    same_first_token: bool

    def record(self) -> dict:
        """Return the row for a results file, medians and fractions of peak included."""
        cold = statistics.median(self.cold_ms)
        reused = statistics.median(self.reused_ms) if self.reused_ms else None
        return {'history': self.history, 'turn': self.turn,
                'cold_ms': cold, 'reused_ms': reused,
                'speedup': None if reused is None else cold / reused,
                'cached_tokens': self.cached_tokens, 'same_first_token': self.same_first_token,
                'cold_floor_ms': self.cold_floor_ms, 'reused_floor_ms': self.reused_floor_ms,
                'cold_fraction_of_peak': None if self.cold_floor_ms is None
                else self.cold_floor_ms / cold,
                'reused_fraction_of_peak': None if self.reused_floor_ms is None or reused is None
                else self.reused_floor_ms / reused,
                'cold_ms_all': self.cold_ms, 'reused_ms_all': self.reused_ms}


def _timed(decoder, ids: Sequence[int]) -> tuple:
    start = time.perf_counter()
    token = decoder.prefill(ids, GREEDY)   # returns the chosen token: the device is done
    return (time.perf_counter() - start) * 1000.0, token


def measure(engine, histories: Sequence[int] = DEFAULT_HISTORIES, turn: int = TURN_TOKENS,
            repeats: int = 3, seed: int = 0, tflops: Optional[float] = None,
            log: Callable[[str], None] = lambda _: None) -> List[TtftRow]:
    """Return a TtftRow per history length (engine: renewed with room for the longest)."""
    engine.renew(max_context=max(histories) + turn + 2, log=log)
    decoder = engine.decoder
    config = decoder.step_facts().config
    vocab = vocab_size(engine)
    unrelated = prompt_ids(vocab, 16, seed, len(histories))   # a slot no history uses
    rows = []
    for slot, history in enumerate(histories):
        ids = prompt_ids(vocab, history + turn, seed, slot)
        _timed(decoder, ids)   # warm-up at this length (kernels, allocator)
        cold, reused, firsts = [], [], set()
        for _ in range(repeats):
            decoder.reuse_prefix = False
            _timed(decoder, unrelated)
            ms, token = _timed(decoder, ids)
            cold.append(ms)
            firsts.add(('cold', token))
            decoder.reuse_prefix = True
            if not history:
                continue
            decoder.prefill(ids[:history], GREEDY)   # the history's turn, as decoded before
            ms, token = _timed(decoder, ids)
            reused.append(ms)
            firsts.add(('reused', token))
            if decoder.cached_tokens != history:
                raise RuntimeError(f'{decoder.info.backend} kept {decoder.cached_tokens} of '
                                   f'{history} history tokens')
        row = TtftRow(history, turn, cold, reused, decoder.cached_tokens,
                      floor_ms(prefill_flops(config, history + turn), tflops),
                      floor_ms(prefill_flops(config, turn, history), tflops),
                      len({token for _, token in firsts}) == 1)
        log(f'history {history}: TTFT cold {statistics.median(cold):.2f} ms'
            + (f', reused {statistics.median(reused):.2f} ms' if reused else ''))
        rows.append(row)
    decoder.reuse_prefix = True
    return rows


def report_lines(docs: Sequence[dict]) -> List[str]:
    """Return physinf-report's section for --ttft results files: a table per file."""
    if not docs:
        return []
    lines = ['## Time to first token', '',
             'Per history length: a cold prefill of history + turn, and the turn once the KV '
             'cache holds the history; medians, next to the compute floor over the dense bf16 '
             'peak (see physinf_ros/bench/ttft.py).', '']
    for doc in docs:
        model, target = doc['model'], doc['target']
        lines += [f'**{model["spec"]}** ({model["backend"]}, {model["dtype"]}) on '
                  f'{target["name"]}, peak {doc["peak_tflops"] or "-"} TFLOP/s:', '',
                  table(doc['rows']), '']
    return lines


def table(records: List[dict]) -> str:
    """Return a Markdown table of the rows' records."""
    def fmt(value, spec):
        return '-' if value is None else format(value, spec)
    lines = ['| history | turn | cold TTFT ms | floor ms | of peak | reused TTFT ms | cached | '
             'floor ms | of peak | cold / reused |',
             '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
    for r in records:
        lines.append(
            f'| {r["history"]} | {r["turn"]} | {r["cold_ms"]:.2f} | '
            f'{fmt(r["cold_floor_ms"], ".3f")} | {fmt(r["cold_fraction_of_peak"], ".2f")} | '
            f'{fmt(r["reused_ms"], ".2f")} | {r["cached_tokens"]} | '
            f'{fmt(r["reused_floor_ms"] if r["reused_ms"] else None, ".3f")} '
            f'| {fmt(r["reused_fraction_of_peak"], ".2f")} | {fmt(r["speedup"], ".1f")}x |')
    return '\n'.join(lines)
