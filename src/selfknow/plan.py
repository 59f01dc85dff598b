"""A plan before launch (issue 14): what a config's run asks of each model, before it runs.

The jobs are Snakemake's own: the DAG of the config and target (`selfknow.dag`, as
`snakemake --dry-run --forceall` builds it), each with its rule, wildcards and params. Each
rule that makes model requests has one entry in `COUNTERS` (the others are named in
`FREE_RULES`; a rule in neither stops the plan), which counts one job's requests. Per model
and stage: the jobs, the distinct model requests they make (one request = one entry of the
request cache, `selfknow.models.cache`: a generated prompt, a beam search, a (context,
continuation) log-likelihood or a next-token read-out), estimated prompt and completion
tokens, API dollars at the model's price and device-hours at its `throughput_tok_s`. A job
whose outputs exist makes no request on a rerun (Snakemake does not rerun it and the request
cache holds its answers): its requests are listed as cached.

How the requests are found, stage by stage:

- The items are the workflow's own, else built or placeholders (`selfknow.plan_items`).
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
- The persistent variant jobs' counts follow the variant plans the jobs resolve (`plan_variant`):
  one request per (adapter, scoring checkpoint, answering checkpoint, test question), an upper
  bound, since the same answer of two checkpoints read by one scorer is one request (about 10 %
  fewer in the tiny config, whose checkpoints answer alike). Adapter training is device time
  only: its forward and backward passes are counted as 3 x the training tokens (`TRAIN_PASSES`).

Tokens: prompts are measured as characters / `CHARS_PER_TOKEN`; completions as the requests'
budgets (an upper bound: an answer stops at its stop string); beams as `num_beams` x budget.
Hidden reasoning tokens of reasoning models are not included, except the persistent judge's
where it reasons (`judge_reasoning_tokens`: its reasoning headroom per request, an upper bound).
A batched API model (`batch: true`) costs no device time but waiting: its rows' hours are its
jobs x the batch completion window (an upper bound, shown apart from GPU and CPU hours).
"""
from __future__ import annotations

import fnmatch
import hashlib
import inspect
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from selfknow.config import checkpoint_names, is_chat, load_config, model_entry
from selfknow.dag import WORKFLOW_ROOT, DagJob, workflow_jobs
from selfknow.models.base import LM, Beam, CallStats, Generation
from selfknow.models.openai_api import request_options
from selfknow.models.registry import backend_class
from selfknow.placement import runtime_key
from selfknow.plan_items import Items, placeholder_items
from selfknow.plan_runtimes import MAX_RUNTIME_MIN, RUNTIME_MARGIN, RUNTIME_STARTUP_MIN, batch_window_hours, job_hours
from selfknow.protocols.ladder.answering import make_answer_fn
from selfknow.protocols.ladder.crosstask import answer_suite, sample_suite
from selfknow.protocols.ladder.prompted import lsa_query_confidence, zs_prior
from selfknow.protocols.ladder.react_agent import pick_items, run_agent
from selfknow.protocols.lcae.examinees import answer_items
from selfknow.protocols.lcae.metacognition import answer_calibration, assess
from selfknow.protocols.persistent.prompts import confidence_prompt, qa_prompts, question_shots
from selfknow.protocols.persistent.variants import MAIN, TRANSFER, plan_variant
from selfknow.stages.generation import fixed_shots, greedy_answers
from selfknow.stages.judge import max_judge_tokens

#: English text in a GPT-style BPE vocabulary: about 4 characters a token
CHARS_PER_TOKEN = 4
#: forward + backward pass of a training example, in forward-pass token equivalents
TRAIN_PASSES = 3
#: instruction tokens of an extension-task prompt besides the item (prompts/extension_*.txt)
EXTENSION_PROMPT_TOKENS = 40


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

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """Model -> (jobs, device work in tokens) so far: two snapshots around one job's
        counting give what that job asks of each model (`job_hours`)."""
        out: dict[str, tuple[int, int]] = {}
        for (model, _), r in self.rows.items():
            jobs, work = out.get(model, (0, 0))
            out[model] = (jobs + r.jobs, work + r.prompt_tokens + r.completion_tokens + TRAIN_PASSES * r.train_tokens)
        return out


