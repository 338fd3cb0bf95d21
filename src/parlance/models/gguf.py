"""Read a GGUF file's header metadata without llama.cpp.

Listing models must not load them: this reads only the key/value header and the tensor
info table (never tensor data), so describing a multi-gigabyte model costs milliseconds
(~20 ms for SmolLM2, mostly walking its vocabulary). Large arrays (tokenizer vocabularies,
merges) are skipped, not kept.

A file in the models directory may come from anywhere (a download names only its
first four bytes), so the reader is bounded: arrays are walked with a stack of their
own (never recursion) and at most `_MAX_NESTING` deep; every count and length must
fit in what is left of the file; the values walked and the values kept have budgets.
A header past any bound is a ValueError like any other malformed file.
Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md (v2 and v3, little-endian).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["GgufHeader", "GgufInfo", "describe", "format_params", "header_digest",
           "quantization_name", "read_gguf", "read_gguf_header", "read_gguf_metadata"]

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
_CHUNK = 1 << 20
# Strings and arrays longer than this are skipped rather than kept (nothing we report is that big).
_MAX_KEPT_STRING = 1 << 20
_MAX_KEPT_ARRAY = 256
# Bounds against a hostile header. llama.cpp itself reads no array of arrays and no tensor
# of more than 4 dimensions; the largest vocabularies (~260K tokens, ~500K merges) walk
# about a million values, and keeping all of one header's arrays a few million.
_MAX_NESTING = 8
_MAX_DIMS = 4
_MAX_WALKED = 1 << 24
_MAX_KEPT_VALUES = 1 << 23
_MAX_KEPT_BYTES = 1 << 26

# GGUF value types with a fixed size: type id -> struct format.
_FIXED: dict[int, str] = {
    0: "<B",  # uint8
    1: "<b",  # int8
    2: "<H",  # uint16
    3: "<h",  # int16
    4: "<I",  # uint32
    5: "<i",  # int32
    6: "<f",  # float32
    7: "<?",  # bool
    10: "<Q",  # uint64
    11: "<q",  # int64
    12: "<d",  # float64
}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
# The fewest bytes a value of each type takes: a count of N of them needs N times that.
_MIN_SIZE = {**{t: struct.calcsize(f) for t, f in _FIXED.items()}, _STRING: 8, _ARRAY: 12}
_MIN_KV = 8 + 4 + 1  # key length, value type, the smallest value
_MIN_TENSOR = 8 + 4 + 4 + 8  # name length, dimension count, ggml type, offset

# llama.cpp's `enum llama_ftype` (include/llama.h); 4-6 and 33-35 were removed upstream.
_FTYPE_NAMES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
    16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
    22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}  # fmt: skip
_FTYPE_GUESSED = 1024  # flag llama.cpp ORs in when the type was inferred, not read


@dataclass(frozen=True)
class GgufInfo:
    """What a model listing shows about a GGUF file, read from its header alone.

    For one shard of a split model, `parameter_count` is None (the shard holds only part of
    the tensors), while `bits_per_weight` is still that shard's ratio, a fair estimate.
    """

    architecture: str | None
    name: str | None
    organization: str | None
    file_type: int | None
    quantization: str | None
    bits_per_weight: float | None
    parameter_count: int | None
    params_string: str | None
    context_length: int | None
    has_chat_template: bool
    chat_template: str | None
    size_bytes: int

    @property
    def publisher(self) -> str | None:
        """LM Studio's name for `general.organization`."""
        return self.organization


class _Malformed(Exception):
    pass


class _Truncated(_Malformed):
    def __init__(self) -> None:
        super().__init__("truncated GGUF header")


class _Array:
    """An array being read: its element type, how many elements are left, and the
    elements kept (None: walked, not kept)."""

    __slots__ = ("count", "etype", "items", "left")

    def __init__(self, etype: int, count: int, items: list[Any] | None, *,
                 done: bool = False) -> None:
        self.etype, self.count, self.items = etype, count, items
        self.left = 0 if done else count


