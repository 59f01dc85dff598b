"""Stage 2 (LCAE §III-B): metacognitive self-assessment of a Stage-1 answer.

The model sees the question and its Stage-1 answer and states LLM_ModelErrorP, the probability
that the answer is wrong, and may revise the answer. Conditions:
- baseline: question + answer only;
- ids:      plus the IRT difficulty signal (IRT_ItemErrorP of the item);
- dpr:      the model first routes itself Fast or Slow; Slow runs the reflection module
            (SNAPPS' Narrow-Analyze-Probe for medicine; a generic N-A-P otherwise) and the
            reflection is shown before the assessment;
- ids_dpr:  both.
Instruct models answer in JSON (constrained to `assessment_schema` where the model entry has
`structured_output` on); a reply that cannot be parsed, or was cut at its token budget
(`finish_reason` "length"), is recorded (error_p = NaN, `parsed` False), counted, and keeps
its Stage-1 answer.

Base LMs (the mini world) are asked the same things in completion form and read off their
continuation likelihoods. Their error probability (`lcae.base_error_p`) is the expectation
over the digits " 0".." 9" after "Probability that this answer is wrong (0-9):" divided by 9
("digits"; a prompt the world models never read, so their digit priors answer it), or one
minus their own option probability of their final answer ("answer": after the IDS signal and
the reflection where shown; peaked where options differ in length), or that probability
through the examinee's own logistic calibration map ("calibrated", `answer_calibration`: fitted
on its answers to train-split items, so it states how often answers it is that sure of are
wrong). A base LM cannot be
asked to choose its route: it takes Slow where its own option probability of its answer is
below `lcae.base_slow_below` (`route_base`). The Slow reflection is the model's free recall
of the question, after which the option is chosen again by cloze scoring (the revision). The answer is shown as the chosen option's text after the question, the form
in which the model learnt its facts (`selfknow.stages.mcq`).
Both read log-likelihoods of the continuations, so multi-token " 7" or " Slow" work too.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
from scipy.special import expit, logit

from selfknow.stages.judge import final_answer_letter, letter_match
from selfknow.stages.mcq import chosen_letter, cloze_prompt, option_probabilities
from selfknow.stats.classification import logistic_fit
from selfknow.models.base import LM
from selfknow.protocols.lcae.prompting import LETTERS, fill, template

CONDITIONS = ("baseline", "ids", "dpr", "ids_dpr")
_NUMBER = re.compile(r"error_probability\"?\s*[:=]\s*\"?([0-9]*\.?[0-9]+)\s*(%?)")


def parse_assessment(text: str, n_choices: int) -> tuple[float, str | None]:
    """(error probability, revised letter or None) from a JSON-ish reply; NaN when absent.
    Percentages ("35%") and numbers above 1 read as percent; values are clipped to [0, 1]."""
    p, letter = float("nan"), None
    m = re.search(r"\{.*?\}", text or "", re.DOTALL)
    if m:
        try:
            obj = json.loads(m.group(0))
            raw = obj.get("error_probability")
            if isinstance(raw, str):
                raw = raw.strip().rstrip("%")
            p = float(raw)
            fa = str(obj.get("final_answer", "")).strip().upper()[:1]
            letter = fa if fa in LETTERS[:n_choices] else None
        except (ValueError, TypeError, json.JSONDecodeError, AttributeError):
            p = float("nan")
    if np.isnan(p):
        mm = _NUMBER.search(text or "")
        if mm:
            p = float(mm.group(1)) / (100 if mm.group(2) else 1)
        letter = letter or final_answer_letter(text, n_choices)
    if not np.isnan(p):
        p = p / 100 if p > 1 else p
        p = float(min(max(p, 0.0), 1.0))
    return p, letter


def assessment_schema(n_choices: int) -> dict:
    """The JSON schema of a Stage-2 reply (prompts/stage2_assess.txt): the error probability
    and the (possibly revised) option letter. Given to `generate`: a model entry with
    `structured_output` on replies within it (LM.generate)."""
    return {"type": "object",
            "properties": {"error_probability": {"type": "number", "minimum": 0, "maximum": 1},
                           "final_answer": {"type": "string", "enum": list(LETTERS[:n_choices])}},
            "required": ["error_probability", "final_answer"], "additionalProperties": False}


def draw_index(cond: str, repeat: int) -> int:
    """The sample index of condition `cond`'s repeat `repeat`: every (condition, repeat) is its
    own draw, so a sampled request is never answered from another condition's cache entry (a
    Fast-routed DPR assessment, or an IDS+DPR reflection, has the same prompt as one of
    another condition, yet the protocol compares them as separate samples). Greedy requests
    on a deterministic backend ignore it and still share one entry (`CachedCalls.run`)."""
    return repeat * len(CONDITIONS) + CONDITIONS.index(cond)


def _difficulty(cond: str, item_error_p: float) -> str:
    return template("ids").format(item_error_p=item_error_p) if cond in ("ids", "ids_dpr") else ""


def assess_chat(lm: LM, items: pd.DataFrame, stage1: pd.DataFrame, cond: str, item_error_p: dict,
                *, repeat: int, reflection: str, temperature: float, max_new_tokens: int) -> pd.DataFrame:
    ans = {i: (a if isinstance(a, str) else None) for i, a in zip(stage1["item_id"], stage1["answer"])}
    rows = []
    base = [dict(question=q, choices=list(c), answer=ans.get(i) or "(none)",
                 difficulty=_difficulty(cond, item_error_p[i])) for i, q, c in
            zip(items["item_id"], items["question"], items["choices"])]
    draw = draw_index(cond, repeat)
    tok_in = np.zeros(len(base), int)
    tok_out = np.zeros(len(base), int)
    modes = ["fast"] * len(base)
    reflections = [""] * len(base)
    if cond in ("dpr", "ids_dpr"):
        route = lm.generate([fill("dpr_route", **b) for b in base], max_new_tokens=8, chat=True,
                            temperature=temperature, sample_index=draw)
        modes = ["slow" if "slow" in g.text.lower() else "fast" for g in route]
        tok_in += [g.tokens_in for g in route]
        tok_out += [g.tokens_out for g in route]
        slow = [k for k, m in enumerate(modes) if m == "slow"]
        if slow:
            refl = lm.generate([fill(f"reflect_{reflection}", **{k: base[j][k] for k in ("question", "choices", "answer")})
                                for j in slow], max_new_tokens=max_new_tokens, chat=True,
                               temperature=temperature, sample_index=draw)
            for j, g in zip(slow, refl):
                reflections[j] = f"Your reflection:\n{g.text.strip()}\n"
                tok_in[j] += g.tokens_in
                tok_out[j] += g.tokens_out
    prompts = [fill("stage2_assess", reflection=r, **b) for b, r in zip(base, reflections)]
    gens = lm.generate(prompts, max_new_tokens=lm.budget("lcae_stage2", 64), chat=True, temperature=temperature,
                       sample_index=draw, json_schemas=[assessment_schema(len(b["choices"])) for b in base])
    for k, (i, b, g) in enumerate(zip(items["item_id"], base, gens)):
        p, revised = (float("nan"), None) if g.finish_reason == "length" else parse_assessment(g.text, len(b["choices"]))
        rows.append(dict(item_id=i, error_p=p, parsed=not np.isnan(p), finish_reason=g.finish_reason, mode=modes[k],
                         final_answer=revised or ans.get(i), raw=g.text,
                         tokens_in=int(tok_in[k] + g.tokens_in), tokens_out=int(tok_out[k] + g.tokens_out)))
    return pd.DataFrame(rows)


_DIGITS = [f" {d}" for d in range(10)]


def _answered(question: str, choices: list[str], letter: str | None, context: str = "") -> str:
    """The cloze prompt completed with the chosen option's text (what the base model "said")."""
    said = choices[LETTERS.index(letter)] if letter in LETTERS[:len(choices)] else ""
    return f"{cloze_prompt(question, context)} {said}\n"


