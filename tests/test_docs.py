"""The README's config reference and the example configs stay true to the code."""

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from prmkit.config import Config, load_config

ROOT = Path(__file__).resolve().parents[1]


def config_keys(model: type[BaseModel] = Config, prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys += config_keys(field.annotation, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def test_every_config_key_is_in_the_readme_reference_and_nothing_else():
    readme = (ROOT / "README.md").read_text()
    reference = readme.split("### Config reference", 1)[1].split("\n#", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", reference, flags=re.M))
    assert set(config_keys()) <= documented, set(config_keys()) - documented
    assert documented <= set(config_keys()), documented - set(config_keys())


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_are_valid(path):
    assert load_config(path).run_name
