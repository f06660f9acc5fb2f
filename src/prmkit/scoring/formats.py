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
- `trl`: a `*ForTokenClassification` model with two labels, as TRL's PRMTrainer trains it: BOS + prompt, then each
  step followed by the step separator, every piece tokenized on its own; a step's score is P(label 1) at the last
  token of its separator (`trl_tokenize_row`).

Weights load without trust_remote_code, in the dtype asked (a 7B PRM in bf16 never passes through an fp32 copy):
transformers' own backbone class takes the `model.*` weights, and the head (the Qwen head, or the "+"/"-" rows of
an LM head) is read from the weight files by name, so no full-vocabulary logits are ever computed; a `trl` PRM is
transformers' own token-classification model. Detection reads the folder's config.json and tokenizer;
`prm_format=` overrides it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Sequence

import torch

from prmkit.errors import PRMError
from prmkit.scoring.options import PRM_FORMATS as FORMATS
from prmkit.tokenize import TokenizedChain

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as the hub spells model ids
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]  # config, weights, tokenizer
# transformers' pickled weights (one file or shards), fetched only with allow_pickle; not `*.bin`, which would also
# fetch a trainer's training_args.bin, never read here
HUB_PICKLES = ["pytorch_model*.bin"]

QWEN_ARCHITECTURE = "Qwen2ForProcessRewardModel"
QWEN_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
QWEN_STEP_TOKEN = "<extra_0>"
STEP_TAG, GOOD_TOKEN, BAD_TOKEN = "ки", "+", "-"
# Public PRMs read up to their backbone's context (32k-128k tokens for the Mistral and Llama ones); ProcessBench's
# longest chains take about 3k tokens, so this default reads them whole without sizing batches for 128k.
PUBLIC_MAX_LENGTH = 4096
SEPARATOR = "\n\n"  # where a raw completion is cut into steps, as the Qwen PRM's card cuts its responses
# TRL's PRMConfig.step_separator default. A TRL run saves nothing about its separator (but in training_args.bin, a
# pickle that is never read here), so a PRM trained with another one needs it given: step_separator=
TRL_STEP_SEPARATOR = "\n"


@dataclass(frozen=True)
class ChainReader:
    """How one public format turns (prompt, steps) into token ids and the positions its scores are read at."""
    name: str
    step_tag: str = STEP_TAG
    good_token: str = GOOD_TOKEN
    bad_token: str = BAD_TOKEN
    step_separator: str = TRL_STEP_SEPARATOR

    def tokenize(self, tokenizer, prompt: str, steps: Sequence[str], max_length: int) -> TokenizedChain:
        if not steps:
            return TokenizedChain(input_ids=[], labels=[], step_positions=[], steps_kept=0, steps_dropped=0)
        if self.name == "qwen":
            ids, positions = self._tagged(tokenizer, _qwen_text(tokenizer, prompt, steps), QWEN_STEP_TOKEN, steps)
        elif self.name == "math-shepherd":
            text = f"{prompt} " + f" {self.step_tag}\n".join(steps) + f" {self.step_tag}"
            ids, positions = self._tagged(tokenizer, text, self.step_tag, steps)
        elif self.name == "trl":
            ids, positions = trl_tokenize_row(tokenizer, prompt, steps, self.step_separator)
        else:
            ids, positions = self._rlhflow(tokenizer, prompt, steps)
        kept = [p for p in positions if p < max_length]
        if self.name == "trl":
            # TRL's own cut, input_ids[:max_length]: right for any attention, as an encoder's scores read later
            # tokens too; for a causal LM it gives the same scores as the cut below
            ids = ids[:max_length]
        else:  # causal attention: tokens after the last scored position cannot change a score, so they are not run
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
                               f"(they encode to {len(ids)} ids); give good_token/bad_token from the model's "
                               "vocabulary")
            return [ids[1], ids[0]]
        return [tokenizer.encode(t, add_special_tokens=False)[-1] for t in (self.bad_token, self.good_token)]


