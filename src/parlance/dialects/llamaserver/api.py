"""llama-server's own endpoints as the server serves them: `/infill`, rerank (also at Cohere's
`/v2/rerank`), `/tokenize`, `/detokenize` and `/apply-template` (whose chat body the
registry's OpenAI chat dialect reads, see `dialects.apis`), in llama-server's envelope."""

from __future__ import annotations

from typing import Any

from parlance.dialects import api
from parlance.dialects.api import Routes, Services
from parlance.dialects.llamaserver import PATHS, render_error
from parlance.dialects.llamaserver.infill import Infill
from parlance.dialects.llamaserver.rerank import Rerank
from parlance.dialects.llamaserver.tokens import Detokenize, Tokenize


def routes(services: Services) -> Routes:
    rerank = Rerank()
    # (/infill answers an array for n_cmpl > 1, as llama-server does: a list `render`)
    infill: Any = Infill()
    reranking = ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking", "/v2/rerank")
    return Routes(generation=(("/infill", infill),),
                  answering=(("/tokenize", Tokenize()), ("/detokenize", Detokenize()),
                             *((path, rerank) for path in reranking)))


API = api.API(
    name="llama-server", package="llamaserver", prefixes=PATHS, render_error=render_error,
    routes=routes,
    examples={Tokenize.body_model: {"content": "Hello world!", "with_pieces": True},
              Detokenize.body_model: {"tokens": [19556, 905, 17]},
              Infill.body_model: {"input_prefix": "def add(a, b):\n    ",
                                  "input_suffix": "\n", "n_predict": 16},
              Rerank.body_model: {"query": "What is a panda?", "top_n": 2,
                                  "documents": ["hi", "The giant panda is a bear species "
                                                "endemic to China."]}})