def tokens(text: str) -> int:
    """Estimated tokens of `text` (`CHARS_PER_TOKEN`)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _coin(*parts) -> float:
    """A seeded uniform in [0, 1) from the request itself, so a plan is reproducible."""
    digest = hashlib.sha256(repr(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


#: the spread (nats) of PlanLM's placeholder log-likelihoods. Pairwise comparisons do not depend
#: on it; a branch on an option's probability does (a base LM's DPR route, `route_base`). Spread
#: over 6 nats, the most likely of four options holds half the probability or more in 78 % of
#: items, as a trained model's choice is peaked: the route goes Fast on most answers picked by the
#: same scoring and Slow on about 80 % of the others. (Over 1 nat no option ever reaches half and
#: every item would count as Slow, twice what the tiny run's base LMs ask.)
LL_SPREAD = 6.0


class PlanLM(LM):
    """An `LM` that records requests in a `Ledger` instead of answering them.

    The key of a request is what the request cache keys on besides the model identity: the
    call, the prompt (or pair), the decoding parameters and the sample index, which counts
    only where repeats differ (`repeats_share_requests`). Replies are seeded placeholders: a
    coin picks "Fast" or "Slow" for generated text and the larger of two log-likelihoods, so
    that the protocols' data-dependent branches are taken about half the time."""

    def __init__(self, ledger: Ledger, spec: dict, checkpoint: str, stage: str, *, done: bool):
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
        # one set of (frozen) beams for every prompt: the paper config plans 600,000 searches
        beams = [Beam(f"beam {k}", -float(k)) for k in range(num_beams)]
        return [list(beams) for _ in prompts]

    def loglikelihood(self, pairs):
        for ctx, cont in pairs:
            self._record("loglikelihood", (ctx, cont), tokens(ctx + cont), 0)
        return [-1.0 - LL_SPREAD * _coin(ctx, cont) for ctx, cont in pairs]

    def next_token_logprobs(self, prompts, candidates, *, chat=False):
        for p in prompts:
            self._record("next_token_logprobs", (p, tuple(candidates), chat), tokens(p), 1)
        return np.zeros((len(prompts), len(candidates)))


# ----------------------------------------------------------------------------- the counting
#: why the persistent confidence read-outs are upper bounds
SHARED_ANSWERS = ("one request per scored answer (an upper bound: one scorer reading the same answer of two "
                  "checkpoints to a question makes one)")


@dataclass(frozen=True)
class Sample:
    """One persistent SC sample: its questions and the prompt tokens of scoring its answers."""

    n: int
    conf_tokens: int