def trl_tokenize_row(tokenizer, prompt: str, steps: Sequence[str], step_separator: str) -> tuple[list[int], list[int]]:
    """(input_ids, label positions) of a chain as TRL 1.13's PRMTrainer.tokenize_row builds them
    (trl/experimental/prm/prm_trainer.py), statement for statement:

        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        completions_ids = [tokenizer(completion, add_special_tokens=False)["input_ids"] for completion in completions]
        separator_ids = tokenizer.encode(step_separator, add_special_tokens=False)
        completions_ids = [completion + separator_ids for completion in completions_ids]
        labels = [[-100] * (len(completion) - 1) + [label] for completion, label in zip(completions_ids, labels)]
        completion_ids, labels = list(chain(*completions_ids)), list(chain(*labels))
        if tokenizer.bos_token_id is not None: prompt_ids = [tokenizer.bos_token_id] + prompt_ids
        input_ids = prompt_ids + completion_ids          # then completion_ids[:max_completion_length] and
        labels = [-100] * len(prompt_ids) + labels       # input_ids[:max_length]: a label past the cut is gone

    So: no chat template and no EOS; the BOS (where the tokenizer has one) is the only special token; every step
    and the separator are tokenized alone, not in context; the separator follows the last step too; a step's label
    sits on the last token of its step + separator. The cut to max_length is `ChainReader.tokenize`'s, with TRL's
    rule. TRL's max_completion_length is a training-time cut of the steps' tokens; scoring reads up to max_length.
    """
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completions_ids = [tokenizer(step, add_special_tokens=False)["input_ids"] for step in steps]
    separator_ids = tokenizer.encode(step_separator, add_special_tokens=False)
    completions_ids = [completion + separator_ids for completion in completions_ids]
    if tokenizer.bos_token_id is not None:
        prompt_ids = [tokenizer.bos_token_id] + prompt_ids
    positions, end = [], len(prompt_ids)
    for k, completion in enumerate(completions_ids):
        if not completion:  # TRL would put this step's label on a token that is not there, shifting every later one
            raise PRMError(f"trl PRM: step {k} and the step separator {step_separator!r} tokenize to no tokens, so "
                           "the step has no token to be scored at; drop empty steps, or give the separator the PRM "
                           "was trained with (step_separator=)")
        end += len(completion)
        positions.append(end - 1)  # the last token of step + separator: where TRL puts the step's label
    return prompt_ids + list(chain(*completions_ids)), positions


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
    if any(a.endswith("ForTokenClassification") for a in architectures) and label_count(config) == 2:
        return "trl", f"architectures {architectures} with two labels, as TRL's PRMTrainer saves them"
    if any(a.endswith("ForCausalLM") for a in architectures):
        from prmkit.model import load_tokenizer

        tokenizer = load_tokenizer(str(folder))
        if getattr(tokenizer, "chat_template", None):
            return "rlhflow", f"architectures {architectures} and a chat template"
        if len(tokenizer.encode(STEP_TAG, add_special_tokens=False)) == 1:
            return "math-shepherd", f"architectures {architectures} and the step tag {STEP_TAG!r} as one token"
    raise PRMError(f"{folder}: not a prmkit run (no prmkit.json) nor a public PRM this can tell (architectures "
                   f"{architectures}); pass prm_format= (--prm-format) one of {', '.join(FORMATS)}")


def label_count(config: dict) -> int:
    """The labels of a classification config.json: transformers leaves out id2label when it holds its default two."""
    return len(config["id2label"]) if config.get("id2label") else int(config.get("num_labels") or 2)


def model_folder(name: str | Path, allow_pickle: bool = False) -> Path:
    """The local folder of a PRM: `name` itself when it exists; otherwise an `owner/name` is a model id on the
    Hugging Face hub, fetched into its cache (or read from the cache alone with HF_HUB_OFFLINE=1), as
    transformers' from_pretrained would. Only the files a PRM is read from are fetched: pickled weights too
    with allow_pickle, as a model published only in pickles has nothing else to read."""
    path = Path(name)
    if path.exists() or not HUB_ID.fullmatch(str(name)):
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(name), allow_patterns=HUB_FILES + (HUB_PICKLES if allow_pickle else [])))
    except Exception as err:  # noqa: BLE001 - offline, unknown id, no access: one answer with the way out
        # Local first: `runs/prm` is far more often a run folder mistyped or not trained yet than a hub model.
        parent = path.absolute().parent
        nearby = sorted(p.name for p in parent.iterdir() if p.is_dir())[:8] if parent.is_dir() else []
        here = f"; {parent} holds {', '.join(nearby)}" if nearby else ""
        raise PRMError(f"{name}: no such local folder ({path.absolute()} does not exist{here}); point to a prmkit "
                       "run folder, checkpoint or export, or a PRM's folder. Read as a hub model id it was not "
                       f"fetched either ({type(err).__name__}): if it is one, download it (hf download {name} "
                       f"--local-dir prms/{path.name}) or go online once to fill the cache") from None


