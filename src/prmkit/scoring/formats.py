"""Public PRM formats behind the scorer's contract: steps in, one probability per step out, one forward pass per
chain, many chains per batch.

- `qwen`: Qwen2.5-Math-PRM (`Qwen2ForProcessRewardModel`). Its model card's chat text (a system prompt, the problem
  as the user turn, the steps joined and ended by `<extra_0>` as the assistant turn); a two-class head
  `Linear(h, h) -> ReLU -> Linear(h, 2)` on a Qwen2 backbone; a step's score is P(class 1) at its `<extra_0>`.
- `math-shepherd`: a causal LM reading `problem + " " + steps joined by " ки\\n"` (the last step ends with the tag
  too); a step's score is P("+") of the softmax over the "+" and "-" logits at its tag, as math-shepherd-mistral-7b-prm
  and OpenR read it.
- `rlhflow`: a causal LM reading a chat where each step is a user turn answered by an assistant "+"; a step's score
  is P("+") over "+" and "-" at the position that predicts its answer.

Weights load without trust_remote_code: transformers' own backbone class takes the `model.*` weights, and the head
(the Qwen head, or the "+"/"-" rows of an LM head) is read from the weight files by name, so no full-vocabulary
logits are ever computed. Detection reads the folder's config.json and tokenizer; `prm_format=` overrides it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from prmkit.errors import PRMError
from prmkit.scoring.options import PRM_FORMATS as FORMATS
from prmkit.tokenize import TokenizedChain

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as the hub spells model ids
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]  # config, weights, tokenizer

QWEN_ARCHITECTURE = "Qwen2ForProcessRewardModel"
QWEN_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
QWEN_STEP_TOKEN = "<extra_0>"
STEP_TAG, GOOD_TOKEN, BAD_TOKEN = "ки", "+", "-"
# Public PRMs read up to their backbone's context (32k-128k tokens for the Mistral and Llama ones); ProcessBench's
# longest chains take about 3k tokens, so this default reads them whole without sizing batches for 128k.
PUBLIC_MAX_LENGTH = 4096
SEPARATOR = "\n\n"  # where a raw completion is cut into steps, as the Qwen PRM's card cuts its responses


@dataclass(frozen=True)
class ChainReader:
    """How one public format turns (prompt, steps) into token ids and the positions its scores are read at."""
    name: str
    step_tag: str = STEP_TAG
    good_token: str = GOOD_TOKEN
    bad_token: str = BAD_TOKEN

    def tokenize(self, tokenizer, prompt: str, steps: Sequence[str], max_length: int) -> TokenizedChain:
        if not steps:
            return TokenizedChain(input_ids=[], labels=[], step_positions=[], steps_kept=0, steps_dropped=0)
        if self.name == "qwen":
            ids, positions = self._tagged(tokenizer, _qwen_text(tokenizer, prompt, steps), QWEN_STEP_TOKEN, steps)
        elif self.name == "math-shepherd":
            text = f"{prompt} " + f" {self.step_tag}\n".join(steps) + f" {self.step_tag}"
            ids, positions = self._tagged(tokenizer, text, self.step_tag, steps)
        else:
            ids, positions = self._rlhflow(tokenizer, prompt, steps)
        kept = [p for p in positions if p < max_length]
        # Causal attention: tokens after the last scored position cannot change a score, so they are not run.
        ids = ids[:kept[-1] + 1] if kept else ids[:max_length]
        return TokenizedChain(input_ids=ids, labels=[], step_positions=kept, steps_kept=len(kept),
                              steps_dropped=len(steps) - len(kept))

    def _tagged(self, tokenizer, text: str, tag: str, steps: Sequence[str]) -> tuple[list[int], list[int]]:
        """Ids of `text` (encoded as the model cards encode it) and the positions of the tag token in it."""
        tag_id = tokenizer.encode(tag, add_special_tokens=False)[-1]
        ids = tokenizer(text)["input_ids"]
        positions = [i for i, token in enumerate(ids) if token == tag_id]
        if len(positions) != len(steps):
            raise PRMError(f"{self.name} PRM: {len(steps)} steps but {len(positions)} step tags {tag!r} in the "
                           "tokenized text; the problem or a step contains the tag, or the tag tokenizes "
                           "differently in context. Remove the tag from the text, or give the model's own "
                           "step_tag")
        return ids, positions

    def _rlhflow(self, tokenizer, prompt: str, steps: Sequence[str]) -> tuple[list[int], list[int]]:
        """The whole conversation in one sequence; step k is read where the k-th "+" answer is predicted. Later
        turns cannot change that position's logits (causal attention), so this equals the model card's one pass
        per prefix."""
        if not getattr(tokenizer, "chat_template", None):
            raise PRMError("rlhflow PRM: the tokenizer has no chat template; this format is a conversation, so use "
                           "the model's own tokenizer folder")
        conversation = []
        for k, step in enumerate(steps):
            conversation.append({"role": "user", "content": f"{prompt} {step}" if k == 0 else step})
            conversation.append({"role": "assistant", "content": self.good_token})
        text = tokenizer.apply_chat_template(conversation, tokenize=False)
        encoding = tokenizer(text, add_special_tokens=False)  # the template writes its own BOS
        ids, good_id = encoding["input_ids"], tokenizer.encode(self.good_token, add_special_tokens=False)[-1]
        positions = []
        for k in range(len(steps)):
            prefix = tokenizer.apply_chat_template(conversation[:2 * k + 1], tokenize=False,
                                                   add_generation_prompt=True)
            answer = encoding.char_to_token(len(prefix)) if text.startswith(prefix) else None
            if answer is None or ids[answer] != good_id:
                raise PRMError(f"rlhflow PRM: cannot find the assistant's {self.good_token!r} after step {k} in the "
                               "chat template's text; the template does not put the answer right after its "
                               "generation prompt. Use the model's own tokenizer, or prm_format='math-shepherd'")
            positions.append(answer - 1)
        return ids, positions

    def class_token_ids(self, tokenizer) -> list[int]:
        """[bad, good] token ids of a "+"/"-" format, so the head's class 1 is a good step, as in the Qwen head."""
        if self.name == "math-shepherd":  # the card: candidate_tokens = encode(f"{good} {bad}")[1:], after the BOS
            ids = tokenizer.encode(f"{self.good_token} {self.bad_token}", add_special_tokens=False)
            if len(ids) != 2:
                raise PRMError(f"math-shepherd PRM: {self.good_token!r} and {self.bad_token!r} are not one token each "
                               f"(they encode to {len(ids)} ids); give good_token/bad_token from the model's vocabulary")
            return [ids[1], ids[0]]
        return [tokenizer.encode(t, add_special_tokens=False)[-1] for t in (self.bad_token, self.good_token)]


