"""A plan before launch (issue 14): what a config's run asks of each model, before it runs.

For every model and stage: the jobs, the distinct model requests they make (one request = one
entry of the request cache, `selfknow.models.cache`: a generated prompt, a beam search, a
(context, continuation) log-likelihood or a next-token read-out), estimated prompt and
completion tokens, API dollars at `lcae.prices` and device-hours at the model's
`throughput_tok_s`. A job whose outputs exist makes no request on a rerun (Snakemake does not
rerun it and the request cache holds its answers): its requests are listed as cached.

How the requests are found, stage by stage:

- The items are the workflow's own: `<results>/items/` when built, else built the way the
  `items` rule builds them (the synthetic world is generated in memory, 0.2 s), else, for a hub
  dataset not downloaded yet, placeholders of the size its config ranges give (else of the
  sample size, an upper bound) and the typical text lengths of `TYPICAL_CHARS`. Samples are
  drawn with `sample_items` and the config's seeds, as the jobs draw them.
- Greedy generation, LADDER's answers and LCAE Stages 1-2 run the jobs' own prompt-building
  code (`greedy_answers`, `make_answer_fn`, `answer_items`, `assess`) against `PlanLM`, which
  records every request under the key parts the request cache uses (call, prompt or pair,
  decoding parameters, sample index where repeats differ) and answers with seeded placeholders.
  Requests two stages share (LADDER's and LCAE's option scores on the same checkpoint) are
  counted once, under the stage that comes first in `STAGES`.
- Stages whose requests depend on earlier outputs are estimates, and the `basis` column says
  why: LCAE's DPR routes send roughly half the items to the slow path here (the placeholder
  log-likelihoods and replies are a seeded coin), LADDER's LLM user is counted as one request
  per turn (identical turns share one at most), LADDER's prompted levels as one per session
  (LSA, GT-SelfStats and their controls) and one per turn after the third (query confidence),
  LADDER's extension tasks as two per item (the answer and its confidence), its cross-task
  priors by the job's own answering and prior code (no prior request with `prior: l1`), the
  persistent judge as one request per question (`labels: generate`) or per beam (`constrained`,
  an upper bound on the candidate groups).
- The persistent protocol's counts follow the variant plans the rules resolve
  (`plan_variant`): one request per (adapter, scoring checkpoint, answering checkpoint, test
  question), an upper bound, since the same answer of two checkpoints read by one scorer is one
  request (about 10 % fewer in the tiny config, whose checkpoints answer alike). Adapter training is device time only: its forward and backward passes are
  counted as 3 x the training tokens (`TRAIN_PASSES`).

Tokens: prompts are measured as characters / `CHARS_PER_TOKEN`; completions as the requests'
budgets (an upper bound: an answer stops at its stop string); beams as `num_beams` x budget.
Hidden reasoning tokens of reasoning models are not included, except the persistent judge's
where it reasons (`judge_reasoning_tokens`: its reasoning headroom per request, an upper bound).
A batched API model (`batch: true`) costs no device time but waiting: its rows' hours are its
jobs x the batch completion window (an upper bound, shown apart from GPU and CPU hours).
"""
from __future__ import annotations

import hashlib
import math
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from selfknow.config import checkpoint_names, is_chat, model_entry
from selfknow.models.base import LM, Beam, CallStats, Generation

#: English text in a GPT-style BPE vocabulary: about 4 characters a token
CHARS_PER_TOKEN = 4
#: forward + backward pass of a training example, in forward-pass token equivalents
TRAIN_PASSES = 3
#: a stage's order: requests two stages share are counted under the first
STAGES = ("generate", "persistent_sc", "persistent_judge", "persistent_variants", "persistent_gcm",
          "judge_audit", "ladder_answers", "ladder_user", "ladder_prompted", "ladder_crosstask", "ladder_extension", "ladder_react", "lcae_stage1",
          "lcae_stage2")
#: instruction tokens of an extension-task prompt besides the item (prompts/extension_*.txt)
EXTENSION_PROMPT_TOKENS = 40
#: placeholder text lengths (characters) of a hub dataset not yet on disk: question, answer,
#: each option (MCQ), options per item; rough means read off the datasets' published samples
TYPICAL_CHARS = {
    "triviaqa": (80, 12, 0, 0), "jeopardy": (90, 14, 0, 0), "bioasq": (110, 20, 0, 0),
    "mmlu": (260, 1, 40, 4), "medxpertqa": (1100, 1, 45, 10),
    # MMLU-Pro and BBH: rough guesses, not read off a sample
    "mmlu_pro": (260, 1, 30, 10), "bbh": (500, 6, 0, 0),
    # LADDER's extension tasks: rough guesses, not read off a sample
    "gsm8k": (240, 4, 0, 0), "humaneval": (450, 200, 0, 0), "bfcl": (120, 60, 0, 0),
}


# ----------------------------------------------------------------------------- the ledger
@dataclass
class Row:
    """One (model, stage) line of the plan."""

    jobs: int = 0
    done_jobs: int = 0
    requests: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    train_tokens: int = 0
    basis: set = field(default_factory=set)


