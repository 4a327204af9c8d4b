"""Configuration files: YAML read and validated into a pydantic model, with one error shape."""

from pathlib import Path
from typing import TypeVar

import pydantic
import yaml

Model = TypeVar("Model", bound=pydantic.BaseModel)


def load_yaml(path: Path, model: type[Model], *, what: str) -> Model:
    """``model`` from the YAML file at ``path``; unreadable files raise ValueError naming ``what``."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read {what} {path}: {exc}") from exc
    return model.model_validate(document)


def dump_yaml(document: object) -> str:
    """YAML for people to read: keys in the order given, block style."""
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
