"""The server's OpenAPI document (`GET /openapi.json`), built from the routes the app
serves and the dialects' own wire models, and the vendored viewer (`GET /docs`)."""
