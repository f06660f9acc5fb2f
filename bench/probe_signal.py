"""Does the frozen backbone already tell a wrong step from a right one? A linear probe per layer.

Hidden states at each step's position (prmkit's tokenization) are read from a few layers of the frozen backbone
for the synthetic training and held-out chains; a logistic regression fitted on the training chains is scored on
the held-out ones (step AUROC). It separates "the information is there, training must pull it out" from "this
backbone does not carry it", and costs one forward pass per chain.

    python bench/probe_signal.py --rows 400 --val-rows 100 --layers 10 20 30 --out bench/results/probe.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import backbone_path  # noqa: E402

from prmkit.data.synthetic import generate_splits  # noqa: E402
from prmkit.evaluation.metrics import auroc  # noqa: E402
from prmkit.model import load_token_classifier, load_tokenizer  # noqa: E402
from prmkit.tokenize import tokenize_chain  # noqa: E402


@torch.inference_mode()
def features(model, tokenizer, records, layers):
    rows = {layer: [] for layer in layers}
    labels, positions = [], []
    for record in records:
        chain = tokenize_chain(tokenizer, record["prompt"], record["completions"], record["labels"],
                               separator="\n\n", max_length=512)
        out = model.model(input_ids=torch.tensor([chain.input_ids]), output_hidden_states=True)
        for layer in layers:
            rows[layer].append(out.hidden_states[layer][0, chain.step_positions].numpy())
        labels += [record["labels"][i] for i in range(chain.steps_kept)]
        positions += [i / len(record["completions"]) for i in range(chain.steps_kept)]
    return {layer: np.concatenate(value) for layer, value in rows.items()}, np.array(labels, dtype=float), positions


def main() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--val-rows", type=int, default=100)
    parser.add_argument("--layers", type=int, nargs="+", default=[10, 20, 30])
    parser.add_argument("--out", default="bench/results/probe.json")
    args = parser.parse_args()
    train, held_out = generate_splits(args.rows, args.val_rows, seed=0)
    path = backbone_path()
    model, tokenizer = load_token_classifier(path).eval(), load_tokenizer(path)
    x_train, y_train, _ = features(model, tokenizer, train, args.layers)
    x_val, y_val, positions = features(model, tokenizer, held_out, args.layers)
    results = {"position_only_auroc": auroc([1 - p for p in positions], y_val >= 0.5)}
    for layer in args.layers:
        scaler = StandardScaler().fit(x_train[layer])
        probe = LogisticRegression(C=0.1, max_iter=2000).fit(scaler.transform(x_train[layer]), y_train >= 0.5)
        scores = probe.predict_proba(scaler.transform(x_val[layer]))[:, 1]
        results[f"layer_{layer}_auroc"] = auroc(scores, y_val >= 0.5)
        print(f"layer {layer}: held-out step AUROC {results[f'layer_{layer}_auroc']:.3f}", flush=True)
    print(json.dumps(results, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