class Planner:
    """Counts the requests of a validated config's DAG jobs into a `Ledger`, one job at a time,
    each by its rule's entry in `COUNTERS`. What a job reads comes from its wildcards and
    params, the item files from the `items` jobs' outputs; the config gives only what the
    rules also take from it (sample sizes, seeds)."""

    def __init__(self, cfg: dict, jobs: Sequence[DagJob]):
        self.cfg, self.jobs = cfg, jobs
        self.items = Items(cfg, {j.wildcards["dataset"]: {s: j.outputs[s] for s in ("train", "test")}
                                 for j in jobs if j.rule == "items"},
                           next((j.outputs["qa"] for j in jobs if j.rule == "world_generate"), None))
        self.ledger = Ledger()
        self.seed = cfg["seed"]
        self._samples: dict[tuple[str, str], Sample] = {}
        self._pools: dict[str, pd.DataFrame] = {}
        #: (job, hours it runs by the plan: `job_hours`), in counting order
        self.job_hours: list[tuple[DagJob, float]] = []

    def lm(self, model: str, ckpt: str, stage: str, job: DagJob) -> PlanLM:
        """A recording model for `job`, counted as one job of (model, stage)."""
        self.ledger.job(model, stage, job.done)
        return PlanLM(self.ledger, model_entry(self.cfg, model), ckpt, stage, done=job.done)

    def last(self, model: str) -> str:
        return checkpoint_names(self.cfg, model)[-1]

    def run(self) -> Ledger:
        """Count every job in `STAGES` order (requests two stages share count under the first)."""
        jobs = self.jobs
        unknown = sorted({j.rule for j in jobs if not j.norun and j.rule not in COUNTERS and not is_free(j.rule)})
        if unknown:
            raise PlanError(f"plan: rule(s) {', '.join(unknown)} have no entry in selfknow.plan: count their "
                            "requests (COUNTERS) or declare them free of model requests (FREE_RULES)")
        order = list(COUNTERS)
        try:
            for job in sorted((j for j in jobs if j.rule in COUNTERS), key=lambda j: order.index(j.rule)):
                before = self.ledger.snapshot()
                COUNTERS[job.rule].count(self, job)
                self.job_hours.append((job, job_hours(self.cfg, before, self.ledger.snapshot())))
        finally:
            self.items.close()
        return self.ledger

    def _train_frame(self, ds: str, n_shots: int) -> pd.DataFrame:
        """A dataset's train split, for its in-context examples."""
        train = self.items.get(ds)["train"]
        return train if train is not None else placeholder_items(ds, self.cfg["datasets"][ds], "train", n_shots)

    # -- the shared greedy stage (rules/generate.smk)
    def generate(self, job: DagJob) -> None:
        p, w = job.params, job.wildcards
        items = self.items.sample(w["dataset"], "test", p["n_items"], p["seed"])
        shots = fixed_shots(self._train_frame(w["dataset"], p["n_shots"]), p["n_shots"], p["seed"])
        greedy_answers(self.lm(w["model"], w["ckpt"], "generate", job), items, shots=shots,
                       chat=is_chat(p["spec"]), max_new_tokens=p["max_new_tokens"])

    # -- persistent calibration (rules/persistent.smk)
    def sample(self, ds: str, split: str) -> Sample:
        """The size of a persistent SC sample and the prompt tokens of scoring its answers (the
        same items for every checkpoint)."""
        if (ds, split) not in self._samples:
            pc = self.cfg["persistent"]
            items = self.items.sample(ds, split, pc["n_train"] if split == "train" else pc["n_test"], self.seed)
            conf = sum(tokens(confidence_prompt(q, a, "Confidence:")) for q, a in zip(items["question"], items["answer"]))
            self._samples[ds, split] = Sample(len(items), conf)
        return self._samples[ds, split]

    def persistent_sc(self, job: DagJob) -> None:
        """Beam search on both splits' samples, one request a question."""
        p, w = job.params, job.wildcards
        lm = self.lm(w["model"], w["ckpt"], "persistent_sc", job)
        train = self._train_frame(w["dataset"], p["n_shots"])
        for split, n in p["n_items"].items():
            items = self.items.sample(w["dataset"], split, n, p["seed"])
            shots = question_shots(train, items["domain"], p["n_shots"], p["seed"], by_domain=p["icl_by_domain"])
            prompts = qa_prompts(items["question"], items["domain"], shots, label=p["prompt_label"])
            lm.beam_search(prompts, num_beams=p["num_beams"], max_new_tokens=p["max_new_tokens"], stop=("\n",))

    def persistent_judge(self, job: DagJob) -> None:
        """The LLM judge on both splits' candidates: one request per question or per beam."""
        pc, judge, w = self.cfg["persistent"], job.params["judge"], job.wildcards
        jm, beams = judge["spec"]["name"], pc["num_beams"]
        per_q, hidden = 1 if judge["labels"] == "generate" else beams, judge_reasoning_tokens(model_entry(self.cfg, jm))
        self.ledger.job(jm, "persistent_judge", job.done)
        for split in ("train", "test"):
            items = self.items.sample(w["dataset"], split, pc["n_train"] if split == "train" else pc["n_test"],
                                      self.seed)
            prompt = sum(tokens(q) for q in items["question"]) + len(items) * (beams * pc["max_new_tokens"] + 80)
            self.ledger.add(jm, "persistent_judge", per_q * len(items), per_q * prompt,
                            per_q * len(items) * (max_judge_tokens(beams) + hidden), done=job.done)
        self.ledger.note(jm, "persistent_judge", "one request per question (generate) or per beam "
                                                 "(constrained, upper bound on the answer groups)")

    def _train_tokens(self, samples: Sequence[Sample], n_answers: int, epochs: int) -> int:
        return epochs * n_answers * sum(s.conf_tokens for s in samples)

    def persistent_variant(self, job: DagJob) -> None:
        """A variant's adapters (training tokens) and, when the job writes confidences, its
        scorings, as the job resolves them (`plan_variant`), once per seed the job trains."""
        p, w = job.params, job.wildcards
        m, d = w["model"], w["dataset"]
        seeds = len(p.get("seeds", [None]))
        plan = plan_variant(w.get("variant", "transfer"), p["train_ckpts"], p["eval_ckpts"],
                            with_transfer=any(k.dataset == TRANSFER for k in p["sc_paths"]), pair_mode=p["pair_mode"])
        self.ledger.job(m, "persistent_variants", job.done)
        for ap in plan.adapters:
            frames = [self.sample(d, "train") for view in ap.views for _ in ap.data_for(view)]
            self.ledger.train(m, "persistent_variants",
                              seeds * self._train_tokens(frames, ap.n_answers, p["hparams"]["epochs"]), done=job.done)
        for s in plan.scorings if "out" in job.outputs else ():
            target = ([self.sample(d, "test")] if s.dataset == MAIN
                      else [self.sample(self.cfg["persistent"]["transfer_dataset"], sp) for sp in ("train", "test")])
            n = seeds * sum(t.n for t in target)
            self.ledger.add(m, "persistent_variants", n, seeds * sum(t.conf_tokens for t in target), n, done=job.done)
        self.ledger.note(m, "persistent_variants", SHARED_ANSWERS)

    def persistent_gcm(self, job: DagJob) -> None:
        """The GCM: trained on the training checkpoints' answers when the job writes an adapter
        (ours), then scoring the evaluation checkpoints' test and the training ones' train answers;
        once per seed the job trains."""
        p, d = job.params, job.wildcards["dataset"]
        gm = p["gcm_spec"]["name"]
        seeds = len(p.get("seeds", [None]))
        self.ledger.job(gm, "persistent_gcm", job.done)
        if "adapter_dir" in job.outputs:
            self.ledger.train(gm, "persistent_gcm", seeds * self._train_tokens(
                [self.sample(d, "train") for _ in p["train_ckpts"]], 1, p["hparams"]["epochs"]), done=job.done)
        for target in [self.sample(d, "test") for _ in p["eval_ckpts"]] + [self.sample(d, "train")
                                                                              for _ in p["train_ckpts"]]:
            self.ledger.add(gm, "persistent_gcm", seeds * target.n, seeds * target.conf_tokens, seeds * target.n,
                            done=job.done)
        self.ledger.note(gm, "persistent_gcm", SHARED_ANSWERS)

    # -- the judge audit (rules/judge.smk)
    def judge_audit(self, job: DagJob) -> None:
        p, ds = job.params, self.cfg["judge"]["audit_dataset"]
        jm = p["spec"]["name"]
        per_file = len(self.items.sample(ds, "test", self.cfg["generation"]["n_items"], p["seed"]))
        n = min(p["n_items"], per_file * len(job.inputs["generations"]))
        prompt = sum(tokens(q) + 60 for q in self.items.sample(ds, "test", n, p["seed"])["question"])
        self.ledger.job(jm, "judge_audit", job.done)
        modes = len(p["label_modes"])  # each answer is judged once per label mode
        self.ledger.add(jm, "judge_audit", modes * n, modes * prompt, modes * n * max_judge_tokens(1), done=job.done)

    # -- LADDER (rules/ladder.smk)
    def ladder_pool(self) -> pd.DataFrame:
        lad = self.cfg["ladder"]
        if "ladder" not in self._pools:
            self._pools["ladder"] = self.items.sample(lad["dataset"], "test", lad["items_per_domain"], self.seed,
                                                      stratify="domain")
        return self._pools["ladder"]

    def ladder_answers(self, job: DagJob) -> None:
        """The answering model's answers: once per item, or per session turn."""
        p, m = job.params, job.wildcards["model"]
        pool, a = self.ladder_pool(), p["answering"]
        answer_lm = self.lm(m, self.last(m), "ladder_answers", job)
        if not is_chat(p["spec"]):
            make_answer_fn(answer_lm, "cloze")(pool)
            return
        answer = make_answer_fn(answer_lm, a["format"], temperature=a["temperature"],
                                max_new_tokens=a["max_new_tokens"])
        if not a["per_turn"] or p["tiers"] is None:
            answer(pool)  # one answer per item: reused, or the tiers' profile
        if a["per_turn"]:
            for s in range(p["n_sessions"]):  # the session's draw of n_turns questions
                drawn = np.random.default_rng([p["seed"], s, 0]).permutation(len(pool))[:p["n_turns"]]
                answer(pool.iloc[drawn], sample_index=s + 1)

    def ladder_sessions(self, job: DagJob) -> None:
        """The LLM user's turns: one request per session turn."""
        p = job.params
        turns = p["n_turns"] * (p["n_sessions"] if p["user"] == "llm" else p["alt_sessions"])
        if turns and p["user_spec"] is not None:
            um, q_tok = p["user_spec"]["name"], _mean_tokens(self.ladder_pool())
            self.ledger.job(um, "ladder_user", job.done)
            self.ledger.add(um, "ladder_user", turns, turns * (q_tok + 150), turns * p["user_max_new_tokens"],
                            done=job.done)
            self.ledger.note(um, "ladder_user", "one request per session turn")

    def ladder_prompted(self, job: DagJob) -> None:
        """The prompted levels: one request per profile asked, one per query turn."""
        p, lad, pool = job.params, self.cfg["ladder"], self.ladder_pool()
        pm, q_tok = p["spec"]["name"], _mean_tokens(pool)
        min_history = inspect.signature(lsa_query_confidence).parameters["min_history"].default
        self.ledger.job(pm, "ladder_prompted", job.done)
        per_profile = 1 if p["mode"] == "json" else pool["domain"].nunique()
        asked = min(p["prompted_sessions"] or lad["n_sessions"], lad["n_sessions"])
        profiles = per_profile * (1 + asked * (4 if p["lsa_controls"] else 2))
        queries = min(p["lsa_query_sessions"], lad["n_sessions"]) * max(0, lad["n_turns"] - min_history)
        history = lad["n_turns"] * (q_tok + 50)
        self.ledger.add(pm, "ladder_prompted", profiles + queries, profiles * history + queries * 10 * (q_tok + 45),
                        profiles * p["max_new_tokens"] + queries * 10, done=job.done)
        self.ledger.note(pm, "ladder_prompted", "one request per profile asked and per query turn "
                                                "(every session assumed to have eligible domains)")

    def crosstask_pool(self, suite: str, sc: dict, n: int) -> pd.DataFrame:
        if suite not in self._pools:
            spec = self.cfg["datasets"][sc["datasets"][0]]
            frames = [self.items.get(d)[sc["split"]] for d in sc["datasets"]]
            if any(f is None for f in frames):  # hub rows not on disk: stand-ins of each category / task
                self._pools[suite] = pd.concat([placeholder_items(f"{suite}:{d}", spec, sc["split"], n).assign(domain=d)
                                                for d in sc["domains"]], ignore_index=True)
            else:
                self._pools[suite] = sample_suite(pd.concat(frames, ignore_index=True), sc["domains"], n, self.seed,
                                                  f"ladder.cross_task.suites.{suite}")
        return self._pools[suite]

    def ladder_crosstask(self, job: DagJob) -> None:
        """A suite's answers by the job's own answering code, then the prior where it is asked."""
        p, w = job.params, job.wildcards
        m, suite = w["model"], self.cfg["ladder"]["cross_task"]["suites"][w["suite"]]
        pool = self.crosstask_pool(w["suite"], suite, p["items_per_domain"])
        lm = self.lm(m, self.last(m), "ladder_crosstask", job)
        answer_suite(lm, pool, p["loader"], chat=is_chat(p["spec"]), max_new_tokens=p["max_new_tokens"],
                     bbh_lenient=p["bbh_lenient"])
        if p["prompt_spec"] is None:  # prior "l1": read from LADDER's prompted profiles, no request
            return
        pm = p["prompt_spec"]["name"]
        plm = lm if pm == m else PlanLM(self.ledger, model_entry(self.cfg, pm), self.last(pm), "ladder_crosstask",
                                        done=job.done)
        zs_prior(plm, list(suite["domains"]), model=m, mode=p["prior_mode"],
                 max_new_tokens=p["prior_max_new_tokens"], chat=is_chat(p["prompt_spec"]))

    def ladder_extension(self, job: DagJob) -> None:
        """Two requests per item of each task: the answer and its confidence."""
        p, m = job.params, job.wildcards["model"]
        self.ledger.job(m, "ladder_extension", job.done)
        for t, ds in p["datasets"].items():
            items = self.items.sample(ds, "test", p["n_items"][t], p["seed"])
            n, answer = len(items), p["max_new_tokens"][t]
            prompt = sum(tokens(q) for q in items["question"]) + n * EXTENSION_PROMPT_TOKENS
            # step 2 repeats step 1's prompt with the answer in it
            self.ledger.add(m, "ladder_extension", 2 * n, 2 * prompt + n * (answer + EXTENSION_PROMPT_TOKENS),
                            n * (answer + p["confidence_max_new_tokens"]), done=job.done)
        self.ledger.note(m, "ladder_extension", "two requests per item: the answer and its confidence "
                                                "(BFCL's function documents not counted)")

    def ladder_react(self, job: DagJob) -> None:
        """Table 34's agent: the L1 prior, then every picked question up to the step limit."""
        p, m = job.params, job.wildcards["model"]
        items = pick_items(self.items.sample(self.cfg["ladder"]["react"]["dataset"], "test", None, p["seed"]),
                           p["per_domain"], p["seed"])
        chat = is_chat(p["spec"])
        lm = self.lm(m, self.last(m), "ladder_react", job)
        zs_prior(lm, sorted(items["domain"].unique()), model=m, mode=p["prior_mode"],
                 max_new_tokens=p["prior_max_new_tokens"], chat=chat)
        run_agent(lm, items, max_steps=p["setting"]["max_steps"], max_new_tokens=p["max_new_tokens"], chat=chat)
        self.ledger.note(m, "ladder_react", "every trajectory runs to its step limit (an upper bound on requests); "
                                            "later steps' prompts counted without the model's own thoughts")

    # -- LCAE (rules/lcae.smk)
    def lcae_items(self) -> pd.DataFrame:
        lc = self.cfg["lcae"]
        return self.items.sample(lc["dataset"], "test", lc["n_items"], self.seed)

    def _stage1(self, lm: PlanLM, job: DagJob, strategies: Sequence[str]) -> pd.DataFrame:
        items, chat = self.lcae_items(), is_chat(job.params["spec"])
        return pd.concat([answer_items(lm, items, s, chat=chat, max_new_tokens=job.params["max_new_tokens"])
                          for s in strategies], ignore_index=True)

    def lcae_stage1(self, job: DagJob) -> None:
        w = job.wildcards
        self._stage1(self.lm(w["model"], w["ckpt"], "lcae_stage1", job), job, job.params["strategies"])

    def lcae_stage2(self, job: DagJob) -> None:
        """Self-assessment of the Standard answers (recomputed from the placeholders, uncounted)."""
        p, w = job.params, job.wildcards
        spec = model_entry(self.cfg, w["model"])
        standard = self._stage1(PlanLM(Ledger(), spec, w["ckpt"], "lcae_stage1", done=True), job, ["standard"])
        items = self.lcae_items()
        error_p = {i: 0.5 for i in items["item_id"]}  # IRT_ItemErrorP: only its printed value is in a prompt
        lm = self.lm(w["model"], w["ckpt"], "lcae_stage2", job)
        cal = None if is_chat(p["spec"]) or p["base_error_p"] != "calibrated" else answer_calibration(
            lm, self.items.sample(self.cfg["lcae"]["dataset"], "train", p["calibration_items"], self.seed))
        for cond in p["conditions"]:
            for r in range(p["repeats"]):
                assess(lm, items, standard, cond, error_p, chat=is_chat(p["spec"]), repeat=r, calibration=cal,
                       **{k: p[k] for k in ("reflection", "temperature", "max_new_tokens", "base_slow_below", "base_error_p")})
        if {"dpr", "ids_dpr"} & set(p["conditions"]):
            self.ledger.note(w["model"], "lcae_stage2", "DPR routes: about half the items taken as slow"
                             if is_chat(p["spec"]) else "DPR routes: Slow where the placeholder option "
                             "probability of the answer is below lcae.base_slow_below (LL_SPREAD)")


