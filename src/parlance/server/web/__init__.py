"""The web chat page's files (`static/`: HTML, plain ES modules, CSS and the vendored
markdown renderer and sanitizer), shipped as package data and served by
`server/endpoints/web.py`. Nothing is built or fetched at run time."""
