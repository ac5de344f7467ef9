"""
Teacher-forced top-1 agreement: how often two decoders predict the same next token.

Both decoders read the same fixed text; at every position each predicts the next token from
the true prefix (teacher forcing), so one early disagreement does not derail the rest. The
share of positions where their argmax agrees compares a quantised model with its float
original without sampling noise. Decoders that offer ``prompt_logits(token_ids)`` (eager,
graphed, exllamav2) can be compared.
"""

from typing import Sequence

import torch

TEXT = ('Robots that work beside people must decide quickly. A mobile manipulator in a kitchen '
        'sees a cup on the table, plans a grasp, and moves its arm while it listens for new '
        'instructions. Each decision is a short piece of text produced one token at a time, so '
        'the time per token sets how fast the robot can react. Engineers measure that time on '
        "the robot's own computer, compare it with the limit set by memory bandwidth, and "
        'choose hardware and software that keep the loop fast enough for safe and useful '
        'behaviour.')


def top1_agreement(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Share of positions whose argmax matches, for logits [n, vocab] of the same tokens."""
    if reference.shape != other.shape:
        raise ValueError(f'logits of different shapes: {tuple(reference.shape)} and '
                         f'{tuple(other.shape)}')
    same = reference.argmax(dim=-1).cpu() == other.argmax(dim=-1).cpu()
    return same.float().mean().item()


def decoder_agreement(reference, other, token_ids: Sequence[int]) -> float:
    """Teacher-forced top-1 agreement of two decoders over token_ids."""
    return top1_agreement(reference.prompt_logits(token_ids), other.prompt_logits(token_ids))