def _mean_tokens(pool: pd.DataFrame) -> int:
    return int(np.mean([tokens(q) for q in pool["question"]]))


class PlanError(ValueError):
    """The DAG has a job the plan cannot count."""


@dataclass(frozen=True)
class Counter:
    """How the plan counts one rule's jobs: the plan rows (stages) it fills and the method."""

    stages: tuple[str, ...]
    count: Callable[[Planner, DagJob], None]


#: every rule whose jobs make model requests, in `STAGES` order: a new such rule adds its entry
#: here (and, if its requests are of a new kind, a `Planner` method)
COUNTERS: dict[str, Counter] = {
    "generate_greedy": Counter(("generate",), Planner.generate),
    "persistent_sc": Counter(("persistent_sc",), Planner.persistent_sc),
    "persistent_judge": Counter(("persistent_judge",), Planner.persistent_judge),
    **{rule: Counter(("persistent_variants",), Planner.persistent_variant)
       for rule in ("persistent_variant", "persistent_variant_seeds", "persistent_transfer_variant",
                    "persistent_variance_adapters")},
    **{rule: Counter(("persistent_gcm",), Planner.persistent_gcm)
       for rule in ("persistent_gcm", "persistent_gcm_seeds", "persistent_gcm_released")},
    "llm_judge": Counter(("judge_audit",), Planner.judge_audit),
    "ladder_answers": Counter(("ladder_answers",), Planner.ladder_answers),
    "ladder_sessions": Counter(("ladder_user",), Planner.ladder_sessions),
    "ladder_prompted": Counter(("ladder_prompted",), Planner.ladder_prompted),
    "ladder_crosstask": Counter(("ladder_crosstask",), Planner.ladder_crosstask),
    "ladder_extension": Counter(("ladder_extension",), Planner.ladder_extension),
    "ladder_react": Counter(("ladder_react",), Planner.ladder_react),
    "lcae_stage1": Counter(("lcae_stage1",), Planner.lcae_stage1),
    "lcae_stage2": Counter(("lcae_stage2",), Planner.lcae_stage2),
}
#: the plan's rows in order: requests two stages share are counted under the first
STAGES = tuple(dict.fromkeys(s for c in COUNTERS.values() for s in c.stages))

