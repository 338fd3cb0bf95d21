"""The composition root's mappings of serve settings into the rooms below: the prompt
cache's tiers from the flags, else from this machine's free memory and disk."""

from __future__ import annotations

from parlance.cli.wiring import prompt_cache_settings
from parlance.config import ServeConfig
from parlance.engines.llamacpp.prompt_cache import DEFAULT_RAM_CAP, CacheSettings
from parlance.engines.llamacpp.prompt_cache_disk import DEFAULT_DISK_CAP


def test_the_flags_set_the_tiers_and_zero_turns_them_off(tmp_path, capsys):
    on = prompt_cache_settings(ServeConfig(data_dir=str(tmp_path), prompt_cache_mb=64,
                                           prompt_cache_disk_mb=128))
    assert on == CacheSettings(64 << 20, 128 << 20, tmp_path / "prompt-cache")
    assert "64 MiB in RAM, 128 MiB on disk" in capsys.readouterr().err
    off = prompt_cache_settings(ServeConfig(data_dir=str(tmp_path), prompt_cache_mb=0,
                                            prompt_cache_disk_mb=0))
    assert not off.enabled
    assert "off in RAM, off on disk" in capsys.readouterr().err
    default = prompt_cache_settings(ServeConfig(data_dir=str(tmp_path)))
    assert 0 < default.ram_bytes <= DEFAULT_RAM_CAP
    assert 0 < default.disk_bytes <= DEFAULT_DISK_CAP
