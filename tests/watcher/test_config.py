"""Watcher configuration validation."""

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from watcher import config

VALID: dict[str, Any] = {
    "runtime": "skr-1",
    "listeners": [{"url": "https://listener.kcp:8443"}],
    "tls": {"cert_file": "/c", "key_file": "/k", "ca_file": "/ca"},
    "watches": [{"version": "v1", "resource": "configmaps", "label_selector": "a=b", "module": "m"}],
}


def test_valid_config_loads_with_defaults(tmp_path: Path) -> None:
    """A minimal file loads; defaults ignore the reconciler's field manager."""
    path = tmp_path / "watcher.yaml"
    path.write_text(yaml.safe_dump(VALID))
    loaded = config.load(path)
    assert loaded.ignore_field_managers == ("kyma-sync-reconciler",)
    assert not loaded.is_paused("m")


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        pytest.param({"runtime": "Bad_Name"}, "runtime", id="runtime-name"),
        pytest.param({"listeners": []}, "listeners", id="no-listener"),
        pytest.param({"watches": [{**VALID["watches"][0], "label_selector": ""}]}, "label_selector", id="no-selector"),
        pytest.param({"watches": [VALID["watches"][0]] * 2}, "same resource", id="duplicate-watch"),
        pytest.param({"lease": {"duration_seconds": 2, "renew_interval_seconds": 3}}, "shorter", id="renew-too-slow"),
        pytest.param({"surprise": 1}, "surprise", id="unknown-key"),
        # published, its answer lost: sent again at once on a new connection, then after the longest backoff
        pytest.param(
            {"delivery": {"request_timeout_seconds": 50, "backoff_max_seconds": 30}},
            "duplicate window",
            id="retries-outlive-the-duplicate-window",
        ),
    ],
)
def test_invalid_config_says_what_is_wrong(change: dict[str, Any], complaint: str) -> None:
    """Each mistake is named in the validation error."""
    with pytest.raises(pydantic.ValidationError, match=complaint):
        config.WatcherConfig.model_validate(VALID | change)


def test_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    """A missing file names the path."""
    with pytest.raises(ValueError, match="cannot read watcher config"):
        config.load(tmp_path / "missing.yaml")


def test_connections_needed_counts_every_watch_stream() -> None:
    """One API connection per watched resource and namespace, plus Lease and checkpoint headroom."""
    watches = [
        {
            "version": "v1",
            "resource": "configmaps",
            "label_selector": "a=b",
            "module": "m",
            "namespaces": ["x", "y", "z"],
        },
        {"version": "v1", "resource": "secrets", "label_selector": "a=b", "module": "m"},
    ]
    assert config.WatcherConfig.model_validate(VALID | {"watches": watches}).connections_needed() == 3 + 1 + 4