#: rules (shell patterns) whose jobs make no model request: data preparation, CPU training of
#: the offline world's small LMs, metrics, tables and figures (device time not counted). A
#: rule that runs nothing (all_tables) needs no entry.
FREE_RULES = (
    "items", "smollm2_convert", "world_generate", "world_train", "world_evolution_table", "judge_audit_table",
    "persistent_variant_slice", "persistent_metrics", "persistent_judge_counts", "persistent_reliability",
    "persistent_table*", "persistent_figure*", "persistent_findings",
    "ladder_score", "ladder_optimisation", "ladder_appendix", "ladder_table*",
    "ladder_crosstask_tables", "ladder_import",
    "lcae_sample", "lcae_irt", "lcae_stage3", "lcae_tables", "knowledge_card",
)


def is_free(rule: str) -> bool:
    return any(fnmatch.fnmatchcase(rule, pattern) for pattern in FREE_RULES)


def judge_reasoning_tokens(spec: dict) -> int:
    """Hidden reasoning tokens per request of an API judge that reasons (an effort other than
    "none" sent, `request_options`): its reasoning headroom `reasoning_tokens`, an upper bound;
    0 for a judge asked no effort (the authors' request shape) or a local judge."""
    if spec["backend"] != "openai":
        return 0
    opts = request_options(spec)
    return int(opts["reasoning_tokens"]) if opts["reasoning_effort"] not in (None, "none") else 0