def _config(folder: Path) -> dict:
    path = folder / "config.json"
    if not folder.exists():
        raise PRMError(f"{folder}: no such folder; point to a prmkit run folder, checkpoint or export, or to a public "
                       "PRM's folder (or a hub model id, owner/name: hf download "
                       f"{folder} --local-dir prms/{folder.name})")
    if not path.is_file() and (folder / "adapter_config.json").is_file():
        # TRL's PRMTrainer with a peft_config saves only the adapter; its head is in it only with TOKEN_CLS
        # (modules_to_save), so the adapter alone cannot say whether the base's head was trained
        raise PRMError(f"{folder}: a PEFT adapter (adapter_config.json) and no config.json, as TRL's PRMTrainer saves "
                       "a LoRA PRM; merge it into its base once and read the merged folder: PeftModel.from_pretrained("
                       "AutoModelForTokenClassification.from_pretrained(BASE, num_labels=2), "
                       f"'{folder}').merge_and_unload().save_pretrained(OUT), and save the tokenizer beside it")
    if not path.is_file():
        raise PRMError(f"{folder}: no prmkit.json and no config.json; point to a prmkit run folder, checkpoint or "
                       "export, or to a downloaded public PRM folder")
    return json.loads(path.read_text(encoding="utf-8"))


def load_public_prm(folder: str | Path, reader: ChainReader, *, allow_pickle: bool = False,
                    dtype: torch.dtype = torch.float32):
    """(model, tokenizer) of a public PRM folder, eval mode, with no code from the folder run. The backbone is built
    and filled in `dtype` (each checkpoint tensor cast on its own as it is read), so the host holds one copy of the
    weights in that dtype, never an fp32 one first; the small heads are kept in fp32."""
    from prmkit.model import load_tokenizer, refuse_pickle_weights

    folder = Path(folder)
    _config(folder)  # a missing folder, or one without config.json (a LoRA adapter), answered with the way out
    refuse_pickle_weights(folder, allow_pickle)
    tokenizer = load_tokenizer(str(folder))
    if reader.name == "trl":
        return _token_classifier(folder, allow_pickle, dtype), tokenizer
    backbone = _backbone(folder, reader.name, allow_pickle, dtype)
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


def _token_classifier(folder: Path, allow_pickle: bool, dtype: torch.dtype) -> TwoClassPRM:
    """A TRL PRM: transformers' own `*ForTokenClassification` model, run as its backbone and head (its dropout is
    the identity in eval mode), so it gives P(label 1) at every position like the other formats."""
    from transformers import AutoConfig, AutoModelForTokenClassification

    from prmkit.model import head_name

    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    if config.num_labels != 2:
        raise PRMError(f"trl PRM: {folder} has {config.num_labels} label(s), and TRL's PRMTrainer trains two (a bad "
                       "and a good step); a prmkit export has one: read it without prm_format='trl'")
    model = _from_pretrained(AutoModelForTokenClassification, folder, config, "trl", allow_pickle, dtype)
    return TwoClassPRM(model.base_model, getattr(model, head_name(model)))


def _backbone(folder: Path, name: str, allow_pickle: bool, dtype: torch.dtype):
    """transformers' own backbone class filled from the checkpoint's `model.*` weights (the head's are left)."""
    from transformers import AutoConfig, AutoModel, Qwen2Config, Qwen2Model

    if name == "qwen":  # a concrete class: the folder's auto_map to remote code is never followed
        config, cls = Qwen2Config.from_dict(_config(folder)), Qwen2Model
    else:
        config, cls = AutoConfig.from_pretrained(str(folder), trust_remote_code=False), AutoModel
    return _from_pretrained(cls, folder, config, name, allow_pickle, dtype)


def _from_pretrained(cls, folder: Path, config, name: str, allow_pickle: bool, dtype: torch.dtype):
    from transformers.utils import logging as hf_logging

    config.use_cache = False
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the head's weights are reported as unused by the backbone; they are read below
    try:
        model, info = cls.from_pretrained(str(folder), config=config, dtype=dtype, trust_remote_code=False,
                                          use_safetensors=None if allow_pickle else True, output_loading_info=True)
    except (OSError, ValueError) as err:
        raise PRMError(f"cannot load the {name} PRM backbone from {folder}: {err}") from None
    finally:
        hf_logging.set_verbosity(level)
    if info["missing_keys"]:  # transformers would fill them with random numbers, and the scores with noise
        missing = sorted(info["missing_keys"])
        raise PRMError(f"{name} PRM: {folder}'s weights lack {len(missing)} tensor(s) its config needs "
                       f"({', '.join(missing[:4])}); this is not a {name} PRM folder, or its weights are incomplete: "
                       "pass the prm_format it was saved in (--prm-format), or download the folder again")
    return model


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
