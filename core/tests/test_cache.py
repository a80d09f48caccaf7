"""The compile cache that backends share (retarget.cache)."""

import pytest
from retarget import cache


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RETARGET_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_keys_delimit_their_parts():
    assert cache.key("ab", "c") != cache.key("a", "bc")
    assert cache.key("ab", "c") == cache.key("ab", b"c")


def test_an_entry_is_made_once_then_read_back(cache_dir):
    made = []
    for _ in range(2):
        assert cache.cached("demo", cache.key("k"), lambda: made.append(1) or b"bytes", suffix=".o") == b"bytes"
    assert made == [1] and [f.name for f in (cache_dir / "demo").iterdir()] == [cache.key("k") + ".o"]
    assert cache.usage() == [{"backend": "demo", "path": str(cache_dir / "demo"), "entries": 1, "bytes": 5}]
    assert cache.clear("other") == 0 and cache.clear() == 5 and cache.usage() == []


def test_a_failed_make_stores_nothing(cache_dir):
    def fails():
        raise ValueError("the compiler refused it")

    with pytest.raises(ValueError):
        cache.cached("demo", cache.key("k"), fails)
    assert cache.get("demo", cache.key("k")) is None and not (cache_dir / "demo").exists()


def test_off_turns_the_cache_off(monkeypatch):
    monkeypatch.setenv("RETARGET_CACHE_DIR", "off")
    made = []
    for _ in range(2):
        cache.cached("demo", cache.key("k"), lambda: made.append(1) or b"x")
    assert made == [1, 1] and cache.root() is None and cache.usage() == []


def test_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("RETARGET_CACHE_DIR", str(blocker))
    assert cache.cached("demo", cache.key("k"), lambda: b"x") == b"x"
