"""
The models our engine decodes: their config and tensor names (config.py), one forward a family.

llama.py (Llama, Mistral, Qwen2), qwen3.py, smollm3.py, phi3.py and gemma3.py; families.py
says which module runs a config and loads weights through it.
"""
