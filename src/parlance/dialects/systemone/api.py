"""System One as the server serves it: `/v1/systemone` (and `/systemone`), answered in
llama-server's envelope."""

from __future__ import annotations

from parlance.dialects import api
from parlance.dialects.api import Routes, Services, with_unversioned
from parlance.dialects.systemone import PATHS, SystemOne, render_error


def routes(services: Services) -> Routes:
    return Routes(answering=with_unversioned("/v1/systemone", SystemOne()))


API = api.API(
    name="System One", package="systemone", prefixes=PATHS, render_error=render_error,
    routes=routes,
    examples={SystemOne.body_model: {
        "state": "Customer message: I was charged twice and nobody has replied.",
        "questions": {
            "route": {"type": "choice", "instructions": "Which team should handle this?",
                      "criteria": {"billing": None, "shipping": None}},
            "angry": {"type": "noul", "instructions": "Is the customer angry?"}}}})