def runtime_limits(planner: Planner) -> dict[str, int]:
    """Minutes of wall time per job (`runtime_key` -> minutes) from the plan's estimate of each
    counted job; jobs of one stage with the same wildcards (a rule and the rules derived from it)
    share the longest. Raises PlanError naming the jobs planned past MAX_RUNTIME_MIN."""
    out: dict[str, int] = {}
    for job, hours in planner.job_hours:
        key = runtime_key(COUNTERS[job.rule].stages[0], job.wildcards)
        out[key] = max(out.get(key, 0), math.ceil(60 * hours * RUNTIME_MARGIN + RUNTIME_STARTUP_MIN))
    over = sorted(k for k, v in out.items() if v > MAX_RUNTIME_MIN)
    if over:
        raise PlanError(f"plan: {len(over)} job(s) need more than {MAX_RUNTIME_MIN} minutes "
                        f"(selfknow.plan_runtimes.MAX_RUNTIME_MIN), e.g. {over[0]}: give them fewer items per job")
    return out


def write_runtimes(planner: Planner, path: str | Path) -> None:
    """Each job's time limit (`runtime_limits`, JSON) at `path`, where the rules' `runtime`
    reads it (rules/common.smk, planned_runtime)."""
    from selfknow.records import write_json

    write_json(runtime_limits(planner), path)