class _Reader:
    """Buffered little-endian reader that can skip cheaply and never reads past the file."""

    def __init__(self, file: BinaryIO, size: int, max_array: int = _MAX_KEPT_ARRAY) -> None:
        self._file = file
        self._size = size
        self._max_array = max_array
        self._buf = b""
        self._pos = 0  # position in _buf
        self._base = 0  # file offset of _buf[0]
        self._walked = 0  # values read or skipped one by one
        self._kept_values = 0  # elements of kept arrays
        self._kept_bytes = 0  # bytes of kept strings
        self.array_length = 0  # element count of the last array read or skipped

    def tell(self) -> int:
        return self._base + self._pos

    def walk(self, count: int, size: int) -> None:
        """`count` values of at least `size` bytes each are next: they must fit in the
        rest of the file, and within the budget of values walked one by one."""
        if count * size > self._size - self.tell():
            raise _Truncated
        self._walked += count
        if self._walked > _MAX_WALKED:
            raise _Malformed(f"more than {_MAX_WALKED} values in the GGUF header")

    def _need(self, n: int) -> None:
        if self.tell() + n > self._size:
            raise _Truncated
        if self._pos + n > len(self._buf):
            self._base += self._pos
            self._file.seek(self._base)
            self._buf = self._file.read(max(n, _CHUNK))
            self._pos = 0
            if len(self._buf) < n:
                raise _Truncated

    def read(self, n: int) -> bytes:
        self._need(n)
        data = self._buf[self._pos : self._pos + n]
        self._pos += n
        return data

    def unpack(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        self._need(n)
        (value,) = struct.unpack_from(fmt, self._buf, self._pos)
        self._pos += n
        return value

    def skip(self, n: int) -> None:
        if self.tell() + n > self._size:
            raise _Truncated
        if self._pos + n <= len(self._buf):
            self._pos += n
        else:  # leave the buffer; the next read refills from the new offset
            self._base, self._pos, self._buf = self.tell() + n, 0, b""

    def _skip_strings(self, count: int) -> None:
        """Skip `count` length-prefixed strings: the hot loop for vocabularies and merges."""
        unpack_from = _U64.unpack_from
        while count:
            buf, pos, end = self._buf, self._pos, len(self._buf) - 8
            # Fast path within the current buffer; fall back to skip() at its edge.
            while count and pos <= end:
                n = unpack_from(buf, pos)[0]
                if pos + 8 + n > len(buf):
                    break
                pos += 8 + n
                count -= 1
            self._pos = pos
            if count:
                self.skip(self.unpack("<Q"))
                count -= 1

    def string(self, keep: bool = True) -> str | None:
        n = self.unpack("<Q")
        if not keep or n > _MAX_KEPT_STRING or self._kept_bytes + n > _MAX_KEPT_BYTES:
            self.skip(n)
            return None
        self._kept_bytes += n
        return self.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, keep: bool = True) -> Any:
        """Read (or, with keep=False, skip) one value; None means skipped. Arrays of
        arrays are walked with a stack, never by recursion."""
        if vtype != _ARRAY:
            return self._scalar(vtype, keep)
        root = self._array(keep, depth=1)
        stack = [root]
        while stack:
            top = stack[-1]
            if not top.left:
                stack.pop()
                if stack and stack[-1].items is not None:
                    stack[-1].items.append(top.items)
                continue
            top.left -= 1
            keep_item = top.items is not None
            if top.etype == _ARRAY:
                stack.append(self._array(keep_item, depth=len(stack) + 1))
                continue
            item = self._scalar(top.etype, keep_item)
            if top.items is not None:
                top.items.append(item)
        self.array_length = root.count  # the outer count, not the last nested one's
        return root.items

    def _scalar(self, vtype: int, keep: bool) -> Any:
        fmt = _FIXED.get(vtype)
        if fmt is not None:
            return self.unpack(fmt)
        if vtype == _STRING:
            return self.string(keep)
        raise _Malformed(f"unknown GGUF value type {vtype} at offset {self.tell()}")

    def _array(self, keep: bool, depth: int) -> _Array:
        """An array's header; its elements are left to read, unless skipped at once."""
        if depth > _MAX_NESTING:
            raise _Malformed(f"arrays nested more than {_MAX_NESTING} deep")
        etype, count = self.unpack("<I"), self.unpack("<Q")
        size = _MIN_SIZE.get(etype)
        if size is None:
            if count:
                raise _Malformed(f"unknown GGUF value type {etype} at offset {self.tell()}")
            size = 0
        keep = (keep and count <= self._max_array
                and self._kept_values + count <= _MAX_KEPT_VALUES)
        if keep:
            self._kept_values += count
        elif etype in _FIXED:
            self.skip(count * size)
            return _Array(etype, count, None, done=True)
        elif etype == _STRING:
            self.walk(count, size)
            self._skip_strings(count)
            return _Array(etype, count, None, done=True)
        self.walk(count, size)
        return _Array(etype, count, [] if keep else None)


@dataclass(frozen=True)
class GgufHeader:
    """The header's kept key/values, the element counts of the arrays it left out (a
    vocabulary's size is `array_lengths["tokenizer.ggml.tokens"]`), and the file layout."""

    metadata: dict[str, Any]
    array_lengths: dict[str, int]
    parameter_count: int
    data_offset: int
    size: int


