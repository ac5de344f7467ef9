"""
The backends that decode: each a Decoder (base.py) for the generation loop.

backends.py is the table of backends and how one is picked; native.py runs our forward
(model/llama.py) eagerly or CUDA-graphed, hf.py runs transformers (with the attention and
quantisation stacks of stacks.py), exllama.py runs exllamav2; forward.py is what the last two
share. agreement.py compares two decoders' choices.
"""
