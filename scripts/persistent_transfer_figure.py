# `snakemake` (inputs, outputs, params, log) is bound by the script preamble Snakemake inserts.
# Figure 3 (first training dataset) and Figure 4 (second): `params.figure` names the outputs.
from selfknow.protocols.persistent.tables import transfer_figure_job
from selfknow.report.provenance import job_provenance
from selfknow.report.tables import set_decimals
from selfknow.runlog import job_log

p, out, cfg = snakemake.params, snakemake.output, snakemake.config
set_decimals(p.report["decimals"])  # rendering only (config `report`)
with job_log(snakemake.log[0], f"persistent_{p.figure}") as summary:
    prov = job_provenance(cfg, snakemake.input, sections=["persistent"], models=[p.model], datasets=[p.dataset])
    summary.update(transfer_figure_job(snakemake.input.transfer, snakemake.input.random_label, list(p.order),
                                       out[p.figure], out[f"{p.figure}_csv"], out[f"{p.figure}_md"], title=p.title,
                                       n_boot=p.n_boot, seed=p.seed, provenance=prov))
