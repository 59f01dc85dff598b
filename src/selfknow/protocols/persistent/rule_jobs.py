"""The persistent workflow's jobs whose rule's keys are not their package function's
parameters one to one (splits gathered from named files, a seed wildcard or a list of seeds,
the provenance and rendering of a table), each called by `selfknow.runner` with its rule's keys
by name; the keys a job passes on unchanged go through `**kw` to the function, which rejects
any it does not take."""
from __future__ import annotations

from typing import Mapping, Sequence

from selfknow.report.tables import table_job_provenance

from . import jobs, tables


def sc(inputs: Mapping[str, str], outputs: Mapping[str, str], n_items: Mapping[str, int], ckpt: str,
       threads: int, **kw) -> dict:
    """Beams and self-consistency of one (model, checkpoint, dataset), both splits."""
    splits = {s: jobs.SplitIO(inputs[s], n_items[s], outputs[f"beams_{s}"], outputs[f"sc_{s}"]) for s in n_items}
    return jobs.sc_job(splits, inputs["train"], checkpoint=ckpt, threads=threads, **kw)


def judge(inputs: Mapping[str, str], outputs: Mapping[str, str], model: str, ckpt: str, judge: Mapping,
          cache_dir: str) -> dict:
    """The LLM judge's labels of one (model, checkpoint, dataset)'s candidates, both splits."""
    splits = {s: jobs.JudgeIO(inputs[s], inputs[f"cand_{s}"], outputs[f"sc_{s}"]) for s in ("train", "test")}
    return jobs.judge_job(splits, model, ckpt, dict(judge), cache_dir)


def variant(seed: str, threads: int, variant: str = "transfer", out: str | None = None, **kw) -> dict:
    """One training variant's adapters and confidences (the transfer rules have no `variant`
    wildcard; the variance adapters score nothing, so write no `out`)."""
    return jobs.variant_job(variant, out=out, seed=int(seed), threads=threads, **kw)


def gcm(seed: str, threads: int, **kw) -> dict:
    """Our own GCM, trained with one seed."""
    return jobs.gcm_job(seed=int(seed), threads=threads, **kw)


def variant_seeds(seeds: Sequence[int], out: Sequence[str], adapters_dir: Sequence[str], variant: str,
                  threads: int, **kw) -> dict:
    """`variant` once per seed, one after another in this process (`persistent.seeds_in_one_job`),
    as the authors' trainer takes several seeds: each seed writes the files its own job would."""
    return _summed(jobs.variant_job(variant, out=o, adapters_dir=a, seed=int(s), threads=threads, **kw)
                   for s, o, a in zip(seeds, out, adapters_dir, strict=True))


def gcm_seeds(seeds: Sequence[int], out: Sequence[str], adapter_dir: Sequence[str], threads: int, **kw) -> dict:
    """Our own GCM once per seed, one after another in this process (`persistent.seeds_in_one_job`)."""
    return _summed(jobs.gcm_job(out=o, adapter_dir=a, seed=int(s), threads=threads, **kw)
                   for s, o, a in zip(seeds, out, adapter_dir, strict=True))


def _summed(summaries) -> dict:
    """The seeds' job summaries (run in turn as they are drawn; the rule lists its outputs in the
    seeds' order) in one: their counts and seconds summed."""
    total: dict = {"seeds": 0}
    for summary in summaries:
        total["seeds"] += 1
        for k, v in summary.items():
            total[k] = total.get(k, 0) + v
    return total


def _persistent(config: Mapping) -> tuple[list[str], list[str]]:
    """Every persistent model (the GCM's too) and training dataset (the transfer one too)."""
    pc = config["persistent"]
    return ([*pc["models"], *([pc["gcm_model"]] if pc.get("gcm_model") else [])],
            [*pc["datasets"], *([pc["transfer_dataset"]] if pc.get("transfer_dataset") else [])])


def table(table: str, outputs: Mapping[str, str], report: Mapping, config: Mapping, input_files: Sequence[str],
          **kw) -> dict:
    """One method, contrast or findings table (`persistent_table<N>`)."""
    models, datasets = _persistent(config)
    prov = table_job_provenance(config, input_files, report, sections=["persistent"], models=models,
                                datasets=datasets)
    return tables.table_job(table, csv=outputs[f"{table}_csv"], md=outputs[f"{table}_md"], provenance=prov, **kw)


def transfer_figure(figure: str, model: str, dataset: str, outputs: Mapping[str, str], report: Mapping,
                    config: Mapping, input_files: Sequence[str], **kw) -> dict:
    """Figure 3 (first training dataset) or 4 (second): `figure` names the outputs."""
    prov = table_job_provenance(config, input_files, report, sections=["persistent"], models=[model],
                                datasets=[dataset])
    return tables.transfer_figure_job(figure, png=outputs[figure], csv=outputs[f"{figure}_csv"],
                                      md=outputs[f"{figure}_md"], model=model, dataset=dataset, provenance=prov, **kw)


def table7(models: Sequence[str], datasets: Sequence[str], checkpoints: Mapping[str, Sequence[str]],
           outputs: Mapping[str, str], report: Mapping, config: Mapping, input_files: Sequence[str], **kw) -> dict:
    """Table 7, the checkpoints' accuracy."""
    prov = table_job_provenance(config, input_files, report, sections=["persistent"], models=list(models),
                                datasets=list(datasets))
    return tables.table7_job(models=list(models), checkpoints={m: list(c) for m, c in checkpoints.items()},
                             datasets=list(datasets), csv=outputs["table7_csv"], md=outputs["table7_md"],
                             provenance=prov, **kw)


def figure2(models: Sequence[str], datasets: Sequence[str], eval_ckpts: Mapping[str, Sequence[str]],
            backbone_model: str, outputs: Mapping[str, str], report: Mapping, config: Mapping,
            input_files: Sequence[str], **kw) -> dict:
    """Figure 2, the GCM's headroom by its backbone's error rate."""
    prov = table_job_provenance(config, input_files, report, sections=["persistent"],
                                models=[*models, backbone_model], datasets=list(datasets))
    return tables.figure2_job(models=list(models), eval_ckpts={m: list(c) for m, c in eval_ckpts.items()},
                              datasets=list(datasets), png=outputs["figure2"], csv=outputs["figure2_csv"],
                              md=outputs["figure2_md"], backbone_model=backbone_model, provenance=prov, **kw)


def reliability(model: str, dataset: str, outputs: Mapping[str, str], config: Mapping, input_files: Sequence[str],
                **kw) -> dict:
    """The reliability diagrams of one (model, training dataset)."""
    from selfknow.report.provenance import job_provenance

    gcm_model = config["persistent"].get("gcm_model")
    prov = job_provenance(config, input_files, sections=["persistent"], datasets=[dataset],
                          models=list(dict.fromkeys([model] + ([gcm_model] if gcm_model else []))))

    return jobs.reliability_job(png=outputs["reliability"], provenance=prov, **kw)


def table19(hidden_paths: Sequence[str], outputs: Mapping[str, str], report: Mapping, config: Mapping,
            input_files: Sequence[str]) -> dict:
    """Table 19, the hidden-state variance across seeds (first model and training dataset)."""
    model, dataset = config["persistent"]["models"][0], config["persistent"]["datasets"][0]
    prov = table_job_provenance(config, input_files, report, sections=["persistent"], models=[model],
                                datasets=[dataset])
    return tables.table19_job(hidden_paths, outputs["table19_csv"], outputs["table19_md"], model=model,
                              dataset=dataset, provenance=prov)
