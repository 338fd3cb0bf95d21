"""Files shipped in a package (`server/endpoints/packaged_files.py`), as the web chat
page and the API viewer serve them: only the files found in the folder with the
caller's suffixes, each with its media type, the caller's policy and caching, and one
404 for everything else (the app's unknown URL, in the path's envelope)."""

from __future__ import annotations

import pytest
from starlette.exceptions import HTTPException

from parlance.server.endpoints.packaged_files import PackagedFiles

POLICY = "default-src 'none'"


def viewer(suffixes: frozenset[str]) -> PackagedFiles:
    return PackagedFiles("parlance.server.openapi", "viewer", suffixes, policy=POLICY,
                         cache="max-age=60", referrer="same-origin")


def test_a_file_is_sent_with_its_type_the_callers_policy_and_caching():
    files = viewer(frozenset({".js", ""}))
    script = files.send("docs.js")
    assert script.media_type == "text/javascript; charset=utf-8"
    assert script.headers["content-security-policy"] == POLICY
    assert script.headers["x-content-type-options"] == "nosniff"
    assert script.headers["referrer-policy"] == "same-origin"
    assert script.headers["cache-control"] == "max-age=60"
    assert b"openapi.json" in script.body
    assert files.send("LICENSE").media_type == "text/plain; charset=utf-8"  # no suffix


def test_only_the_callers_suffixes_are_files():
    files = viewer(frozenset({".css"}))
    assert files.names() == ["swagger-ui.css"]
    assert "index.html" not in files and "docs.js" not in files


@pytest.mark.parametrize("name", ["docs.js/", "../document.py", "../viewer/docs.js",
                                  "/docs.js", "%2e%2e/document.py", "./docs.js", "",
                                  "__init__.py", "index.html"])
def test_no_other_name_reaches_a_file(name):
    with pytest.raises(HTTPException) as refused:
        viewer(frozenset({".js"})).send(name)
    assert refused.value.status_code == 404


def test_nested_files_go_by_their_path_in_the_folder():
    files = PackagedFiles("parlance.server.web", "static", frozenset({".js"}), policy=POLICY,
                          cache="no-cache")
    assert "vendor/purify.es.js" in files and "purify.es.js" not in files
    assert files.send("vendor/purify.es.js").status_code == 200


def test_a_suffix_without_a_media_type_is_refused_up_front():
    with pytest.raises(ValueError, match=".py"):
        viewer(frozenset({".js", ".py"}))
