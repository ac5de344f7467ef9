"""Prompts the tests rely on, with what the embedded model does with them."""

# Sent without the chat template, this reads like a finished assistant turn: the embedded
# model's greedy reply is end-of-sequence at once (P(EOS) 0.46 against 0.10 for the runner-up,
# on the hf and eager backends alike, float32 on the CPU).
EOS_FIRST_PROMPT = 'Hello! How can I help you today?'

# Greedy replies to this run for hundreds of tokens: good for cancelling mid-stream.
LONG_STORY = 'Write a long story about a robot who learns to paint.'

# Replies that copy from their prompt, as a robot's do: prompt lookup drafts from them.
ROBOT_PROMPTS = (
    'Rewrite this JSON command with the room changed to kitchen: '
    '{"action": "goto", "room": "garage", "speed": 0.5}',
    'List the objects on the table, one per line: red mug, blue plate, green apple, fork.',
    'Repeat the plan and add a last step "dock": 1. open door 2. enter hallway 3. stop.',
)