def route_base(lm: LM, qs: list[str], chs: list[list[str]], answers: list, diff: list[str],
               slow_below: float) -> list[str]:
    """DPR's route of a base LM, which cannot be asked to choose: "slow" where its own option
    probability of its Stage-1 answer (cloze, after the IDS signal where shown) is below
    `slow_below` (the model is unsure of its answer, so it reflects); with `slow_below` 0, the
    likelihoods of " Fast" and " Slow" after "Mode (Fast or Slow):", which a model that never
    read those words ranks by their token priors alone (the same route for nearly every item)."""
    if slow_below > 0:
        probs = option_probabilities(lm, qs, chs, diff)
        own = [p[LETTERS.index(a)] if a in LETTERS[:len(p)] else 0.0 for p, a in zip(probs, answers)]
        return ["slow" if x < slow_below else "fast" for x in own]
    route_prompts = [_answered(q, c, a) + f"{d}Mode (Fast or Slow):" for q, c, a, d in zip(qs, chs, answers, diff)]
    ll = np.array(lm.loglikelihood([(p, w) for p in route_prompts for w in (" Fast", " Slow")])).reshape(-1, 2)
    return ["slow" if s > f else "fast" for f, s in ll]


def answer_calibration(lm: LM, items: pd.DataFrame) -> tuple[float, float]:
    """(slope, intercept) of the logistic map from the logit of a base LM's own option
    probability of its cloze answer to that answer being right, fitted on `items` (train-split
    items, never the Stage-2 ones) answered as Stage 1's Standard strategy answers them. It is
    what the model would know of its own reliability had it seen its record on those items,
    as a post-hoc map is fitted on the persistent protocol's train split (`base_error_p`
    "calibrated"). An examinee right on all of them or none has no slope to fit: its map states
    its smoothed rate of right answers, (k + 0.5) / (n + 1), whatever its probability."""
    probs = option_probabilities(lm, list(items["question"]), [list(c) for c in items["choices"]])
    right = np.array([letter_match(chosen_letter(p), a) for p, a in zip(probs, items["answer"])])
    if right.all() or not right.any():
        return 0.0, float(_logit(np.array([(right.sum() + 0.5) / (right.size + 1)]))[0])
    return logistic_fit(_logit(np.array([p.max() for p in probs])), right)


