"""The byte-level BPE tokenizer against ids from SmolLM2's reference tokenizer (Hugging Face
`tokenizers` configured like SmolLM2's tokenizer.json), and exact round trips."""

import pytest

from utils.gguf_weights import read_gguf
from utils.tokenizer import Tokenizer, bytes_to_unicode

CORPUS = [
    "The sky is blue.",
    "Hello, world! How's it going? I'm fine; you'll see they've done it, we'd go.",
    "Numbers: 12345, 3.14159, 1,000,000 and 2024-11-29 at 08:30. Price: $9.99 (50% off!)",
    "   leading spaces and trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nand\r\nwindows line ends \t \n",
    "def f(x):\n    return x ** 2  # square\n\nif __name__ == '__main__':\n    print(f(3))\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    "Emoji: 😀🚀👍🏽 family: 👨‍👩‍👧‍👦 flags: 🇫🇷🇯🇵",
    "中文文本测试，日本語のテキスト、한국어 텍스트",
    "Ünïcödé àccents: café, naïve, Zürich, São Paulo, Łódź",
    "Ελληνικά και русский текст, عربى, עברית, हिन्दी",
    "Math: ∑ᵢ xᵢ² ≤ ∞, α+β=γ, ½ ¾ ², Ⅻ",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "special-looking <|im_start text and <|endoftext|> inside",
    "URL https://example.com/path?q=1&r=two#frag and email a.b@c.org",
    "     ",
    "\n",
    "a",
    "",
    "x" * 300,
    "🎉" * 20,
    "   \u00a0\u2003 unicode spaces\u3000here",
    "Zero width\u200bjoiner\u200dand combining e\u0301",
    "0xDEADBEEF 1e-5 -42 +7 ٣٤٥ ૧૨",
]

# ids from the reference tokenizer (see module docstring)
REFERENCE_IDS = {
    "The sky is blue.": [504, 6376, 314, 4461, 30],
    "In 2024, 1,000 people paid $9.99.": [788, 216, 34, 32, 34, 36, 28, 216, 33, 28, 32, 32, 32,
                                          701, 5940, 1885, 41, 30, 41, 41, 30],
    "def f(x):\n    return x  # ok\n": [1604, 275, 24, 104, 727, 472, 1003, 1792, 216, 907,
                                         10907, 198],
    "Emoji 😀 and 中文": [10809, 33777, 40303, 218, 284, 216, 28589, 29184],
    "I'm here, you'll see.  Two  spaces": [57, 5248, 1535, 28, 346, 3060, 963, 30, 216, 5713,
                                           216, 5600],
    "<|im_start|>user\nHi<|im_end|>\n": [1, 4093, 198, 26843, 2, 198],
}


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_gguf(read_gguf())


@pytest.mark.parametrize("text", list(REFERENCE_IDS))
def test_known_ids(tok, text):
    assert tok.encode(text) == REFERENCE_IDS[text]


@pytest.mark.parametrize("text", CORPUS)
def test_round_trip_is_exact(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_digits_are_split_one_by_one(tok):
    words = tok.pre_tokenize("in 2024")
    assert words == ["in", " ", "2", "0", "2", "4"]


def test_special_tokens_are_single_ids(tok):
    for text, expected in [("<|endoftext|>", 0), ("<|im_start|>", 1), ("<|im_end|>", 2)]:
        assert tok.encode(text) == [expected]
        assert tok.decode([expected]) == text
    # as plain text they are spelled out with ordinary tokens
    plain = tok.encode("<|im_end|>", allow_special=False)
    assert len(plain) > 1 and 2 not in plain
    assert tok.decode(plain) == "<|im_end|>"


def test_merge_steps_show_bpe_one_merge_at_a_time(tok):
    steps = tok.merge_steps(" tokenization")
    assert steps[0] == ["Ġ", "t", "o", "k", "e", "n", "i", "z", "a", "t", "i", "o", "n"]
    assert steps[-1] == ["Ġtoken", "ization"]
    for before, after in zip(steps, steps[1:]):
        assert "".join(before) == "".join(after)  # merging never changes the spelling
        assert len(after) < len(before)
    assert [tok.token_to_id[s] for s in steps[-1]] == tok.encode(" tokenization")


def test_token_bytes(tok):
    ids = tok.encode("The sky")
    assert [tok.token_bytes(i) for i in ids] == [b"The", b" sky"]
    emoji = tok.encode("😀")  # 4 UTF-8 bytes split over tokens
    assert b"".join(tok.token_bytes(i) for i in emoji) == "😀".encode()
    with pytest.raises(ValueError, match="out of range"):
        tok.token_bytes(tok.vocab_size)


def test_byte_to_unicode_table_is_a_bijection_onto_printables():
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("A")] == "A"


def test_bytes_missing_from_the_vocabulary_are_dropped(tok):
    # SmolLM2's vocabulary has no token for byte 0x04; the reference tokenizer drops it too
    assert 0x04 in tok.unencodable_bytes
    assert tok.encode("a\x04b") == [81, 82]


def test_chat_template_is_chatml_with_default_system_prompt(tok):
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                    "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\n")
    own_system = tok.apply_chat_template([{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}],
                                         add_generation_prompt=False)
    assert own_system == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    assert tok.encode_chat("Hi") == tok.encode(text)
    with pytest.raises(ValueError, match="role"):
        tok.apply_chat_template([{"text": "Hi"}])


def test_stop_ids(tok):
    assert tok.stop_ids == [0, 2]