def planned_jobs(configfile: str | Path, target: str = "all_tables", results: str | Path | None = None, *,
                 default_resources: list[str] | None = None, root: Path = WORKFLOW_ROOT,
                 runtimes: str | Path | None = None) -> list[tuple[DagJob, float]]:
    """Every job that makes model requests, with the resources Snakemake gives it
    (`default_resources` for what a rule does not set, as a profile's), and its wall hours by
    the plan (`job_hours`). With `runtimes`, the plan's time limits are written there first
    (`write_runtimes`, as `make_plan` writes them) and the resources are those of the DAG that
    then reads them; a job's hours do not depend on its resources, so one plan serves both."""
    planner = Planner(load_config(configfile), workflow_jobs(configfile, target, results=results, root=root,
                                                            default_resources=default_resources))
    planner.run()
    if runtimes is None:
        return planner.job_hours
    write_runtimes(planner, runtimes)

    def key(job: DagJob) -> tuple:
        return job.rule, tuple(sorted(job.wildcards.items()))

    placed = {key(j): j for j in workflow_jobs(configfile, target, results=results, root=root,
                                               default_resources=default_resources)}
    return [(placed[key(job)], hours) for job, hours in planner.job_hours]


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


def make_plan(configfile: str | Path, target: str = "all_tables", results: str | Path | None = None, *,
              root: Path = WORKFLOW_ROOT, runtimes: str | Path | None = None) -> tuple[pd.DataFrame, dict[str, str]]:
    """The plan of `target` for the config at `configfile` (`results` overrides its
    `results`) in the workflow at `root`: the `plan_frame` of the jobs Snakemake's DAG holds,
    and where each dataset's items came from. With `runtimes`, also write each job's time limit
    there (`runtime_limits`, JSON), which the rules' `runtime` reads (rules/common.smk,
    planned_runtime)."""
    planner = Planner(load_config(configfile), workflow_jobs(configfile, target, results=results, root=root))
    ledger = planner.run()
    if runtimes is not None:
        write_runtimes(planner, runtimes)
    return plan_frame(planner.cfg, ledger), dict(planner.items.basis)
