"""The prompt of an editor's fill-in-the-middle request, laid out from the model's own
FIM tokens as llama.cpp's server lays out `/infill`:

    [FIM_REP]myproject\\n [FIM_SEP]{filename}\\n{text} … [FIM_SEP]filename\\n
    [BOS?][FIM_PRE]{prefix}{cursor}[FIM_SUF]{suffix}[FIM_MID]

The extra files come first (with the REP and SEP tokens where the model has them, as
Qwen2.5-Coder's repo-level layout; else each after a "--- snippet ---" line). Within a
batch the prefix keeps its last three quarters and the suffix its first quarter (less
the cursor's tokens); the extra files fill what the context leaves beside the
batch and twice the answer's budget, their end kept.
"""

from __future__ import annotations

import llama_cpp

from parlance.core.errors import InvalidRequest
from parlance.core.request import TextInput
from parlance.engines.llamacpp.model import LlamaModel

SNIPPET = "\n\n--- snippet ---\n\n"
REPOSITORY = "myproject\n"  # llama.cpp's placeholder repository name
CURRENT_FILE = "filename\n"  # and the current file's


def fim_required(model: LlamaModel, param: str) -> tuple[int, int, int]:
    fim = model.fim_tokens()
    if fim is None:
        raise InvalidRequest("This model has no fill-in-the-middle tokens (its GGUF names "
                             "no FIM prefix, suffix and middle tokens): use a code model "
                             "trained for infill.", param=param)
    return fim


def infill_tokens(model: LlamaModel, prompt: TextInput, context: int, max_tokens: int,
                  param: str = "input_suffix") -> list[int]:
    pre, suf, mid = fim_required(model, param)
    n_batch = model.settings.n_batch

    def tokens(text: str) -> list[int]:
        return model.tokenize(text, add_special=False, parse_special=False)

    rep = llama_cpp.llama_vocab_fim_rep(model.vocab)
    sep = llama_cpp.llama_vocab_fim_sep(model.vocab)
    extra: list[int] = []
    if rep >= 0:
        extra += [rep, *tokens(REPOSITORY)]
    for chunk in prompt.extra:
        extra += [sep, *tokens(chunk.filename + "\n")] if sep >= 0 else tokens(SNIPPET)
        extra += tokens(chunk.text)
    if sep >= 0:
        extra += [sep, *tokens(CURRENT_FILE)]
    prefix, suffix, cursor = (tokens(prompt.text or ""), tokens(prompt.suffix or ""),
                              tokens(prompt.cursor))
    prefix = prefix[max(0, len(prefix) - 3 * (n_batch // 4)):]
    suffix = suffix[:max(0, n_batch // 4 - (2 + len(cursor)))]
    room = max(0, context - n_batch - 2 * max_tokens)
    extra = extra[max(0, len(extra) - room):] if room else []
    bos = [model.bos] if model.add_bos and model.bos >= 0 else []
    return [*extra, *bos, pre, *prefix, *cursor, suf, *suffix, mid]
