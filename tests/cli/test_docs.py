"""The config reference (docs/reference.md), the README's layout and the example configs stay true to the code."""

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from prmkit.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]


def config_keys(model: type[BaseModel] = Config, prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys += config_keys(field.annotation, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def test_every_config_key_is_in_the_docs_reference_and_nothing_else():
    docs = (ROOT / "docs" / "reference.md").read_text()
    reference = docs.split("## Config reference", 1)[1].split("\n#", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", reference, flags=re.M))
    assert set(config_keys()) <= documented, set(config_keys()) - documented
    assert documented <= set(config_keys()), documented - set(config_keys())


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_are_valid_and_every_key_they_set_is_honoured(path):
    written = yaml.safe_load(path.read_text(encoding="utf-8"))
    loaded = load_config(path).model_dump()
    for section, values in written.items():
        if isinstance(values, dict):
            for key, value in values.items():
                assert loaded[section][key] == value, f"{section}.{key}"
        else:
            assert loaded[section] == values, section


def test_the_readme_layout_section_lists_every_module_of_the_package():
    """The layout block in the README names each subpackage and module, and nothing that is not there."""
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("### Layout", 1)[1].split("```", 2)[1]
    package = ROOT / "src" / "prmkit"
    modules = {str(p.relative_to(package)) for p in package.rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py")}
    for module in modules:
        folder, _, name = module.rpartition("/")
        assert name.removesuffix(".py") in layout, f"{module} is not in the README's layout section"
    for folder in {p.parent.name for p in package.rglob("__init__.py") if p.parent != package}:
        assert f"{folder}/" in layout, folder
