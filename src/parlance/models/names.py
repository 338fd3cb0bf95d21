"""Which model a request's name means: among the loaded models (`resolve`), or among
every model a request may name, loaded or not (`spec`); an omitted name means the
default model. Names given at run time (Ollama's `/api/copy`) resolve like a spec's
own aliases, tags included, without changing the spec."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from parlance.core.errors import InvalidRequest, ModelNotFound
from parlance.models.loaded import Loaded, ServedModel
from parlance.models.registry import ModelSpec, name_problem, name_variants, named

MAX_COPIES = 1000  # names given at run time (each copy rewrites the whole kept list)


class Names:
    def __init__(self, loaded: Loaded, default_spec: ModelSpec | None,
                 catalog: Callable[[], list[ModelSpec]]) -> None:
        self._loaded = loaded
        # The model a request without `model` gets: the one the server started with,
        # loaded again on demand after an unload.
        self.default_spec = default_spec
        self._catalog = catalog
        self._copies: dict[str, str] = {}  # name -> id of the model it names

    @property
    def default(self) -> ServedModel | None:
        """The default model while it is loaded (a server started without one: the
        first loaded model)."""
        if self.default_spec is None:
            return next(iter(self._loaded), None)
        return next((m for m in self._loaded.local if m.spec.id == self.default_spec.id), None)

    def resolve(self, requested: str | None) -> tuple[ServedModel, str]:
        """A loaded model (and the id to echo). An omitted model means the default one."""
        default = self.default
        if not requested and default is not None:
            return default, default.spec.id
        model = named(self._loaded.local, requested, lambda m: self._with_copies(m.spec))
        if model is None:
            model = named(self._loaded.remote(), requested,
                          lambda m: self._with_copies(m.spec))
        if model is not None and requested:
            return model, requested
        raise ModelNotFound(requested or "")

    def is_loaded(self, requested: str | None) -> bool:
        try:
            self.resolve(requested)
        except ModelNotFound:
            return False
        return True

    def available(self) -> list[ModelSpec]:
        """Every model a request may name: the loaded ones, then the catalog's."""
        specs = [m.spec for m in self._loaded.local]
        if self.default_spec is not None and self.default is None:
            specs.append(self.default_spec)
        specs += [m.spec for m in self._loaded.remote()]
        ids = {s.id for s in specs}
        return specs + [s for s in self._catalog() if s.id not in ids]

    def spec(self, requested: str | None) -> ModelSpec:
        """The spec a request names; none named: the default model's."""
        if not requested and self.default_spec is not None:
            return self.default_spec
        spec = named(self.available(), requested, self._with_copies)
        if spec is not None:
            return spec
        raise ModelNotFound(requested or "")

    # -- names given at run time ----------------------------------------------------

    def _with_copies(self, spec: ModelSpec) -> ModelSpec:
        names = tuple(name for name, target in self._copies.items() if target == spec.id)
        return replace(spec, aliases=(*spec.aliases, *names)) if names else spec

    @property
    def copies(self) -> dict[str, str]:
        """Names given at run time: name -> the id of the model it names."""
        return dict(self._copies)

    def copy(self, source: str, destination: str) -> ModelSpec:
        """Give the model `source` names (id, alias, copy; any tag) one more name. A
        name that is already a copy is pointed anew; one that names a model otherwise
        is refused, so a copy never hides a configured name."""
        spec = self.spec(source)
        problem = name_problem(destination)
        if problem is not None:
            raise InvalidRequest(f"destination is invalid: {problem}", param="destination")
        variants = name_variants(destination)
        owner = next((s for s in self.available() if any(v in s.names() for v in variants)),
                     None)
        if owner is not None and owner.id != spec.id:
            raise InvalidRequest(f"destination '{destination}' already names the model "
                                 f"'{owner.id}'", param="destination")
        for variant in variants:
            self._copies.pop(variant, None)
        if owner is None:  # (a configured name of the model itself needs no copy)
            if len(self._copies) >= MAX_COPIES:
                raise InvalidRequest(f"This server keeps at most {MAX_COPIES} copied names; "
                                     "delete some first (DELETE /api/delete).",
                                     param="destination")
            self._copies[destination] = spec.id
        return spec

    def forget_copy(self, name: str) -> str | None:
        """Remove the run-time name `name` (any tag variant); the id it named, or None."""
        for variant in name_variants(name):
            if variant in self._copies:
                return self._copies.pop(variant)
        return None

    def forget_copies_of(self, model_id: str) -> list[str]:
        """Remove every run-time name of `model_id` (its file is gone)."""
        gone = [name for name, target in self._copies.items() if target == model_id]
        for name in gone:
            del self._copies[name]
        return gone

    def restore_copies(self, copies: dict[str, str]) -> None:
        """Names kept from an earlier run (see models/copies.py), as they were given."""
        self._copies.update(copies)
