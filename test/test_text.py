"""Prompt encoding and streaming detokenisation."""

from physinf_ros.engine.text import Detokenizer, encode_prompt


def test_pieces_join_to_the_decoded_text_with_multibyte_characters(embedded_engine):
    tokenizer = embedded_engine.tokenizer
    text = 'Robots in Tōkyō say こんにちは 🤖 and “hello” — naïvely.'
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = Detokenizer(tokenizer)
    pieces = [detok.push(i) for i in ids] + [detok.flush()]
    assert ''.join(pieces) == tokenizer.decode(ids)
    # No piece carries half a character.
    assert not any('\ufffd' in piece for piece in pieces)
    # Streaming really streams: text comes out in many pieces, not once at the end.
    assert sum(1 for piece in pieces if piece) > len(ids) // 2


def test_chat_template_wraps_the_turn_and_system_prompt(embedded_engine):
    tokenizer = embedded_engine.tokenizer
    plain = tokenizer.decode(encode_prompt(tokenizer, 'Hi there', use_chat_template=False))
    chat = tokenizer.decode(encode_prompt(tokenizer, 'Hi there'))
    custom = tokenizer.decode(encode_prompt(tokenizer, 'Hi there', system_prompt='Be terse.'))
    assert plain.strip() == 'Hi there'
    assert chat.startswith('<|im_start|>system') and chat.endswith('<|im_start|>assistant\n')
    assert 'Be terse.' in custom and 'SmolLM' not in custom