def _read_header(path: Path, max_array: int = _MAX_KEPT_ARRAY) -> GgufHeader:
    size = path.stat().st_size
    with path.open("rb") as f:
        r = _Reader(f, size, max_array)
        try:
            if r.read(4) != _MAGIC:
                raise ValueError(f"{path}: not a GGUF file (bad magic)")
            version = r.unpack("<I")
            if version not in (2, 3):
                raise ValueError(f"{path}: unsupported GGUF version {version} (need 2 or 3)")
            n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
            r.walk(n_kv, _MIN_KV)
            metadata: dict[str, Any] = {}
            array_lengths: dict[str, int] = {}
            for _ in range(n_kv):
                key = r.string() or ""
                vtype = r.unpack("<I")
                value = r.value(vtype)
                if value is not None:
                    metadata[key] = value
                elif vtype == _ARRAY:
                    array_lengths[key] = r.array_length
            params, last_offset = 0, -1
            r.walk(n_tensors, _MIN_TENSOR)
            for _ in range(n_tensors):
                r.string(keep=False)
                n_dims = r.unpack("<I")
                if n_dims > _MAX_DIMS:
                    raise _Malformed(f"a tensor with {n_dims} dimensions")
                count = 1
                for _ in range(n_dims):
                    count *= r.unpack("<Q")
                params += count
                r.skip(4)  # ggml type
                last_offset = max(last_offset, r.unpack("<Q"))
        except _Malformed as exc:
            raise ValueError(f"{path}: {exc}") from None
    alignment = metadata.get("general.alignment")
    if not isinstance(alignment, int) or alignment <= 0:
        alignment = _DEFAULT_ALIGNMENT
    data_offset = -(-r.tell() // alignment) * alignment
    # Every tensor holds at least one byte, so the file must reach past the last one's start.
    if data_offset > size or data_offset + last_offset >= size:
        raise ValueError(f"{path}: truncated GGUF file (tensor data missing)")
    return GgufHeader(metadata, array_lengths, params, data_offset, size)


def read_gguf_header(path: Path, *, whole_arrays: bool = False) -> GgufHeader:
    """The header and layout; ValueError if it is not GGUF or is truncated.
    `whole_arrays` keeps every array (a vocabulary too: tens of thousands of strings)."""
    return _read_header(Path(path), 1 << 62 if whole_arrays else _MAX_KEPT_ARRAY)


def header_digest(path: Path, header: GgufHeader) -> str:
    """`sha256:` of the file's header and tensor table (everything before the tensor
    data): names the model's content well (metadata, tensor names, types and shapes)
    at the cost of a few megabytes read, where hashing the weights would read them all."""
    digest = hashlib.sha256()
    left = header.data_offset
    with Path(path).open("rb") as f:
        while left > 0:
            chunk = f.read(min(left, _CHUNK))
            if not chunk:
                raise ValueError(f"{path}: truncated GGUF header")
            digest.update(chunk)
            left -= len(chunk)
    return "sha256:" + digest.hexdigest()


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """The header's key/values: scalars, strings, and small arrays (large ones are left out)."""
    return _read_header(Path(path)).metadata


def quantization_name(file_type: int | None) -> str | None:
    """llama.cpp's short name for a `general.file_type` value, e.g. 15 -> "Q4_K_M"."""
    if file_type is None:
        return None
    return _FTYPE_NAMES.get(file_type & ~_FTYPE_GUESSED)


def format_params(count: int) -> str:
    """Parameter count the way model names show it: 134_515_008 -> "135M", 1.71e9 -> "1.7B"."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            value = count / scale
            text = f"{value:.0f}" if value >= 9.95 else f"{value:.1f}".removesuffix(".0")
            return text + suffix
    return str(count)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_gguf(path: Path) -> GgufInfo:
    """Describe a GGUF model from its header; ValueError if it is not GGUF or is truncated."""
    return describe(_read_header(Path(path)))


def describe(header: GgufHeader) -> GgufInfo:
    """What a listing shows of a model, from its header."""
    meta = header.metadata
    arch = _str(meta.get("general.architecture"))
    file_type = _int(meta.get("general.file_type"))
    split_count = _int(meta.get("split.count")) or 1
    params = header.parameter_count or None
    bpw = None
    if params:
        bpw = round((header.size - header.data_offset) * 8 / params, 2)
    if split_count > 1:
        params = None
    template = _str(meta.get("tokenizer.chat_template"))
    size_label = _str(meta.get("general.size_label"))
    return GgufInfo(
        architecture=arch,
        name=_str(meta.get("general.name")),
        organization=_str(meta.get("general.organization")),
        file_type=file_type,
        quantization=quantization_name(file_type),
        bits_per_weight=bpw,
        parameter_count=params,
        params_string=size_label or (format_params(params) if params else None),
        context_length=_int(meta.get(f"{arch}.context_length")) if arch else None,
        has_chat_template=template is not None,
        chat_template=template,
        size_bytes=header.size,
    )