def _qwen_text(tokenizer, prompt: str, steps: Sequence[str]) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise PRMError("qwen PRM: the tokenizer has no chat template; use the model's own tokenizer folder")
    messages = [{"role": "system", "content": QWEN_SYSTEM}, {"role": "user", "content": prompt},
                {"role": "assistant", "content": QWEN_STEP_TOKEN.join(steps) + QWEN_STEP_TOKEN}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)


class TwoClassPRM(torch.nn.Module):
    """A backbone without its LM head and a head with two outputs (bad, good); gives P(good) at every position."""

    def __init__(self, backbone, score: torch.nn.Module):
        super().__init__()
        self.model = backbone
        self.score = score  # the name the scorer looks for to run the head in fp32 on a bf16 backbone
        self.config = backbone.config

    def forward(self, input_ids, attention_mask=None):
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.score(hidden).float().softmax(-1)[..., 1]


def detect_format(folder: str | Path) -> tuple[str, str]:
    """(format, why) for a model folder: a prmkit run, or a public PRM known by its config and tokenizer."""
    folder = Path(folder)
    if (folder / "prmkit.json").is_file():
        return "prmkit", "prmkit.json"
    config = _config(folder)
    architectures = config.get("architectures") or []
    if QWEN_ARCHITECTURE in architectures:
        return "qwen", f"architectures {architectures}"
    if any(a.endswith("ForCausalLM") for a in architectures):
        from prmkit.model import load_tokenizer

        tokenizer = load_tokenizer(str(folder))
        if getattr(tokenizer, "chat_template", None):
            return "rlhflow", f"architectures {architectures} and a chat template"
        if len(tokenizer.encode(STEP_TAG, add_special_tokens=False)) == 1:
            return "math-shepherd", f"architectures {architectures} and the step tag {STEP_TAG!r} as one token"
    raise PRMError(f"{folder}: not a prmkit run (no prmkit.json) nor a public PRM this can tell (architectures "
                   f"{architectures}); pass prm_format= (--prm-format) one of {', '.join(FORMATS)}")


