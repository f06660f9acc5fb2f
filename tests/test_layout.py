"""The package's shape: no import cycle between its modules (counting imports inside functions too), and the
stages import only backwards along the pipeline, so a module's folder says what it may depend on."""

from __future__ import annotations

import ast
from pathlib import Path

import prmkit

PACKAGE = Path(prmkit.__file__).parent
# What each stage may import from prmkit besides the shared core (the top-level modules) and itself.
ALLOWED = {
    "data": set(),
    "training": {"data", "evaluation"},  # evaluation.metrics for the Trainer's validation metrics
    "scoring": {"data"},
    "evaluation": {"data", "scoring", "training"},  # training.checkpoints, to read a run's loss history
    "serving": {"scoring"},
    "generation": set(),
    "labeling": {"data", "generation"},
    "search": {"data", "generation", "scoring", "evaluation"},
    "rl": {"data", "scoring", "serving"},  # a policy trained on in-process or served step rewards; nothing imports rl
    "trl": {"data", "training"},  # TRL's PRMTrainer arguments mapped onto a prmkit run; nothing imports trl
    "cli": set(),  # cli may import anything; nothing imports cli
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("prmkit"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("prmkit"))
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        graph[name] = {target for target in imports_of(path) if target in modules and target != name}
    return graph


def test_no_import_cycle_anywhere_in_the_package():
    graph = import_graph()
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if target == "prmkit":  # the package's own lazy public names resolve on use, not on import
                continue
            if state.get(target) == "open":
                cycle = trail[trail.index(target):] + [target] if target in trail else [node, target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, trail + [target])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_stages_import_only_backwards_and_nothing_imports_the_cli():
    problems = []
    for module, targets in import_graph().items():
        parts = module.split(".")
        stage = parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else None
        for target in targets:
            target_parts = target.split(".")
            target_stage = target_parts[1] if len(target_parts) > 1 and target_parts[1] in ALLOWED else None
            if target_stage == "cli" and stage != "cli" and module != "prmkit.__main__":
                problems.append(f"{module} imports the command line ({target})")
            elif stage is None and target_stage and module not in ("prmkit", "prmkit.demo", "prmkit.__main__"):
                problems.append(f"{module} (shared core) imports {target} ({target_stage})")
            elif stage and stage != "cli" and target_stage and target_stage != stage \
                    and target_stage not in ALLOWED[stage]:
                problems.append(f"{module} ({stage}) imports {target} ({target_stage})")
    assert not problems, "\n".join(problems)


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "prmkit.scoring.scorer" in graph["prmkit.cli.score"]  # imported inside cmd_score
    assert "prmkit.training.checkpoints" in graph["prmkit.training.trainer"]
