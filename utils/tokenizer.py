"""Byte-level BPE tokenizer (GPT-2 style), built from the GGUF's vocabulary and merges.

Text -> token ids in four steps, each one a method you can call on its own:
1. `split_special`: cut out special tokens such as <|im_start|> (each becomes one id);
2. `pre_tokenize`: split the rest into words with regular expressions (SmolLM2 first splits off
   every digit, then applies GPT-2's pattern: letters, numbers, punctuation, whitespace runs);
3. each word's UTF-8 bytes become printable characters (GPT-2's byte-to-unicode table: a space is
   'Ġ', a newline 'Ċ'), so every byte sequence can be spelled with the vocabulary;
4. `bpe`: merge adjacent symbols, always the pair that was learned first, until no learned pair
   is left (`merge_steps` shows every step). Each final symbol is a token.
Decoding maps ids back to bytes and bytes to text, so decode(encode(text)) == text for any text
whose bytes the vocabulary can spell (see `unencodable_bytes`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import regex

# SmolLM2's pre-tokenizer (llama.cpp calls it "smollm"; Hugging Face: Digits(individual) then
# ByteLevel): every number character alone, then GPT-2's word pattern.
SMOLLM_PATTERNS = (
    r"\p{N}",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
)
PRE_TOKENIZERS = {"smollm": SMOLLM_PATTERNS, "gpt2": SMOLLM_PATTERNS[1:]}

DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


@functools.lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: each byte 0..255 -> one printable character (printable bytes map to
    themselves, the others to characters from U+0100 on)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Tokenizer:
    """Byte-level BPE. `tokens[i]` is token i spelled in byte-to-unicode characters."""

    def __init__(self, tokens: Sequence[str], merges: Sequence[str], special_tokens: Iterable[str],
                 pre_patterns: Sequence[str] = SMOLLM_PATTERNS, eos_token: str = "<|endoftext|>",
                 default_system_prompt: str | None = DEFAULT_SYSTEM_PROMPT) -> None:
        self.tokens = list(tokens)
        self.token_to_id = {tok: i for i, tok in enumerate(self.tokens)}
        self.merge_ranks = {tuple(m.split(" ")): rank for rank, m in enumerate(merges)}
        self.special_tokens = {tok: self.token_to_id[tok] for tok in special_tokens}
        self.special_ids = set(self.special_tokens.values())
        self.pre_patterns = [regex.compile(p) for p in pre_patterns]
        by_length = sorted(self.special_tokens, key=len, reverse=True)
        self._special_pattern = (regex.compile("(" + "|".join(map(regex.escape, by_length)) + ")")
                                 if by_length else None)
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {c: b for b, c in self.byte_encoder.items()}
        # bytes the vocabulary cannot spell; SmolLM2 lacks 21 of 256 (six rare control characters
        # and lead bytes of unassigned Unicode planes). Like Hugging Face's and llama.cpp's
        # tokenizers we drop them when encoding, so only text containing them fails to round-trip.
        self.unencodable_bytes = bytes(sorted(b for b, c in self.byte_encoder.items()
                                              if c not in self.token_to_id))
        self.eos_id = self.token_to_id[eos_token]
        self.default_system_prompt = default_system_prompt
        self._bpe_cache: dict[str, tuple[str, ...]] = {}

    @classmethod
    def from_gguf(cls, contents) -> Tokenizer:
        """From a `utils.gguf_weights.GGUFContents` (tokenizer.ggml.* tables)."""
        meta = contents.metadata
        model = meta.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(f"tokenizer model {model!r} is not supported: only byte-level BPE "
                             "('gpt2')")
        pre = meta.get("tokenizer.ggml.pre", "gpt2")
        if pre not in PRE_TOKENIZERS:
            raise ValueError(f"pre-tokenizer {pre!r} is not supported: choose one of "
                             f"{', '.join(PRE_TOKENIZERS)}")
        control = [tok for tok, kind in zip(contents.tokens, contents.token_types) if kind == 3]
        eos = contents.tokens[int(meta.get("tokenizer.ggml.eos_token_id", 0))]
        return cls(contents.tokens, contents.merges, control, PRE_TOKENIZERS[pre], eos_token=eos)

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    # --- encoding, step by step -----------------------------------------------------------------
    def split_special(self, text: str, allow_special: bool = True) -> list[str]:
        """Cut text into pieces; a special token's text becomes a piece of its own."""
        if not allow_special or self._special_pattern is None:
            return [text] if text else []
        return [piece for piece in self._special_pattern.split(text) if piece]

    def pre_tokenize(self, text: str) -> list[str]:
        """Split plain text (no special tokens) into words; the words concatenate to the text."""
        pieces = [text]
        for pattern in self.pre_patterns:
            pieces = [part for piece in pieces for part in _split_keep(pattern, piece)]
        return pieces

    def word_symbols(self, word: str) -> list[str]:
        """A word's UTF-8 bytes as byte-to-unicode characters: the symbols BPE starts from."""
        return [self.byte_encoder[b] for b in word.encode("utf-8")]

    def merge_steps(self, word: str) -> list[list[str]]:
        """Every state of BPE on one word: first its byte symbols, then one entry per merge."""
        symbols = self.word_symbols(word)
        steps = [list(symbols)]
        while len(symbols) > 1:
            pairs = set(zip(symbols, symbols[1:]))
            best = min(pairs, key=lambda pair: self.merge_ranks.get(pair, float("inf")))
            if best not in self.merge_ranks:
                break
            merged, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
            steps.append(list(symbols))
        return steps

    def bpe(self, word: str) -> tuple[str, ...]:
        """The final BPE symbols of one word (cached per word)."""
        if word not in self._bpe_cache:
            self._bpe_cache[word] = tuple(self.merge_steps(word)[-1])
        return self._bpe_cache[word]

    def encode(self, text: str, allow_special: bool = True) -> list[int]:
        """Token ids of text. allow_special=False treats '<|im_end|>' etc. as plain text."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        ids = []
        for piece in self.split_special(text, allow_special):
            if allow_special and piece in self.special_tokens:
                ids.append(self.special_tokens[piece])
                continue
            for word in self.pre_tokenize(piece):
                ids.extend(self.token_to_id[symbol] for symbol in self.bpe(word)
                           if symbol in self.token_to_id)
        return ids

    # --- decoding -------------------------------------------------------------------------------
    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token_id stands for (a special token: its text in UTF-8)."""
        if not 0 <= token_id < len(self.tokens):
            raise ValueError(f"token id {token_id} is out of range 0..{len(self.tokens) - 1}")
        token = self.tokens[token_id]
        if token_id in self.special_ids:
            return token.encode("utf-8")
        return bytes(self.byte_decoder[c] for c in token)

    def decode_bytes(self, ids: Iterable[int], skip_special: bool = False) -> bytes:
        return b"".join(self.token_bytes(int(i)) for i in ids
                        if not (skip_special and int(i) in self.special_ids))

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of token ids; bytes that do not form valid UTF-8 (a cut-off character) become
        U+FFFD."""
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")

    # --- chat -----------------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[dict[str, str]],
                            add_generation_prompt: bool = True) -> str:
        """ChatML, as in SmolLM2's template: `<|im_start|>role\\ncontent<|im_end|>\\n` per message,
        a default system message first if none is given, then `<|im_start|>assistant\\n`."""
        parts = []
        for i, message in enumerate(messages):
            if set(message) - {"role", "content"} or "role" not in message:
                raise ValueError(f"message {i} must be a dict with 'role' and 'content', "
                                 f"got {message!r}")
            if i == 0 and message["role"] != "system" and self.default_system_prompt:
                parts.append(f"<|im_start|>system\n{self.default_system_prompt}<|im_end|>\n")
            parts.append(f"<|im_start|>{message['role']}\n{message.get('content', '')}<|im_end|>\n")
        if add_generation_prompt:
            parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    def encode_chat(self, messages: Sequence[dict[str, str]] | str,
                    add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a chat; a str is taken as one user message."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return self.encode(self.apply_chat_template(messages, add_generation_prompt))

    @property
    def stop_ids(self) -> list[int]:
        """Ids that end generation: <|im_end|> and <|endoftext|> (where present) and the EOS id."""
        ids = [self.special_tokens[t] for t in ("<|im_end|>", "<|endoftext|>")
               if t in self.special_tokens]
        return sorted(set(ids) | {self.eos_id})


def _split_keep(pattern: regex.Pattern, text: str) -> list[str]:
    """Matches of pattern, plus the text between them, in order (nothing is dropped)."""
    parts, start = [], 0
    for match in pattern.finditer(text):
        if match.start() > start:
            parts.append(text[start:match.start()])
        if match.end() > match.start():
            parts.append(match.group())
        start = match.end()
    if start < len(text):
        parts.append(text[start:])
    return parts