class Ledger:
    """Requests per (model, stage); keyed requests are counted once per model checkpoint."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], Row] = defaultdict(Row)
        self._seen: set = set()

    def job(self, model: str, stage: str, done: bool) -> None:
        row = self.rows[model, stage]
        row.jobs += 1
        row.done_jobs += int(done)

    def add(self, model: str, stage: str, n: int, prompt_tokens: int, completion_tokens: int, *,
            done: bool, key=None) -> None:
        """`n` requests (prompt and completion tokens in total); with `key`, only the first
        time that key is seen."""
        if key is not None:
            if key in self._seen:
                return
            self._seen.add(key)
        row = self.rows[model, stage]
        if done:
            row.cached += n
        else:
            row.requests += n
            row.prompt_tokens += prompt_tokens
            row.completion_tokens += completion_tokens

    def train(self, model: str, stage: str, n_tokens: int, *, done: bool) -> None:
        """Adapter-training tokens (device time, no requests)."""
        if not done:
            self.rows[model, stage].train_tokens += n_tokens

    def note(self, model: str, stage: str, text: str) -> None:
        self.rows[model, stage].basis.add(text)


def tokens(text: str) -> int:
    """Estimated tokens of `text` (`CHARS_PER_TOKEN`)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _coin(*parts) -> float:
    """A seeded uniform in [0, 1) from the request itself, so a plan is reproducible."""
    digest = hashlib.sha256(repr(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class PlanLM(LM):
    """An `LM` that records requests in a `Ledger` instead of answering them.

    The key of a request is what the request cache keys on besides the model identity: the
    call, the prompt (or pair), the decoding parameters and the sample index, which counts
    only where repeats differ (`repeats_share_requests`). Replies are seeded placeholders: a
    coin picks "Fast" or "Slow" for generated text and the larger of two log-likelihoods, so
    that the protocols' data-dependent branches are taken about half the time."""

    def __init__(self, ledger: Ledger, spec: dict, checkpoint: str, stage: str, *, done: bool):
        from selfknow.models.registry import backend_class

        self.ledger, self.stage, self.done = ledger, stage, done
        self.backend, self.model_id, self.revision, self.adapter = spec["backend"], spec["name"], checkpoint, None
        self.stats = CallStats()
        self.greedy_deterministic = backend_class(spec["backend"]).greedy_deterministic
        if "token_budgets" in spec:
            self.token_budgets = dict(spec["token_budgets"])

    def _record(self, call: str, payload, prompt_tokens: int, completion_tokens: int) -> None:
        self.ledger.add(self.model_id, self.stage, 1, prompt_tokens, completion_tokens, done=self.done,
                        key=(self.model_id, self.revision, call, payload))

    def generate(self, prompts, *, max_new_tokens, stop=None, chat=False, system=None, temperature=0.0,
                 sample_index=0, json_schemas=None):
        varies = temperature > 0 or not self.greedy_deterministic
        params = (max_new_tokens, tuple(stop or ()), chat, system, temperature, json_schemas is not None,
                  sample_index if varies else 0)
        out = []
        for p in prompts:
            self._record("generate", (p, params), tokens((system or "") + p), max_new_tokens)
            text = "Slow" if _coin(p, params) < 0.5 else "Fast"
            out.append(Generation(text, tokens(p), 1))
        return out

    def beam_search(self, prompts, *, num_beams, max_new_tokens, stop=("\n",)):
        for p in prompts:
            self._record("beam_search", (p, num_beams, max_new_tokens, tuple(stop)), tokens(p),
                         num_beams * max_new_tokens)
        return [[Beam(f"beam {k}", -float(k)) for k in range(num_beams)] for _ in prompts]

    def loglikelihood(self, pairs):
        for ctx, cont in pairs:
            self._record("loglikelihood", (ctx, cont), tokens(ctx + cont), 0)
        return [-1.0 - _coin(ctx, cont) for ctx, cont in pairs]

    def next_token_logprobs(self, prompts, candidates, *, chat=False):
        for p in prompts:
            self._record("next_token_logprobs", (p, tuple(candidates), chat), tokens(p), 1)
        return np.zeros((len(prompts), len(candidates)))


# ----------------------------------------------------------------------------- items
def _configured_size(spec, split: str) -> int | None:
    """Items of one split of a hub dataset as its config fixes them, else None."""
    if f"{split}_range" in spec:
        lo, hi = spec[f"{split}_range"]
        return hi - lo
    if spec["loader"] == "mmlu" and split == "test":
        lo, hi = spec["subject_range"]
        return len(spec["subjects"]) * (hi - lo)
    return None


def placeholder_items(name: str, spec, split: str, n: int) -> pd.DataFrame:
    """`n` stand-in items of a hub dataset not yet on disk, with its typical text lengths."""
    q, a, opt, k = TYPICAL_CHARS[spec["loader"]]
    domains = list(spec["subjects"]) if "subjects" in spec else ["all"]
    return pd.DataFrame({
        "item_id": [f"{name}:{split}:{i}" for i in range(n)],
        "question": [f"{name} {split} {i}: ".ljust(q, "q") for i in range(n)],
        "answer": ["a" * a] * n, "aliases": [[] for _ in range(n)],
        "choices": [["o" * opt] * k if k else None for _ in range(n)],
        "domain": [domains[i % len(domains)] for i in range(n)], "split": split})


class Items:
    """Train/test items of every configured dataset, found as the plan's docstring says."""

    def __init__(self, cfg: dict, results: Path):
        self.cfg, self.results = cfg, results
        self._cache: dict[str, dict[str, pd.DataFrame | None]] = {}
        self._world: tempfile.TemporaryDirectory | None = None
        self.basis: dict[str, str] = {}

    def _world_dir(self) -> Path:
        built = self.results / "world" / "data"
        if (built / "qa.parquet").is_file():
            return built
        if self._world is None:
            from selfknow.world.generator import generate_world

            self._world = tempfile.TemporaryDirectory(prefix="selfknow-plan-")
            w = self.cfg["world"]
            generate_world({"seed": w["seed"], **w["generator"]}, self._world.name)
        return Path(self._world.name)

    def get(self, name: str) -> dict[str, pd.DataFrame | None]:
        if name in self._cache:
            return self._cache[name]
        from selfknow.stages.items import SYNTHETIC_LOADERS, build_items
        from selfknow.records import read_parquet

        spec = self.cfg["datasets"][name]
        paths = {s: self.results / "items" / name / f"{s}.parquet" for s in ("train", "test")}
        if all(p.is_file() for p in paths.values()):
            out, self.basis[name] = {s: read_parquet(p) for s, p in paths.items()}, "items on disk"
        elif spec["loader"].startswith("world_"):
            out = build_items(name, dict(spec), self.cfg["seed"], self._world_dir())
            self.basis[name] = "items built from the world"
        elif spec["loader"] in SYNTHETIC_LOADERS:
            out = build_items(name, dict(spec), self.cfg["seed"])
            self.basis[name] = "generated items"
        else:
            sizes = {s: _configured_size(spec, s) for s in ("train", "test")}
            out = {s: None if n is None else placeholder_items(name, spec, s, n) for s, n in sizes.items()}
            self.basis[name] = "placeholders, " + ", ".join(
                f"{s} split: {'size from the config' if n is not None else 'the sample size (an upper bound)'}"
                for s, n in sizes.items())
        self._cache[name] = out
        return out

    def sample(self, name: str, split: str, n: int | None, seed: int, **kw) -> pd.DataFrame | None:
        from selfknow.stages.items import sample_items

        df = self.get(name)[split]
        if df is None:
            if not n:
                raise ValueError(f"plan: dataset {name!r}: the config fixes neither the size of its {split} "
                                 f"split nor a sample size; build its items first (results/items/{name}/)")
            df = placeholder_items(name, self.cfg["datasets"][name], split, n)
        return sample_items(df, n or None, seed, **kw)

    def close(self) -> None:
        if self._world is not None:
            self._world.cleanup()


# ----------------------------------------------------------------------------- the stages
#: why the persistent confidence read-outs are upper bounds
SHARED_ANSWERS = ("one request per scored answer (an upper bound: one scorer reading the same answer of two "
                  "checkpoints to a question makes one)")


@dataclass(frozen=True)
class Sample:
    """One persistent SC sample: its questions and the prompt tokens of scoring its answers."""

    n: int
    conf_tokens: int


def _exists(*paths) -> bool:
    return all(Path(p).exists() for p in paths)


class Planner:
    """Walks a validated config's stages in `STAGES` order and fills a `Ledger`."""

    def __init__(self, cfg: dict, results: str | Path | None = None):
        self.cfg = cfg
        self.R = Path(cfg["results"] if results is None else results)
        self.items = Items(cfg, self.R)
        self.ledger = Ledger()
        self.seed = cfg["seed"]

    def lm(self, model: str, ckpt: str, stage: str, done: bool) -> PlanLM:
        self.ledger.job(model, stage, done)
        return PlanLM(self.ledger, model_entry(self.cfg, model), ckpt, stage, done=done)

    def run(self) -> Ledger:
        try:
            self.generation()
            if "persistent" in self.cfg:
                self.persistent()
            self.judge_audit()
            if "ladder" in self.cfg:
                self.ladder()
                if "cross_task" in self.cfg["ladder"]:
                    self.crosstask()
                if "extension" in self.cfg["ladder"]:
                    self.extension()
                if "react" in self.cfg["ladder"]:
                    self.react()
            if "lcae" in self.cfg:
                self.lcae()
        finally:
            self.items.close()
        return self.ledger

    def _train_frame(self, ds: str, n_shots: int) -> pd.DataFrame:
        """A dataset's train split, for its in-context examples."""
        train = self.items.get(ds)["train"]
        return train if train is not None else placeholder_items(ds, self.cfg["datasets"][ds], "train", n_shots)

    # -- the shared greedy stage (rules/generate.smk): world evolution and the judge audit's answers
    def generation_jobs(self) -> list[tuple[str, str, str]]:
        cfg, jobs = self.cfg, []
        if "world" in cfg:
            world = [m["name"] for m in cfg["models"] if "source" in m and m["source"] == "world"]
            jobs += [(m, c, cfg["world"]["qa_dataset"]) for m in world for c in checkpoint_names(cfg, m)]
        if "llm_judge" in cfg["judge"] and "persistent" in cfg:
            jobs += [(m, checkpoint_names(cfg, m)[-1], cfg["judge"]["audit_dataset"])
                     for m in cfg["persistent"]["models"]]
        return list(dict.fromkeys(jobs))

    def generation(self) -> None:
        from selfknow.stages.generation import fixed_shots, greedy_answers

        g = self.cfg["generation"]
        for m, c, ds in self.generation_jobs():
            done = _exists(self.R / "generations" / m / c / "greedy" / f"{ds}.parquet")
            items = self.items.sample(ds, "test", g["n_items"], self.seed)
            shots = fixed_shots(self._train_frame(ds, g["n_shots"]), g["n_shots"], self.seed)
            greedy_answers(self.lm(m, c, "generate", done), items, shots=shots,
                           chat=is_chat(model_entry(self.cfg, m)), max_new_tokens=g["max_new_tokens"])

    # -- persistent calibration (rules/persistent*.smk)
    def persistent(self) -> None:
        from selfknow.protocols.persistent.variants import (
            MAIN,
            TABLE_VARIANTS,
            TRANSFER,
            TRANSFER_VARIANTS,
            transfer_slices,
        )

        pc = self.cfg["persistent"]
        transfer = pc["transfer_dataset"] if "transfer_dataset" in pc else None
        for k, m in enumerate(pc["models"]):
            ck = checkpoint_names(self.cfg, m)
            tr, ev = ck[:pc["train_checkpoints"]], ck[pc["train_checkpoints"]:]
            sc: dict[tuple[str, str, str], Sample] = {}  # the transfer dataset's are shared
            for j, d in enumerate(pc["datasets"]):
                jobs = [(v, s, True) for v in TABLE_VARIANTS for s in pc["seeds"]]
                if k == 0 and j < 2:  # Figures 3 and 4: the first model on the first two datasets
                    # variants cut from the transfer variant's table (its seed) train nothing
                    sliced, transfer_seed = set(transfer_slices(tr, ev)), pc["variance_seeds"][0]
                    jobs = [(v, s, scored) for v, s, scored in jobs if not (v in sliced and s == transfer_seed)]
                    jobs += [("transfer", transfer_seed, True), ("random_label", pc["seeds"][0], True)]
                if k == 0 and j == 0:  # Table 19's other seeds: hidden states only
                    jobs += [("transfer", s, False) for s in pc["variance_seeds"][1:]]
                plans = [(self._variant_plan(v, tr, ev, transfer is not None and v in TRANSFER_VARIANTS), s, scored)
                         for v, s, scored in jobs]
                # Table 7 reads every checkpoint's test answers (and the transfer dataset's)
                need = {(c, d, "train") for c in tr} | {(c, d, "test") for c in ck}
                for plan, _, scored in plans:
                    need |= {(c, d, "train") for c in plan.train_data}
                    if scored:
                        need |= {(c, d, "test") for c in plan.test_targets(MAIN)}
                        need |= {(c, transfer, sp) for c in plan.test_targets(TRANSFER) for sp in ("train", "test")}
                if transfer is not None:
                    need |= {(c, transfer, sp) for c in ck for sp in ("train", "test")}
                for c, ds in sorted({(c, ds) for c, ds, _ in need} - {(c, ds) for c, ds, _ in sc}):
                    sc.update({(c, ds, sp): sample for sp, sample in self.sc_job(m, c, ds).items()})
                for plan, s, scored in plans:
                    self.variant_job(m, d, plan, s, scored, sc, transfer)
                if "gcm_model" in pc:  # the released GCM scores once; ours trains per seed
                    for s in ([None] if "gcm_adapter" in pc else pc["seeds"]):
                        self.gcm_job(m, d, s, tr, ev, sc)
        if "gcm_model" in pc:  # Figure 2: the GCM backbone's own answers on each training dataset
            gm = pc["gcm_model"]
            for d in pc["datasets"]:
                self.sc_job(gm, checkpoint_names(self.cfg, gm)[-1], d)

    def _variant_plan(self, variant: str, tr, ev, with_transfer: bool):
        from selfknow.protocols.persistent.variants import plan_variant

        return plan_variant(variant, tr, ev, with_transfer=with_transfer,
                            pair_mode=self.cfg["persistent"]["random_label_pairs"])

    def sc_job(self, m: str, c: str, ds: str) -> dict[str, "Sample"]:
        """Beam search on both splits' samples (persistent_sc, one job); returns each split's
        sample size and the prompt tokens of reading a confidence on each of its answers."""
        from selfknow.stages.judge import max_judge_tokens
        from selfknow.protocols.persistent.prompts import qa_prompts, question_shots
        from selfknow.stages.items import icl_by_domain

        pc, judge = self.cfg["persistent"], self.cfg["judge"]
        base = self.R / "persistent"
        splits = ("train", "test")
        beams, judged = pc["num_beams"], judge["correctness"] == "llm"
        labelled = [base / "sc" / m / c / ds / f"{split}.parquet" for split in splits]
        # under the LLM judge, persistent_sc writes candidates and persistent_judge the SC tables
        sc_out = [base / "candidates" / m / c / ds / f"{split}.parquet" for split in splits] if judged else labelled
        done = _exists(*sc_out, *(base / "beams" / m / c / ds / f"{split}.parquet" for split in splits))
        lm = self.lm(m, c, "persistent_sc", done)
        if judged:
            jm, per_q = judge["llm_judge"], 1 if judge["labels"] == "generate" else beams
            judge_done, hidden = _exists(*labelled), judge_reasoning_tokens(model_entry(self.cfg, jm))
            self.ledger.job(jm, "persistent_judge", judge_done)
        train, by_domain = self._train_frame(ds, pc["n_shots"]), icl_by_domain(self.cfg["datasets"][ds])
        out = {}
        for split in splits:
            items = self.items.sample(ds, split, pc["n_train"] if split == "train" else pc["n_test"], self.seed)
            shots = question_shots(train, items["domain"], pc["n_shots"], self.seed, by_domain=by_domain)
            prompts = qa_prompts(items["question"], items["domain"], shots, label=pc["prompt_label"])
            lm.beam_search(prompts, num_beams=beams, max_new_tokens=pc["max_new_tokens"], stop=("\n",))
            if judged:
                prompt = sum(tokens(q) for q in items["question"]) + len(items) * (beams * pc["max_new_tokens"] + 80)
                self.ledger.add(jm, "persistent_judge", per_q * len(items), per_q * prompt,
                                per_q * len(items) * (max_judge_tokens(beams) + hidden), done=judge_done)
                self.ledger.note(jm, "persistent_judge", "one request per question (generate) or per beam "
                                                         "(constrained, upper bound on the answer groups)")
            out[split] = Sample(len(items), self._scoring_tokens(items))
        return out

    def _scoring_tokens(self, items: pd.DataFrame) -> int:
        from selfknow.protocols.persistent.prompts import confidence_prompt

        return sum(tokens(confidence_prompt(q, a, "Confidence:")) for q, a in zip(items["question"], items["answer"]))

    def _train_tokens(self, samples: Sequence["Sample"], n_answers: int) -> int:
        return self.cfg["persistent"]["adapter"]["epochs"] * n_answers * sum(s.conf_tokens for s in samples)

    def variant_job(self, m: str, d: str, plan, seed: int, scored: bool, sc: dict, transfer: str | None) -> None:
        from selfknow.protocols.persistent.variants import MAIN

        base = self.R / "persistent"
        done = _exists(base / "adapters" / m / d / plan.variant / f"seed{seed}",
                       *([base / "conf" / m / d / plan.variant / f"seed{seed}.parquet"] if scored else []))
        self.ledger.job(m, "persistent_variants", done)
        for ap in plan.adapters:
            frames = [sc[src, d, "train"] for view in ap.views for src in ap.data_for(view)]
            self.ledger.train(m, "persistent_variants", self._train_tokens(frames, ap.n_answers), done=done)
        for s in plan.scorings if scored else ():
            target = ([sc[s.target, d, "test"]] if s.dataset == MAIN
                      else [sc[s.target, transfer, sp] for sp in ("train", "test")])
            n = sum(t.n for t in target)
            self.ledger.add(m, "persistent_variants", n, sum(t.conf_tokens for t in target), n, done=done)
        self.ledger.note(m, "persistent_variants", SHARED_ANSWERS)

    def gcm_job(self, m: str, d: str, seed: int | None, tr, ev, sc: dict) -> None:
        """One GCM job: the released adapter's scoring (`seed` None) or our GCM's training + scoring."""
        gm = self.cfg["persistent"]["gcm_model"]
        done = _exists(self.R / "persistent" / "gcm" / m / d / ("released.parquet" if seed is None
                                                                else f"seed{seed}.parquet"))
        self.ledger.job(gm, "persistent_gcm", done)
        if seed is not None:
            self.ledger.train(gm, "persistent_gcm", self._train_tokens([sc[c, d, "train"] for c in tr], 1),
                              done=done)
        for target in [sc[c, d, "test"] for c in ev] + [sc[c, d, "train"] for c in tr]:
            self.ledger.add(gm, "persistent_gcm", target.n, target.conf_tokens, target.n, done=done)
        self.ledger.note(gm, "persistent_gcm", SHARED_ANSWERS)

    # -- the judge audit (rules/judge.smk)
    def judge_audit(self) -> None:
        from selfknow.stages.judge import max_judge_tokens

        judge = self.cfg["judge"]
        if "llm_judge" not in judge or "persistent" not in self.cfg:
            return
        jm, ds = judge["llm_judge"], judge["audit_dataset"]
        done = _exists(self.R / "judgments" / "llm_judge_audit.parquet")
        answers = sum(len(self.items.sample(ds, "test", self.cfg["generation"]["n_items"], self.seed))
                      for _ in self.cfg["persistent"]["models"])
        n = min(judge["audit_items"], answers)
        prompt = sum(tokens(q) + 60 for q in self.items.sample(ds, "test", n, self.seed)["question"])
        self.ledger.job(jm, "judge_audit", done)
        modes = len(judge["audit_labels"])  # each answer is judged once per label mode
        self.ledger.add(jm, "judge_audit", modes * n, modes * prompt, modes * n * max_judge_tokens(1), done=done)

    # -- LADDER (rules/ladder.smk)
    def ladder(self) -> None:
        import inspect

        from selfknow.protocols.ladder.answering import make_answer_fn
        from selfknow.protocols.ladder.prompted import lsa_query_confidence

        lad = self.cfg["ladder"]
        pool = self.items.sample(lad["dataset"], "test", lad["items_per_domain"], self.seed, stratify="domain")
        n_dom = pool["domain"].nunique()
        q_tok = int(np.mean([tokens(q) for q in pool["question"]]))
        min_history = inspect.signature(lsa_query_confidence).parameters["min_history"].default
        alt = "llm" if lad["user"] == "rule" else "rule"
        for m in lad["models"]:
            spec = model_entry(self.cfg, m)
            last = checkpoint_names(self.cfg, m)[-1]
            sess = self.R / "ladder" / "sessions" / m
            done = _exists(sess / "main.parquet", sess / "alt_user.parquet")
            answer_lm = self.lm(m, last, "ladder_answers", _exists(sess / "answers.parquet"))
            if not is_chat(spec):
                make_answer_fn(answer_lm, "cloze")(pool)
            else:
                answer = make_answer_fn(answer_lm, lad["answer_format"], temperature=lad["answer_temperature"],
                                        max_new_tokens=lad["answer_max_new_tokens"])
                if not lad["answer_per_turn"] or m not in lad.get("tiers", {}):
                    answer(pool)  # one answer per item: reused, or the tiers' profile
                if lad["answer_per_turn"]:
                    for s in range(lad["n_sessions"]):  # the session's draw of n_turns questions
                        drawn = np.random.default_rng([self.seed, s, 0]).permutation(len(pool))[:lad["n_turns"]]
                        answer(pool.iloc[drawn], sample_index=s + 1)
            for kind, n in ((lad["user"], lad["n_sessions"]), (alt, lad["llm_user_sessions"])):
                if kind == "llm" and n:
                    um = lad.get("user_models", {}).get(m, lad["llm_user_model"])
                    self.ledger.job(um, "ladder_user", done)
                    turns = n * lad["n_turns"]
                    self.ledger.add(um, "ladder_user", turns, turns * (q_tok + 150),
                                    turns * lad["user_max_new_tokens"], done=done)
                    self.ledger.note(um, "ladder_user", "one request per session turn")
            pm = m if is_chat(spec) else lad["prompted_model"]
            done = _exists(self.R / "ladder" / "prompted" / m / "profiles.parquet")
            self.ledger.job(pm, "ladder_prompted", done)
            per_profile = 1 if lad["prompted_mode"] == "json" else n_dom
            asked = min(lad["prompted_sessions"] or lad["n_sessions"], lad["n_sessions"])
            profiles = per_profile * (1 + asked * (4 if lad["lsa_controls"] else 2))
            queries = min(lad["lsa_query_sessions"], lad["n_sessions"]) * max(0, lad["n_turns"] - min_history)
            history = lad["n_turns"] * (q_tok + 50)
            self.ledger.add(pm, "ladder_prompted", profiles + queries,
                            profiles * history + queries * 10 * (q_tok + 45),
                            profiles * lad["prompted_max_new_tokens"] + queries * 10, done=done)
            self.ledger.note(pm, "ladder_prompted", "one request per profile asked and per query turn "
                                                    "(every session assumed to have eligible domains)")

    # -- LADDER cross-task priors (rules/ladder_crosstask.smk)
    def crosstask(self) -> None:
        from selfknow.protocols.ladder.crosstask import answer_suite, sample_suite
        from selfknow.protocols.ladder.prompted import zs_prior

        lad = self.cfg["ladder"]
        ct = lad["cross_task"]
        for suite, sc in ct["suites"].items():
            spec = self.cfg["datasets"][sc["datasets"][0]]
            frames = [self.items.get(d)[sc["split"]] for d in sc["datasets"]]
            if any(f is None for f in frames):  # hub rows not on disk: stand-ins of each category / task
                pool = pd.concat([placeholder_items(f"{suite}:{d}", spec, sc["split"], ct["items_per_domain"])
                                  .assign(domain=d) for d in sc["domains"]], ignore_index=True)
            else:
                pool = sample_suite(pd.concat(frames, ignore_index=True), sc["domains"], ct["items_per_domain"],
                                    self.seed, f"ladder.cross_task.suites.{suite}")
            for m in ct["models"]:
                out = self.R / "ladder" / "crosstask" / suite / m
                done = _exists(out / "answers.parquet", out / "prior.parquet")
                chat = is_chat(model_entry(self.cfg, m))
                lm = self.lm(m, checkpoint_names(self.cfg, m)[-1], "ladder_crosstask", done)
                answer_suite(lm, pool, spec["loader"], chat=chat, max_new_tokens=ct["max_new_tokens"],
                             bbh_lenient=ct["bbh_lenient"])
                if ct["prior"] == "l1":  # read from LADDER's prompted profiles: no request
                    continue
                pm = m if chat else lad["prompted_model"]
                plm = lm if pm == m else PlanLM(self.ledger, model_entry(self.cfg, pm), checkpoint_names(self.cfg, pm)[-1],
                                                "ladder_crosstask", done=done)
                zs_prior(plm, list(sc["domains"]), model=m, mode=lad["prompted_mode"],
                         max_new_tokens=lad["prompted_max_new_tokens"], chat=is_chat(model_entry(self.cfg, pm)))

    # -- LADDER extension tasks (rules/ladder_extension.smk)
    def extension(self) -> None:
        from selfknow.protocols.ladder.extension import TASKS

        ext = self.cfg["ladder"]["extension"]
        asked = {t: self.items.sample(ext[t]["dataset"], "test", ext[t]["n_items"] if "n_items" in ext[t] else None,
                                      self.seed) for t in TASKS}
        for m in ext["models"]:
            done = _exists(self.R / "ladder" / "extension" / m / "records.parquet")
            self.ledger.job(m, "ladder_extension", done)
            for t, items in asked.items():
                n, answer = len(items), ext[t]["max_new_tokens"]
                prompt = sum(tokens(q) for q in items["question"]) + n * EXTENSION_PROMPT_TOKENS
                # step 2 repeats step 1's prompt with the answer in it
                self.ledger.add(m, "ladder_extension", 2 * n, 2 * prompt + n * (answer + EXTENSION_PROMPT_TOKENS),
                                n * (answer + ext["confidence_max_new_tokens"]), done=done)
        self.ledger.note(ext["models"][0], "ladder_extension", "two requests per item: the answer and its confidence "
                                                               "(BFCL's function documents not counted)")

    # -- LADDER held-out ReAct records (rules/ladder_heldout.smk)
    def react(self) -> None:
        from selfknow.protocols.ladder.prompted import zs_prior
        from selfknow.protocols.ladder.react_agent import pick_items, run_agent

        lad = self.cfg["ladder"]
        rc = lad["react"]
        items = pick_items(self.items.sample(rc["dataset"], "test", None, self.seed), rc["items_per_domain"], self.seed)
        for c in rc["configurations"]:
            m, out = c["model"], self.R / "ladder" / "react" / c["model"] / c["name"]
            chat = is_chat(model_entry(self.cfg, m))
            lm = self.lm(m, checkpoint_names(self.cfg, m)[-1], "ladder_react", _exists(out / "test.jsonl"))
            zs_prior(lm, sorted(items["domain"].unique()), model=m, mode=lad["prompted_mode"],
                     max_new_tokens=lad["prompted_max_new_tokens"], chat=chat)
            run_agent(lm, items, max_steps=c["max_steps"], max_new_tokens=rc["max_new_tokens"], chat=chat)
        self.ledger.note(rc["configurations"][0]["model"], "ladder_react",
                         "every trajectory runs to its step limit (an upper bound on requests); later steps' "
                         "prompts counted without the model's own thoughts")

    # -- LCAE (rules/lcae.smk)
    def lcae(self) -> None:
        from selfknow.protocols.lcae.examinees import answer_items
        from selfknow.protocols.lcae.metacognition import assess

        lc = self.cfg["lcae"]
        items = self.items.sample(lc["dataset"], "test", lc["n_items"], self.seed)
        error_p = {i: 0.5 for i in items["item_id"]}  # IRT_ItemErrorP: only its printed value is in a prompt
        for m in lc["examinee_models"]:
            chat = is_chat(model_entry(self.cfg, m))
            for c in checkpoint_names(self.cfg, m):
                done1 = _exists(self.R / "lcae" / "stage1" / m / f"{c}.parquet")
                lm = self.lm(m, c, "lcae_stage1", done1)
                stage1 = pd.concat([answer_items(lm, items, s, chat=chat, max_new_tokens=lc["max_new_tokens"])
                                    for s in lc["strategies"]], ignore_index=True)
                standard = stage1[stage1["strategy"] == "standard"]
                done2 = _exists(self.R / "lcae" / "stage2" / m / f"{c}.parquet")
                lm = self.lm(m, c, "lcae_stage2", done2)
                for cond in lc["conditions"]:
                    for r in range(lc["repeats"]):
                        assess(lm, items, standard, cond, error_p, chat=chat, repeat=r, reflection=lc["reflection"],
                               temperature=lc["stage2_temperature"], max_new_tokens=lc["max_new_tokens"])
                if {"dpr", "ids_dpr"} & set(lc["conditions"]):
                    self.ledger.note(m, "lcae_stage2", "DPR routes: about half the items taken as slow")


def judge_reasoning_tokens(spec: dict) -> int:
    """Hidden reasoning tokens per request of an API judge that reasons (an effort other than
    "none" sent, `request_options`): its reasoning headroom `reasoning_tokens`, an upper bound;
    0 for a judge asked no effort (the authors' request shape) or a local judge."""
    from selfknow.models.openai_api import request_options

    if spec["backend"] != "openai":
        return 0
    opts = request_options(spec)
    return int(opts["reasoning_tokens"]) if opts["reasoning_effort"] not in (None, "none") else 0


def batch_window_hours(spec: dict) -> float:
    """The hours one Batch API job may take (`batch_completion_window`, e.g. "24h")."""
    window = str(spec["batch_completion_window"])
    if not window.endswith("h") or not window[:-1].isdigit():
        raise ValueError(f"model {spec['name']!r}: batch_completion_window {window!r} is not '<hours>h'")
    return float(window[:-1])


# ----------------------------------------------------------------------------- the report
PLAN_COLUMNS = ["model", "stage", "jobs", "done_jobs", "requests", "cached", "prompt_tokens",
                "completion_tokens", "reasoning_tokens", "train_tokens", "usd", "device", "device_hours", "basis"]


def price_per_mtok(cfg: dict, model: str) -> tuple[float, float] | None:
    """[input, output] USD per million tokens of an API (`openai` backend) model: its entry's
    `price` (the provider's list price, less its `batch_discount` where the entry sends
    batches), else config `lcae.prices`; None for a local model (it costs device time) or an
    API model without either."""
    spec = model_entry(cfg, model)
    prices = cfg["lcae"]["prices"] if "lcae" in cfg else {}
    if spec["backend"] != "openai":
        return None
    if "price" in spec:
        p = spec["price"]
        keep = 1 - p["batch_discount"] if spec["batch"] and "batch_discount" in p else 1
        return p["input"] * keep, p["output"] * keep
    return tuple(prices[model]) if model in prices else None


def reasoning_per_request(spec: dict) -> tuple[int, str] | None:
    """Hidden reasoning tokens one request of an API model spends, and the basis: the entry's
    `reasoning_estimate`, else, for a model whose requests reason (reasoning headroom or
    effort from its entry or preset), the request's reasoning headroom (an upper bound);
    None for a model that does not reason."""
    from selfknow.models.openai_api import request_options

    if spec["backend"] != "openai":
        return None
    if "reasoning_estimate" in spec:
        return spec["reasoning_estimate"]["tokens"], spec["reasoning_estimate"]["source"]
    opts = request_options(spec)
    if opts["reasoning_tokens"] or opts["reasoning_effort"] not in (None, "none"):
        return opts["reasoning_tokens"], "the request's reasoning headroom (an upper bound)"
    return None


def plan_frame(cfg: dict, ledger: Ledger) -> pd.DataFrame:
    """One row per (model, stage) in `STAGES` order, with dollars for priced models and
    device-hours for local (`hf`) ones at their `throughput_tok_s`."""
    rows = []
    for (model, stage), r in sorted(ledger.rows.items(), key=lambda kv: (STAGES.index(kv[0][1]), kv[0][0])):
        spec = model_entry(cfg, model)
        price = price_per_mtok(cfg, model)
        reasoning = reasoning_per_request(spec)
        hidden = r.requests * reasoning[0] if reasoning else 0
        usd = ((r.prompt_tokens * price[0] + (r.completion_tokens + hidden) * price[1]) / 1e6 if price
               else float("nan"))
        if spec["backend"] == "hf":
            work = r.prompt_tokens + r.completion_tokens + TRAIN_PASSES * r.train_tokens
            hours = work / spec["throughput_tok_s"] / 3600 * max(1, spec["gpu"])
            device = f"{spec['gpu']} GPU" if spec["gpu"] else "CPU"
        elif spec["batch"]:
            hours, device = r.jobs * batch_window_hours(spec), "API batch"  # waiting, an upper bound
        else:
            hours, device = float("nan"), "API"
        rows.append({"model": model, "stage": stage, "jobs": r.jobs, "done_jobs": r.done_jobs,
                     "requests": r.requests, "cached": r.cached, "prompt_tokens": r.prompt_tokens,
                     "completion_tokens": r.completion_tokens, "reasoning_tokens": hidden,
                     "train_tokens": r.train_tokens, "usd": usd,
                     "device": device, "device_hours": hours, "basis": "; ".join(sorted(r.basis))})
    return pd.DataFrame(rows, columns=PLAN_COLUMNS)


def make_plan(cfg: dict, results: str | Path | None = None) -> tuple[pd.DataFrame, dict[str, str]]:
    """The plan of a validated config (`results` overrides its `results`): the `plan_frame`
    and where each dataset's items came from."""
    planner = Planner(cfg, results)
    ledger = planner.run()
    return plan_frame(cfg, ledger), dict(planner.items.basis)


def _human(x: float) -> str:
    if not np.isfinite(x):
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.1f}{unit}"
    return f"{x:.0f}"


def render_plan(df: pd.DataFrame, datasets: dict[str, str]) -> str:
    """The plan as a Markdown table with a total row, then the notes on estimated rows."""
    notes: list[str] = []
    lines = ["| model | stage | jobs (done) | requests | cached | prompt tok | completion tok | reasoning tok | USD | "
             "device | hours |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples(index=False):
        mark = ""
        if r.basis:
            if r.basis not in notes:
                notes.append(r.basis)
            mark = f" [{notes.index(r.basis) + 1}]"
        usd = "-" if not np.isfinite(r.usd) else f"{r.usd:,.2f}"
        hours = "-" if not np.isfinite(r.device_hours) else f"{r.device_hours:,.2f}"
        lines.append(f"| {r.model} | {r.stage}{mark} | {r.jobs} ({r.done_jobs}) | {r.requests:,} | {r.cached:,} | "
                     f"{_human(r.prompt_tokens)} | {_human(r.completion_tokens)} | {_human(r.reasoning_tokens)} | "
                     f"{usd} | {r.device} | {hours} |")
    priced = df["usd"].notna()
    hours = "; ".join(f"{name} {df.loc[df['device'].str.endswith(kind), 'device_hours'].sum():,.2f}"
                      for kind, name in (("GPU", "GPU"), ("CPU", "CPU"), ("batch", "batch wait"))
                      if df["device"].str.endswith(kind).any())
    lines.append(f"| **total** | | {df['jobs'].sum()} ({df['done_jobs'].sum()}) | {df['requests'].sum():,} | "
                 f"{df['cached'].sum():,} | {_human(df['prompt_tokens'].sum())} | "
                 f"{_human(df['completion_tokens'].sum())} | {_human(df['reasoning_tokens'].sum())} | "
                 f"{df.loc[priced, 'usd'].sum():,.2f} | | {hours} |")
    out = "\n".join(lines)
    unpriced = sorted(set(df.loc[df["device"].str.startswith("API") & ~priced, "model"]))
    foot = [f"[{i + 1}] estimate: {n}" for i, n in enumerate(notes)]
    foot += [f"items: {name}: {basis}" for name, basis in sorted(datasets.items())]
    if unpriced:
        foot.append("no published price found, USD not counted (no `price` in the model entry nor in "
                    "lcae.prices): " + ", ".join(unpriced))
    foot.append("completion tokens are the requests' budgets (upper bounds); reasoning tokens are the hidden "
                "reasoning of reasoning models, billed as output (see the price table); "
                "hours = (prompt + completion + 3 x adapter-training tokens) / throughput_tok_s x GPUs; "
                "API batch hours = jobs x the batch completion window, time waited (upper bound), no device")
    return out + "\n\n" + "\n".join(f"- {line}" for line in foot) + "\n"


def render_prices(cfg: dict, df: pd.DataFrame) -> str:
    """Per API model of the plan: the price it is counted at and where it comes from, the
    hidden reasoning tokens per request and their basis, and its dollars in total; then one
    `unpriced: <model> (<why>)` line per API model whose dollars are not counted."""
    lines = ["| API model | USD / 1M in | USD / 1M out | batch | price source | reasoning tok / request | "
             "reasoning basis | USD |", "|---|---|---|---|---|---|---|---|"]
    api = df[df["device"].str.startswith("API")]
    unpriced = []
    for model in sorted(set(api["model"])):
        spec = model_entry(cfg, model)
        price = price_per_mtok(cfg, model)
        if "price" in spec:
            source = spec["price"]["source"]
        elif price is not None:
            source = "lcae.prices (the LCAE paper's price)"
        else:
            source = "**no published price found**: USD not counted"
            why = spec.get("unpriced", "no `price` in its model entry nor in lcae.prices")
            unpriced.append(f"unpriced: {model} ({why})")
        batch = "yes" if spec["batch"] and "batch_discount" in spec.get("price", {}) else "-"
        reasoning = reasoning_per_request(spec)
        usd = api.loc[api["model"] == model, "usd"].sum() if price else float("nan")
        cells = [f"{price[0]:g}", f"{price[1]:g}"] if price else ["-", "-"]
        lines.append(f"| {model} | {cells[0]} | {cells[1]} | {batch} | {source} | "
                     f"{reasoning[0] if reasoning else 0:,} | {reasoning[1] if reasoning else 'no reasoning'} | "
                     f"{'-' if not np.isfinite(usd) else f'{usd:,.2f}'} |")
    return "\n".join(lines + ([""] + unpriced if unpriced else [])) + "\n"
