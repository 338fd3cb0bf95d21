"""Tokens as tooling sees them (llama-server's `/tokenize`, `/detokenize`,
`/apply-template`): what the model's tokenizer makes of a text, and back."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenizeRequest:
    model: str | None
    content: tuple[str | int, ...]  # texts to tokenize and token ids kept as they are
    add_special: bool = False  # BOS (and what else the tokenizer adds) before the first text
    parse_special: bool = True  # "<|im_start|>" in a text is that special token


@dataclass(frozen=True, slots=True)
class Token:
    id: int
    piece: bytes  # its raw bytes (special tokens spelled out)


@dataclass(frozen=True, slots=True)
class DetokenizeRequest:
    model: str | None
    tokens: tuple[int, ...]
