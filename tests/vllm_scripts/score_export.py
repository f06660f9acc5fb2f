"""Run inside .venv-vllm: vLLM's offline pooling runner scores token ids on folders written by
`prmkit export RUN --vllm OUT`, started as the folder's prmkit_vllm.json says (STEP pooler, step_tag_id).

stdin: {"memory": share of CPU memory, "runs": [{"folder": OUT, "inputs": [[token id, ...], ...]}, ...]}
stdout (last line): {"scores": [[rows of one chain, one [score] per step], ...] per run}
"""

import json
import sys
from pathlib import Path


def main() -> None:
    payload = json.load(sys.stdin)
    from vllm import LLM

    results = []
    for run in payload["runs"]:
        settings = json.loads((Path(run["folder"]) / "prmkit_vllm.json").read_text(encoding="utf-8"))
        llm = LLM(model=run["folder"], runner="pooling", dtype="float32", enforce_eager=True, max_model_len=512,
                  gpu_memory_utilization=payload["memory"], pooler_config=settings["pooler_config"])
        outputs = llm.encode([{"prompt_token_ids": ids} for ids in run["inputs"]], pooling_task="token_classify",
                             use_tqdm=False)
        results.append([output.outputs.data.tolist() for output in outputs])
        llm.llm_engine.engine_core.shutdown()
    print(json.dumps({"scores": results}))


if __name__ == "__main__":  # vLLM starts its engine in a spawned process, which re-imports this file
    main()
