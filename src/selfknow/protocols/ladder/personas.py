"""Simulated-user personas (LADDER paper §B.1, §B.3).

A persona has an expertise set (a subset of the session's domains: inside it the user judges
answers correctly), a response style, a tolerance and an explicitness. Field names and value
sets follow the authors' released session runner and sessions (repository yin1245/selfbound,
`code/baselines/capbound_session_api.py`; `persona` of every released session):

* ten fixed templates, each with 3 expertise subjects, a style, tolerance in {0.2 .. 0.4} and
  explicitness in {0.7 .. 0.9}; session i gets template i mod 10 (`author_persona`).
* tolerance = probability that the user, outside its expertise, voices doubt about a wrong
  answer instead of accepting it (the authors' runner); explicitness = how often a verdict is
  phrased explicitly (recorded but unused by the authors' LLM prompt; our rule-based user
  uses it, see simulators.py).

The authors' templates name MMLU subjects; for any other domain set (the offline mini world)
`sample_persona` draws personas with the same fields and value sets from a seed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: (expertise, style, tolerance, explicitness) of the authors' ten persona templates.
AUTHOR_TEMPLATES: tuple[tuple[tuple[str, ...], str, float, float], ...] = (
    (("college_biology", "high_school_biology", "anatomy"), "academic", 0.2, 0.9),
    (("abstract_algebra", "high_school_mathematics", "formal_logic"), "formal", 0.3, 0.8),
    (("astronomy", "conceptual_physics", "college_physics"), "curious", 0.35, 0.85),
    (("business_ethics", "moral_scenarios", "global_facts"), "thoughtful", 0.4, 0.7),
    (("computer_security", "machine_learning", "electrical_engineering"), "technical", 0.25, 0.9),
    (("clinical_knowledge", "college_biology", "anatomy"), "practical", 0.3, 0.8),
    (("college_chemistry", "high_school_chemistry", "conceptual_physics"), "precise", 0.2, 0.9),
    (("econometrics", "business_ethics", "global_facts"), "analytical", 0.4, 0.75),
    (("formal_logic", "abstract_algebra", "college_physics"), "rigorous", 0.25, 0.9),
    (("high_school_biology", "clinical_knowledge", "anatomy"), "medical_student", 0.3, 0.85),
)
STYLES: tuple[str, ...] = tuple(t[1] for t in AUTHOR_TEMPLATES)
TOLERANCES: tuple[float, ...] = (0.2, 0.25, 0.3, 0.35, 0.4)
EXPLICITNESS: tuple[float, ...] = (0.7, 0.75, 0.8, 0.85, 0.9)
#: expertise-set size of the authors' personas (the SelfBound draft's appendix says 6; the
#: released code and sessions use 3)
N_EXPERTISE = 3


@dataclass(frozen=True)
class Persona:
    persona_id: str
    expertise: tuple[str, ...]
    style: str
    tolerance: float
    explicitness: float

    def __post_init__(self):
        for name in ("tolerance", "explicitness"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"persona {self.persona_id}: {name}={v} outside [0, 1]")

    def knows(self, domain: str) -> bool:
        return domain in self.expertise

    def as_record(self) -> dict:
        """The persona columns of a session turn (records.py: expertise "|"-joined)."""
        return {"persona_id": self.persona_id, "persona_expertise": "|".join(self.expertise),
                "persona_style": self.style, "persona_tolerance": self.tolerance,
                "persona_explicitness": self.explicitness}


def author_persona(session_id: int) -> Persona:
    """The authors' persona for session `session_id` (template session_id mod 10)."""
    e, style, tol, expl = AUTHOR_TEMPLATES[session_id % len(AUTHOR_TEMPLATES)]
    return Persona(f"persona_{session_id}", tuple(e), style, tol, expl)


def sample_persona(domains: Sequence[str], session_id: int, seed: int,
                   n_expertise: int = N_EXPERTISE) -> Persona:
    """A persona drawn for session `session_id`: `n_expertise` distinct domains (all of them if
    fewer), a style, a tolerance and an explicitness from the authors' value sets. Depends only
    on (sorted domains, session_id, seed), so a resumed run draws the same persona."""
    doms = sorted(set(domains))
    if not doms:
        raise ValueError("sample_persona needs at least one domain")
    rng = np.random.default_rng([seed, session_id, 7])
    k = min(n_expertise, len(doms))
    exp = tuple(doms[i] for i in sorted(rng.choice(len(doms), size=k, replace=False)))
    return Persona(f"persona_{session_id}", exp, STYLES[rng.integers(len(STYLES))],
                   float(TOLERANCES[rng.integers(len(TOLERANCES))]),
                   float(EXPLICITNESS[rng.integers(len(EXPLICITNESS))]))


def make_persona(domains: Sequence[str], session_id: int, seed: int,
                 scheme: str = "auto", n_expertise: int = N_EXPERTISE) -> Persona:
    """Persona of one session. scheme "templates": the authors' cycle (needs their MMLU
    subjects); "sampled": `sample_persona`; "auto": templates when every template subject is
    among `domains`, else sampled."""
    if scheme == "auto":
        needed = {d for t in AUTHOR_TEMPLATES for d in t[0]}
        scheme = "templates" if needed <= set(domains) else "sampled"
    if scheme == "templates":
        p = author_persona(session_id)
        missing = set(p.expertise) - set(domains)
        if missing:
            raise ValueError(f"author persona {p.persona_id} needs domains {sorted(missing)} "
                             "absent from the item pool; use scheme='sampled'")
        return p
    if scheme == "sampled":
        return sample_persona(domains, session_id, seed, n_expertise)
    raise ValueError(f"unknown persona scheme {scheme!r}: 'auto', 'templates' or 'sampled'")
