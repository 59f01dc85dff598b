"""Simulated users that reply to each LADDER turn in natural language (paper §3, §B.1, §B.3).

Both users work in two steps so that many sessions can be rendered in one batch:
`plan(ctx, rng)` draws what the user means (cheap, seeded per session) and
`render([(ctx, plan), ...])` turns the plans into feedback texts (templates, or one batched
LLM call).

* `RuleBasedUser`: inside its expertise it always judges correctly (confirms right answers,
  corrects wrong ones with the reference letter); outside it, it voices doubt about a wrong
  answer with probability `tolerance` (as in the authors' runner) and otherwise accepts it,
  questions a right answer with probability `question_right_scale * tolerance`, and phrases an
  acceptance explicitly ("That's right, thanks") with probability
  `endorse_scale * explicitness`, else non-committally (a follow-up question, thanks).
  Inside its expertise a verdict is phrased with stock verdict words with probability
  `explicitness`, else implicitly (still truthful). Texts come from
  prompts/rule_user_templates.txt by register (direct / hedging / Socratic, the paper's three
  styles; the authors' ten style names map onto them).
* `LLMUser(lm)`: the authors' prompt (persona system prompt + question + the assistant's
  answer + a stage direction that tells an in-expertise user the truth), prompts/user_*.txt.

`plan.intent` records what the reply means ("positive" / "negative" / "doubt" / "neutral"),
the simulator's ground truth for decoder precision/recall (paper §E.1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from selfknow.models.base import LM
from selfknow.protocols.ladder.answering import LETTERS, load_prompt, load_sections
from selfknow.protocols.ladder.personas import Persona

#: register of each style name (the authors' ten; the paper's three map to themselves)
STYLE_REGISTER = {
    "academic": "direct", "formal": "direct", "precise": "direct", "rigorous": "direct",
    "technical": "direct", "analytical": "hedging", "thoughtful": "hedging",
    "practical": "hedging", "curious": "socratic", "medical_student": "socratic",
    "direct": "direct", "hedging": "hedging", "socratic": "socratic",
}
KIND_INTENT = {
    "confirm": "positive", "confirm_implicit": "positive", "endorse": "positive",
    "correct": "negative", "correct_implicit": "negative", "doubt": "doubt",
    "neutral": "neutral",
    # LLM user stage directions
    "in_correct": "positive", "in_wrong": "negative", "out_correct": "positive",
    "out_wrong_doubt": "doubt", "out_wrong_accept": "positive",
}
EXPLICIT_KINDS = {"confirm", "correct", "endorse", "doubt"}
FEEDBACK_COLUMNS = ["feedback_text", "feedback_intent", "feedback_kind", "feedback_explicit"]


@dataclass(frozen=True)
class TurnContext:
    """What the simulated user knows about one turn."""

    session_id: int
    turn: int
    question: str
    choices: tuple[str, ...]
    domain: str
    answer: str | None  # the assistant's option letter, None if unparsed
    gt_answer: str
    correct: bool
    persona: Persona

    @property
    def in_expertise(self) -> bool:
        return self.persona.knows(self.domain)


@dataclass(frozen=True)
class Plan:
    kind: str
    template: int = 0
    alt: str = ""

    @property
    def intent(self) -> str:
        return KIND_INTENT[self.kind]


class User(Protocol):
    name: str

    def plan(self, ctx: TurnContext, rng: np.random.Generator) -> Plan: ...

    def render(self, pairs: Sequence[tuple[TurnContext, Plan]]) -> list[str]: ...


def _register(style: str) -> str:
    try:
        return STYLE_REGISTER[style]
    except KeyError:
        raise ValueError(f"persona style {style!r} has no register; known: "
                         f"{sorted(STYLE_REGISTER)}") from None


def _pick(rates: dict[str, float], u: float) -> str:
    """The kind whose cumulative-probability interval holds the uniform draw `u`."""
    acc = 0.0
    for kind, p in rates.items():
        acc += p
        if u < acc:
            return kind
    return kind  # u beyond the float sum of the rates (rounding): the last kind


def _readable(domain: str) -> str:
    return domain.replace("_", " ")


class RuleBasedUser:
    """Template-driven simulated user; every random choice comes from the `rng` handed to
    `plan` (seeded per session by the session engine)."""

    name = "rule"

    def __init__(self, question_right_scale: float = 0.25, endorse_scale: float = 0.15,
                 templates: str = "rule_user_templates"):
        for n, v in (("question_right_scale", question_right_scale),
                     ("endorse_scale", endorse_scale)):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{n}={v} outside [0, 1]")
        self.question_right_scale = question_right_scale
        self.endorse_scale = endorse_scale
        self.templates = load_sections(templates)
        for reg in set(STYLE_REGISTER.values()):
            for kind in ("confirm", "confirm_implicit", "correct", "correct_implicit", "doubt",
                         "endorse", "neutral"):
                if not self.templates.get(f"{reg}.{kind}"):
                    raise ValueError(f"prompts/{templates}.txt lacks section '{reg}.{kind}'")

    def rates(self, persona: Persona, in_expertise: bool, correct: bool) -> dict[str, float]:
        """Probability of each reply kind in one situation (the configured behaviour)."""
        e, tol = persona.explicitness, persona.tolerance
        if in_expertise:
            if correct:
                return {"confirm": e, "confirm_implicit": 1.0 - e}
            return {"correct": e, "correct_implicit": 1.0 - e}
        p_doubt = tol if not correct else self.question_right_scale * tol
        p_endorse = (1.0 - p_doubt) * self.endorse_scale * e
        return {"doubt": p_doubt, "endorse": p_endorse,
                "neutral": 1.0 - p_doubt - p_endorse}

    def plan(self, ctx: TurnContext, rng: np.random.Generator) -> Plan:
        # three uniforms per turn, whatever the situation, so the stream stays aligned
        u_kind, u_tmpl, u_alt = rng.random(3)
        kind = _pick(self.rates(ctx.persona, ctx.in_expertise, ctx.correct), u_kind)
        n_tmpl = len(self.templates[f"{_register(ctx.persona.style)}.{kind}"])
        others = [L for L in LETTERS[:len(ctx.choices) or 4] if L != ctx.answer]
        return Plan(kind, int(u_tmpl * n_tmpl), others[int(u_alt * len(others))])

    def render(self, pairs: Sequence[tuple[TurnContext, Plan]]) -> list[str]:
        out = []
        for ctx, plan in pairs:
            tmpl = self.templates[f"{_register(ctx.persona.style)}.{plan.kind}"][plan.template]
            text = tmpl.replace("$answer", ctx.answer or "your answer")
            text = text.replace("$gt", ctx.gt_answer).replace("$alt", plan.alt)
            text = text.replace("$topic", _readable(ctx.domain))
            out.append(text[0].upper() + text[1:])
        return out


class LLMUser:
    """LLM-simulated user (the paper's main setting): persona system prompt, the question
    (without choices, as the authors' runner), the assistant's answer letter and a stage
    direction; an in-expertise user is told whether the answer is right and, if not, the
    reference letter. Outside its expertise, a wrong answer draws the "doubt" direction with
    probability `tolerance`, else "accept".

    Decoding: the authors sample at temperature 0.7, at most 150 tokens, a fresh call every
    turn (yin1245/selfbound capbound_session_api.py, `user_respond`). Session s's replies are
    draw s + 1, so two sessions' turns with an identical prompt (same persona, question,
    answer and direction) get replies of their own, while a rerun answers from the request
    cache; pass `temperature=0` for fully deterministic replies."""

    name = "llm"

    def __init__(self, lm: LM, *, max_new_tokens: int, temperature: float = 0.7,
                 batch_size: int = 16, include_choices: bool = False):
        self.lm, self.temperature = lm, temperature
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.include_choices = include_choices
        self.system_t = load_prompt("user_system")
        self.turn_t = load_prompt("user_turn")
        sc = load_sections("user_scenarios")
        self.scenarios = {k: v[0] for k, v in sc.items()}
        missing = {"in_correct", "in_wrong", "out_correct", "out_wrong_doubt",
                   "out_wrong_accept"} - set(self.scenarios)
        if missing:
            raise ValueError(f"prompts/user_scenarios.txt lacks sections {sorted(missing)}")

    def rates(self, persona: Persona, in_expertise: bool, correct: bool) -> dict[str, float]:
        if in_expertise:
            return {"in_correct": 1.0} if correct else {"in_wrong": 1.0}
        if correct:
            return {"out_correct": 1.0}
        return {"out_wrong_doubt": persona.tolerance,
                "out_wrong_accept": 1.0 - persona.tolerance}

    def plan(self, ctx: TurnContext, rng: np.random.Generator) -> Plan:
        # one uniform per turn keeps the random stream aligned whatever the situation
        return Plan(_pick(self.rates(ctx.persona, ctx.in_expertise, ctx.correct), rng.random()))

    def prompts(self, ctx: TurnContext, plan: Plan) -> tuple[str, str]:
        """(system prompt, user prompt) for one turn."""
        system = self.system_t.substitute(
            expertise=", ".join(_readable(d) for d in ctx.persona.expertise),
            style=ctx.persona.style)
        question = ctx.question
        if self.include_choices:
            question += "\n" + "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(ctx.choices))
        scenario = self.scenarios[plan.kind].replace("$gt", ctx.gt_answer)
        user = self.turn_t.substitute(question=question, answer=str(ctx.answer),
                                      scenario=scenario)
        return system, user

    def render(self, pairs: Sequence[tuple[TurnContext, Plan]]) -> list[str]:
        built = [self.prompts(c, p) for c, p in pairs]
        out: list[str | None] = [None] * len(built)
        groups: dict[tuple[str, int], list[int]] = {}
        for i, ((system, _), (ctx, _)) in enumerate(zip(built, pairs)):
            groups.setdefault((system, ctx.session_id), []).append(i)
        # one system prompt and one draw (the session's) per generate call; the calls need
        # none of each other's replies, so a Batch API backend sends them as one batch
        chunks = [(system, session, idx[s:s + self.batch_size])
                  for (system, session), idx in groups.items() for s in range(0, len(idx), self.batch_size)]

        def call(system: str, session: int, chunk: list[int]):
            return lambda: self.lm.generate([built[i][1] for i in chunk], max_new_tokens=self.max_new_tokens,
                                            chat=True, system=system, temperature=self.temperature,
                                            sample_index=session + 1)

        for (_, _, chunk), gens in zip(chunks, self.lm.together([call(*c) for c in chunks])):
            for i, g in zip(chunk, gens):
                out[i] = g.text.strip()
        return [t or "" for t in out]


def make_user(kind: str, lm: LM | None = None, **kwargs) -> User:
    """The simulated user named in the config: "rule" (RuleBasedUser(**kwargs)) or "llm"
    (LLMUser(lm, **kwargs), needs the simulating LM)."""
    if kind == "rule":
        return RuleBasedUser(**kwargs)
    if kind == "llm":
        if lm is None:
            raise ValueError("user kind 'llm' needs the simulating LM (lm=...)")
        return LLMUser(lm, **kwargs)
    raise ValueError(f"unknown user kind {kind!r}: 'rule' or 'llm'")
