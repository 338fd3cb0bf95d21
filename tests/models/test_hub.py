"""`models.hub`: catalog names (`owner/repo[:QUANT]`, `hf.co/…`) and the GGUF file of a
repository each one means."""

from __future__ import annotations

import pytest

from parlance.core.errors import InvalidRequest
from parlance.models.hub import HubName, choose_file, hub_name

# (the file list of a typical GGUF repository, e.g. bartowski's or unsloth's)
FILES = [".gitattributes", "README.md", "Model-IQ4_XS.gguf", "Model-Q2_K.gguf",
         "Model-Q4_K_M.gguf", "Model-Q4_K_S.gguf", "Model-Q8_0.gguf", "Model-f16.gguf",
         "mmproj-Model-f16.gguf", "Model-Q4_K.gguf",
         "Model-BF16/Model-BF16-00001-of-00002.gguf",
         "Model-BF16/Model-BF16-00002-of-00002.gguf"]


def test_names():
    assert hub_name("owner/repo") == HubName("owner/repo", None)
    assert hub_name("hf.co/owner/Repo-GGUF:Q4_K_M") == HubName("owner/Repo-GGUF", "Q4_K_M")
    assert hub_name("huggingface.co/o/r:q8_0") == HubName("o/r", "q8_0")
    for not_one in ("smollm2", "https://x.org/a.gguf", "a/b/c", "../x", "o/..", "o/r:",
                    "/r", "o/r:Q4 K"):
        assert hub_name(not_one) is None, not_one


def test_the_quant_named_is_the_file_whose_name_carries_it_as_a_word():
    assert choose_file(FILES, HubName("o/r", "Q4_K_M")) == "Model-Q4_K_M.gguf"
    assert choose_file(FILES, HubName("o/r", "q8_0")) == "Model-Q8_0.gguf"  # any case
    assert choose_file(FILES, HubName("o/r", "Q4_K")) == "Model-Q4_K.gguf"  # not Q4_K_M
    assert choose_file(FILES, HubName("o/r", "F16")) == "Model-f16.gguf"  # not mmproj's
    with pytest.raises(InvalidRequest, match="no Q5_K_M GGUF; it has IQ4_XS, Q2_K"):
        choose_file(FILES, HubName("o/r", "Q5_K_M"))
    with pytest.raises(InvalidRequest, match="split into parts"):
        choose_file(FILES, HubName("o/r", "BF16"))


def test_without_a_quant_the_preference_order_chooses():
    assert choose_file(FILES, HubName("o/r", None)) == "Model-Q4_K_M.gguf"
    assert choose_file(["a-Q8_0.gguf", "a-Q6_K.gguf"], HubName("o/r", None)) == "a-Q6_K.gguf"
    assert choose_file(["only.gguf"], HubName("o/r", None)) == "only.gguf"
    with pytest.raises(InvalidRequest, match="no GGUF"):
        choose_file(["README.md"], HubName("o/r", None))
