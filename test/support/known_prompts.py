"""Prompts the tests rely on, with what the embedded model does with them."""

# Sent without the chat template, this reads like a finished assistant turn: the embedded
# model's greedy reply is end-of-sequence at once (P(EOS) 0.46 against 0.10 for the runner-up,
# on the hf and eager backends alike, float32 on the CPU).
EOS_FIRST_PROMPT = 'Hello! How can I help you today?'

# Greedy replies to this run for hundreds of tokens: good for cancelling mid-stream.
LONG_STORY = 'Write a long story about a robot who learns to paint.'