def _logit(p: np.ndarray) -> np.ndarray:
    return logit(np.clip(p, 1e-6, 1 - 1e-6))


def assess_base(lm: LM, items: pd.DataFrame, stage1: pd.DataFrame, cond: str, item_error_p: dict,
                *, base_slow_below: float, base_error_p: str, max_new_tokens: int = 16,
                calibration: tuple[float, float] | None = None, **_) -> pd.DataFrame:
    ans = dict(zip(stage1["item_id"], stage1["answer"]))
    ids, qs, chs = list(items["item_id"]), list(items["question"]), [list(c) for c in items["choices"]]
    diff = [_difficulty(cond, item_error_p[i]) for i in ids]
    final = [ans[i] for i in ids]
    modes = ["fast"] * len(ids)
    reflections = [""] * len(ids)
    if cond in ("dpr", "ids_dpr"):
        modes = route_base(lm, qs, chs, final, diff, base_slow_below)
        slow = [k for k, m in enumerate(modes) if m == "slow"]
        if slow:
            recall = lm.generate([cloze_prompt(qs[k]) for k in slow], max_new_tokens=max_new_tokens, stop=["\n"])
            for k, g in zip(slow, recall):
                reflections[k] = f"Reflection: {g.text.strip()}\n"
            revised = option_probabilities(lm, [qs[k] for k in slow], [chs[k] for k in slow],
                                           [reflections[k] for k in slow])
            for k, p in zip(slow, revised):
                final[k] = chosen_letter(p)
    if base_error_p in ("answer", "calibrated"):
        probs = option_probabilities(lm, qs, chs, [r + d for r, d in zip(reflections, diff)])
        own = np.array([float(p[LETTERS.index(a)]) if a in LETTERS[:len(p)] else 0.0 for p, a in zip(probs, final)])
        if base_error_p == "calibrated":
            if calibration is None:
                raise ValueError("lcae.base_error_p 'calibrated' needs the examinee's calibration map (answer_calibration)")
            slope, intercept = calibration
            own = expit(slope * _logit(own) + intercept)
        error_p = (1.0 - own).tolist()
        return pd.DataFrame(dict(item_id=ids, error_p=error_p, parsed=True, finish_reason="stop", mode=modes,
                                 final_answer=final,
                                 raw=[" ".join(f"{LETTERS[j]}={x:.2f}" for j, x in enumerate(p)) for p in probs],
                                 tokens_in=[len(cloze_prompt(q, r + d).split()) for q, r, d in zip(qs, reflections, diff)],
                                 tokens_out=0))
    if base_error_p != "digits":
        raise ValueError(f"lcae.base_error_p must be 'answer', 'calibrated' or 'digits', got {base_error_p!r}")
    prompts = [_answered(q, c, a, r) + f"{d}Probability that this answer is wrong (0-9):"
               for q, c, a, d, r in zip(qs, chs, final, diff, reflections)]
    # log-likelihoods, not next-token log-probs: a small model's tokenizer may split " 7" in two
    lp = np.array(lm.loglikelihood([(p, d) for p in prompts for d in _DIGITS])).reshape(len(prompts), 10)
    w = np.exp(lp - lp.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    error_p = (w * np.arange(10)).sum(axis=1) / 9
    return pd.DataFrame(dict(item_id=ids, error_p=error_p, parsed=True, finish_reason="stop", mode=modes,
                             final_answer=final,
                             raw=[" ".join(f"{d}={x:.2f}" for d, x in enumerate(r)) for r in w],
                             tokens_in=[len(p.split()) for p in prompts], tokens_out=0))


def assess(lm: LM, items: pd.DataFrame, stage1: pd.DataFrame, cond: str, item_error_p: dict, *,
           chat: bool, repeat: int, reflection: str = "generic", temperature: float = 0.0,
           max_new_tokens: int = 256, base_slow_below: float | None = None, base_error_p: str | None = None,
           calibration: tuple[float, float] | None = None) -> pd.DataFrame:
    """Stage-2 records of one Standard-prompting examinee under one condition and repeat
    (`base_slow_below`: a base LM's DPR route, `route_base`; `base_error_p`: how a base LM
    states its error probability, `assess_base`; both needed for a base LM, config
    `lcae.base_slow_below` and `lcae.base_error_p`)."""
    if cond not in CONDITIONS:
        raise ValueError(f"unknown condition {cond!r}; known: {', '.join(CONDITIONS)}")
    if not chat and (base_slow_below is None or base_error_p is None):
        raise ValueError("a base LM's Stage 2 needs lcae.base_slow_below and lcae.base_error_p")
    fn = assess_chat if chat else assess_base
    extra = {} if chat else {"base_slow_below": base_slow_below, "base_error_p": base_error_p,
                             "calibration": calibration}
    out = fn(lm, items, stage1, cond, item_error_p, repeat=repeat, reflection=reflection,
             temperature=temperature, max_new_tokens=max_new_tokens, **extra)
    ref = dict(zip(items["item_id"], items["answer"]))
    out["correct_final"] = [letter_match(a, ref[i]) for i, a in zip(out["item_id"], out["final_answer"])]
    out.insert(1, "condition", cond)
    out.insert(2, "repeat", repeat)
    return out