def model_folder(name: str | Path) -> Path:
    """The local folder of a PRM: `name` itself when it exists; otherwise an `owner/name` is a model id on the
    Hugging Face hub, fetched into its cache (or read from the cache alone with HF_HUB_OFFLINE=1), as
    transformers' from_pretrained would. Only the files a PRM is read from are fetched."""
    path = Path(name)
    if path.exists() or not HUB_ID.fullmatch(str(name)):
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(name), allow_patterns=HUB_FILES))
    except Exception as err:  # noqa: BLE001 - offline, unknown id, no access: one answer with the way out
        raise PRMError(f"{name}: no such folder, and not fetched as a hub model id ({type(err).__name__}); point to "
                       f"a prmkit run or a PRM's folder, or download it first (hf download {name} --local-dir "
                       f"prms/{path.name}) or once online to fill the cache") from None


def _config(folder: Path) -> dict:
    path = folder / "config.json"
    if not folder.exists():
        raise PRMError(f"{folder}: no such folder; point to a prmkit run folder, checkpoint or export, or to a public "
                       "PRM's folder (or a hub model id, owner/name: hf download "
                       f"{folder} --local-dir prms/{folder.name})")
    if not path.is_file():
        raise PRMError(f"{folder}: no prmkit.json and no config.json; point to a prmkit run folder, checkpoint or "
                       "export, or to a downloaded public PRM folder")
    return json.loads(path.read_text(encoding="utf-8"))


def load_public_prm(folder: str | Path, reader: ChainReader, *, allow_pickle: bool = False):
    """(model, tokenizer) of a public PRM folder, fp32, eval mode, with no code from the folder run."""
    from prmkit.model import load_tokenizer, refuse_pickle_weights

    folder = Path(folder)
    refuse_pickle_weights(folder, allow_pickle)
    tokenizer = load_tokenizer(str(folder))
    backbone = _backbone(folder, reader.name, allow_pickle)
    if reader.name == "qwen":
        weights = read_weights(folder, [f"score.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")], allow_pickle)
        hidden = backbone.config.hidden_size
        head = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))
        head.load_state_dict({name.removeprefix("score."): value.float() for name, value in weights.items()})
    else:
        rows = reader.class_token_ids(tokenizer)
        if backbone.config.tie_word_embeddings:
            weight = backbone.get_input_embeddings().weight.detach()[rows]
        else:
            weight = read_weights(folder, ["lm_head.weight"], allow_pickle)["lm_head.weight"][rows]
        head = torch.nn.Linear(weight.shape[1], 2, bias=False)
        head.weight.data.copy_(weight.float())
    return TwoClassPRM(backbone, head).eval(), tokenizer


def _backbone(folder: Path, name: str, allow_pickle: bool):
    """transformers' own backbone class filled from the checkpoint's `model.*` weights (the head's are left)."""
    from transformers import AutoConfig, AutoModel, Qwen2Config, Qwen2Model
    from transformers.utils import logging as hf_logging

    if name == "qwen":  # a concrete class: the folder's auto_map to remote code is never followed
        config, cls = Qwen2Config.from_dict(_config(folder)), Qwen2Model
    else:
        config, cls = AutoConfig.from_pretrained(str(folder), trust_remote_code=False), AutoModel
    config.use_cache = False
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the head's weights are reported as unused by the backbone; they are read below
    try:
        return cls.from_pretrained(str(folder), config=config, dtype=torch.float32, trust_remote_code=False,
                                   use_safetensors=None if allow_pickle else True)
    except (OSError, ValueError) as err:
        raise PRMError(f"cannot load the {name} PRM backbone from {folder}: {err}") from None
    finally:
        hf_logging.set_verbosity(level)


def read_weights(folder: Path, names: list[str], allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """Tensors by name from a folder's safetensors files (one file or an index); pickles only with allow_pickle,
    read with weights_only=True."""
    from safetensors import safe_open

    found: dict[str, torch.Tensor] = {}
    for kind in ("safetensors", "bin"):
        if kind == "bin" and not allow_pickle:
            break
        single = folder / ("model.safetensors" if kind == "safetensors" else "pytorch_model.bin")
        index = single.with_name(single.name + ".index.json")
        if index.is_file():
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            files = {weight_map[n] for n in names if n in weight_map}
        else:
            files = {single.name} if single.is_file() else set()
        for file in sorted(files):
            if kind == "safetensors":
                with safe_open(str(folder / file), framework="pt") as handle:
                    found.update({n: handle.get_tensor(n) for n in names if n in handle.keys()})
            else:
                from transformers.modeling_utils import load_state_dict  # transformers' reader: weights_only=True

                state = load_state_dict(folder / file, weights_only=True)
                found.update({n: state[n] for n in names if n in state})
        if found:
            break
    missing = [n for n in names if n not in found]
    if missing:
        raise PRMError(f"{folder}: no weights named {', '.join(missing)} in its safetensors files; this is not the "
                       "format its config says, or the weights are pickles (allow_pickle=True if you trust them)")
    return found
