"""`prmkit merge`: the shards of a `prmkit label` or `prmkit search` run with --shard I/N joined into the file one
process writes; a thin call into prmkit.shard_merge (and, for a budgets search, prmkit.search's report)."""

from __future__ import annotations

from prmkit import display


def register(commands) -> None:
    merge = commands.add_parser(
        "merge", help="join the shards of prmkit label/search --shard I/N into the file one process writes",
        description="Check that every shard of OUTPUT (OUTPUT-stem.shard-I-of-N.jsonl, I = 0..N-1) finished, made "
                    "with the same settings and problems, then write OUTPUT as one process would have written it, "
                    "byte for byte, and OUTPUT-stem.shards.json listing the shards. A search with --budgets gets its "
                    "budget report, computed on the merged rows. What is missing is listed with the command that "
                    "finishes it.")
    merge.add_argument("output", help="the OUTPUT (label) or OUT (search) the shards were run with")
    merge.add_argument("--shards", type=int, metavar="N",
                       help="merge the run of N shards, when runs of several counts left files beside OUTPUT")
    merge.add_argument("--overwrite", action="store_true",
                       help="replace OUTPUT when it exists and was not written by a merge of these shards")
    merge.set_defaults(func=cmd_merge)


def cmd_merge(args) -> int:
    from prmkit.shard_merge import merge_shards

    merged = merge_shards(args.output, count=args.shards, overwrite=args.overwrite)
    console = display.console()
    console.print(f"merged {merged.count} shards of prmkit {merged.command}: {merged.records} "
                  f"{'records' if merged.command == 'label' else 'rows'} -> {merged.out} (shards listed in "
                  f"{merged.provenance})", highlight=False)
    if merged.command == "search":
        from prmkit.search.report import budget_table
        from prmkit.search.run import merged_budget_files

        found = merged_budget_files(merged.out, merged.shards[0]["settings"])
        if found is not None:
            report, files = found
            console.print(budget_table(report))
            console.print(f"written: {files['json']}, {files['png']}", highlight=False)
    return 0
