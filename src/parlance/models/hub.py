"""Model names of a catalog that speaks Hugging Face's API, as `ollama pull` and
llama-server's `-hf` take them: `owner/repo[:QUANT]` or `hf.co/owner/repo[:QUANT]`,
resolved to one GGUF file of the repository and the link that downloads it.

The catalog (`--catalog-url`, default https://huggingface.co) answers
`GET /api/models/{owner}/{repo}` with the repository's files (`siblings`, each an
`rfilename`) and serves each at `/{owner}/{repo}/resolve/main/{file}`. Of the
repository's single-file GGUFs (projectors, `mmproj-*`, and the parts of split files
left out) the file is the one whose name carries QUANT as a word (`:q4_k_m` finds
`Model-Q4_K_M.gguf`, not `Model-IQ4_K_M.gguf`); without QUANT the first of `PREFERENCE`
the repository has (Q4_K_M first, as Hugging Face and llama.cpp choose), else the
repository's only GGUF, else the first by name. The catalog is reached through the
download guard (a private catalog needs its host allow-listed, as downloads do)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx2

from parlance.core.errors import InvalidRequest, Unavailable

DEFAULT_CATALOG = "https://huggingface.co"
PREFIXES = ("hf.co/", "huggingface.co/")  # (as Ollama's names carry them)
PREFERENCE = ("Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q5_K_S", "Q5_0", "Q6_K", "Q8_0",
              "IQ4_XS", "IQ4_NL", "Q3_K_M", "Q3_K_L", "Q3_K_S", "IQ3_M", "Q2_K", "BF16",
              "F16", "F32")
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_NAME = re.compile(rf"({_PART})/({_PART})(?::([A-Za-z0-9._-]{{1,32}}))?")
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
_QUANT_SHAPE = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|[BF]F?\d{2})(?![A-Za-z0-9])",
                          re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class HubName:
    repo: str  # owner/repo
    quant: str | None


def hub_name(name: str) -> HubName | None:
    """`name` as a catalog name, or None when it is none (a URL, a local name)."""
    bare = name
    for prefix in PREFIXES:
        if bare.lower().startswith(prefix):
            bare = bare[len(prefix):]
            break
    match = _NAME.fullmatch(bare)
    if match is None or ".." in bare:
        return None
    owner, repo, quant = match.groups()
    return HubName(f"{owner}/{repo}", quant)


def choose_file(files: list[str], name: HubName) -> str:
    """The repository's GGUF file `name` means (see the module's doc); InvalidRequest
    naming what the repository has when none fits."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf")
                   and "mmproj" not in f.rsplit("/", 1)[-1].lower())
    whole = [f for f in ggufs if not _SPLIT.search(f)]
    if not ggufs:
        raise InvalidRequest(f"The repository {name.repo} has no GGUF file.",
                             param="model", code="no_gguf")
    wanted = [name.quant] if name.quant else list(PREFERENCE)
    for quant in wanted:
        found = [f for f in whole if _carries(f, quant)]
        if found:
            return min(found, key=lambda f: (len(f), f))
        if name.quant and any(_carries(f, quant) for f in ggufs):
            raise InvalidRequest(f"{name.repo}'s {quant} comes split into parts; Parlance "
                                 "pulls single-file GGUFs only.", param="model",
                                 code="split_gguf")
    if name.quant:
        raise InvalidRequest(f"The repository {name.repo} has no {name.quant} GGUF; it has "
                             f"{', '.join(quants(whole)) or 'none as one file'}.",
                             param="model", code="no_such_quantization")
    if not whole:
        raise InvalidRequest(f"{name.repo}'s GGUFs come split into parts; Parlance pulls "
                             "single-file GGUFs only.", param="model", code="split_gguf")
    return whole[0]


def quants(files: list[str]) -> list[str]:
    """The quantizations the file names carry, as written (for a refusal)."""
    found = (_QUANT_SHAPE.search(f.rsplit("/", 1)[-1]) for f in files)
    return list(dict.fromkeys(m.group(1).upper() for m in found if m))


def _carries(file: str, quant: str) -> bool:
    stem = file.rsplit("/", 1)[-1]
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(quant)}(?![A-Za-z0-9_])", stem,
                     re.IGNORECASE) is not None


def file_url(catalog: str, repo: str, file: str) -> str:
    return f"{catalog.rstrip('/')}/{repo}/resolve/main/{quote(file)}"


def catalog_host(catalog: str) -> str:
    return (urlsplit(catalog).hostname or "").lower()


async def resolve(name: HubName, catalog: str, client: httpx2.AsyncClient) -> str:
    """The download link of the file `name` means in `catalog`'s repository."""
    url = f"{catalog.rstrip('/')}/api/models/{name.repo}"
    try:
        answer = await client.get(url)
    except httpx2.HTTPError as exc:
        raise Unavailable(f"The model catalog {catalog} could not be reached for "
                          f"{name.repo}: {exc or type(exc).__name__}",
                          code="catalog_unavailable") from None
    except ValueError as exc:  # (the guard refused its address)
        raise InvalidRequest(f"The model catalog {catalog} may not be reached: {exc}",
                             param="model", code="catalog_refused") from None
    if answer.status_code in (401, 403, 404):
        raise InvalidRequest(f"The model catalog {catalog} has no repository {name.repo} "
                             f"(HTTP {answer.status_code}; a gated or private one needs "
                             "its own link).", param="model", code="no_such_repository")
    if answer.status_code >= 400:
        raise Unavailable(f"The model catalog {catalog} answered HTTP {answer.status_code} "
                          f"for {name.repo}.", code="catalog_unavailable")
    return file_url(catalog, name.repo, choose_file(_files(answer), name))


def _files(answer: httpx2.Response) -> list[str]:
    try:
        body: Any = answer.json()
    except ValueError:
        body = None
    siblings = body.get("siblings") if isinstance(body, dict) else None
    if not isinstance(siblings, list):
        raise Unavailable("The model catalog's answer lists no files (no `siblings`).",
                          code="catalog_unavailable")
    return [s["rfilename"] for s in siblings
            if isinstance(s, dict) and isinstance(s.get("rfilename"), str)]
