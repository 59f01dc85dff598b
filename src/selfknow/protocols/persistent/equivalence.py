"""Answer equivalence for self-consistency grouping (persistent §3.1.1, §A.6).

The paper groups beam answers whose *bidirectional* entailment holds under an NLI model
(MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli): premise "Question: {q}\\nAnswer: {a}",
hypothesis "Answer: {b}", and both directed predictions must have entailment as their
argmax (Kuhn et al. 2023). Pairs that are already equal after normalisation skip the model.

Two implementations sit behind one interface and a name registry, so the config picks one:
`normalised` (no model; the offline default) and `nli` (a transformers sequence classifier).
Both compare answers after one of `NORMALISERS` (config `persistent.answer_normalisation`):
`squad` (`judge.normalise_answer`: punctuation and articles dropped, so "The Beatles" and
"Beatles" merge without the model) or `lowercase_no_periods`, the authors' rule
(`normalize_answer` of conset/dataset_configs/{triviaqa,jeopardy,bioasq}.py), under which
NLI decides every pair that differs by more than case, periods and surrounding whitespace.
"""
from __future__ import annotations

import abc
from typing import Callable, Sequence

import numpy as np

from selfknow.stages.judge import normalise_answer


def lowercase_no_periods(text: str | None) -> str:
    """The persistent authors' answer normalisation: the first line of the answer (leading
    whitespace and blank lines skipped), stripped at both ends, lower-cased, every "." removed
    (anywhere, and after the strip: "Paris ." keeps its trailing space). None or NaN -> ""."""
    if not isinstance(text, str):
        return ""
    return text.lstrip().split("\n", 1)[0].strip().lower().replace(".", "")


#: config `persistent.answer_normalisation` -> the normaliser applied before comparing answers
NORMALISERS: dict[str, Callable[[str | None], str]] = {
    "squad": normalise_answer,
    "lowercase_no_periods": lowercase_no_periods,
}


def is_answer(text: str | None, normalise: Callable[[str | None], str]) -> bool:
    """Whether a beam's text is an answer to group: not when its first line is empty (the
    authors' `if ans:` in conset/gen_cands.py `group_answers`), nor, under SQuAD normalisation
    (the offline default), when it is articles and punctuation only ("The", "?"). Under the
    authors' rule "..." is an answer, equal to "." and compared with the rest by NLI."""
    if not (isinstance(text, str) and text.lstrip().split("\n", 1)[0].strip()):
        return False
    return normalise is not normalise_answer or bool(normalise_answer(text))


def get_normaliser(name: str) -> Callable[[str | None], str]:
    try:
        return NORMALISERS[name]
    except KeyError:
        raise ValueError(f"unknown answer normalisation {name!r}; known: {sorted(NORMALISERS)}") from None


class Equivalence(abc.ABC):
    """Decides whether two short answers to one question denote the same answer."""

    name: str = "abstract"
    #: the normaliser under which equal answers are the same answer without asking
    normalise: Callable[[str | None], str] = staticmethod(normalise_answer)
    #: True when the verdict depends only on the two answers' normalised forms, so grouping
    #: may ask about one member of each set of equal forms; a model reading the raw text
    #: (NLI) is asked about every pair of distinct texts, as the authors' pairwise NLI is
    reads_forms_only: bool = False

    @abc.abstractmethod
    def equivalent(self, question: str, a: str, b: str) -> bool:
        """True when `a` and `b` are the same answer to `question` (symmetric)."""

    def equivalent_many(self, question: str, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """Batch form of `equivalent`; model-backed subclasses override it to batch calls."""
        return [self.equivalent(question, a, b) for a, b in pairs]


# Words that name the *kind* of thing an answer is ("the River Nile", "Mount Everest",
# "Saint Paul", "Sir Isaac Newton") or a bare preposition of a date/place ("in 1945").
# For a fixed question they restate what the question already implies, so they do not change
# the referent, and an NLI model judges "Answer: Nile" and "Answer: River Nile" as mutual
# entailment. Name-forming words ("New" in "New York") are deliberately absent: "York" and
# "New York" are different answers.
DESIGNATORS = frozenset({
    "river", "mount", "mt", "lake", "sea", "ocean", "island", "islands", "isle", "cape",
    "saint", "st", "sir", "dame", "lord", "lady", "king", "queen", "prince", "princess",
    "president", "pope", "dr", "doctor", "professor", "city", "county", "state", "in", "on",
    "at", "year",
})


class NormalisedMatch(Equivalence):
    """Model-free equivalence. Two answers match when, after `normalise` (by default SQuAD
    normalisation, `judge.normalise_answer`: lower-case, no punctuation, no articles):

    1. the strings are equal; or
    2. their token *sets* are equal ("Smith, John" / "John Smith"): word order is not part of
       a short answer's meaning, and token-set equality is the lexical analogue of entailment
       in both directions; or
    3. (`containment=True`) one token set contains the other, the shared part is non-empty,
       and every extra token is a designator word (`DESIGNATORS`), i.e. the longer answer only
       adds the kind of entity or a preposition ("River Nile" / "Nile", "in 1945" / "1945").

    General containment ("New York" / "York", "George Bush" / "George") is *not* accepted:
    one direction of entailment fails, which the paper's bidirectional rule rejects too.
    """

    name = "normalised"
    reads_forms_only = True

    def __init__(self, containment: bool = True, designators: frozenset[str] = DESIGNATORS,
                 normalise: Callable[[str | None], str] = normalise_answer):
        self.containment = containment
        self.designators = frozenset(designators)
        self.normalise = normalise

    def equivalent(self, question: str, a: str, b: str) -> bool:
        na, nb = self.normalise(a), self.normalise(b)
        if not na or not nb:
            return False
        if na == nb:
            return True
        ta, tb = set(na.split()), set(nb.split())
        if ta == tb:
            return True
        if not self.containment:
            return False
        small, big = (ta, tb) if len(ta) <= len(tb) else (tb, ta)
        if not small <= big:
            return False
        core = small - self.designators
        return bool(core) and (big - small) <= self.designators


class NLIEquivalence(Equivalence):
    """Bidirectional entailment with a transformers sequence-classification NLI model (§A.6).

    `equivalent(q, a, b)` is True when the strings are equal after `normalise` (no model call,
    as in the authors' pipeline) or when the argmax class is *entailment* for both premise/hypothesis
    directions. The entailment index is read from `config.id2label` (the label whose name
    contains "entail"), never assumed to be 0. The model loads lazily on first use; results
    are memoised per (question, a, b) because grouping asks the same pair more than once.
    """

    name = "nli"
    PREMISE = "Question: {question}\nAnswer: {answer}"
    HYPOTHESIS = "Answer: {answer}"

    def __init__(self, model_name_or_path: str = "MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli",
                 *, batch_size: int = 32, device: str = "cpu", num_threads: int | None = None,
                 normalise: Callable[[str | None], str] = normalise_answer):
        self.model_name_or_path = model_name_or_path
        self.normalise = normalise
        self.batch_size = int(batch_size)
        self.device = device
        self.num_threads = num_threads
        self._model = None
        self._tokenizer = None
        self._entail_index: int | None = None
        self._memo: dict[tuple[str, str, str], bool] = {}

    # -- model -------------------------------------------------------------------------------
    def _load(self) -> None:
        if self._model is not None:
            return
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if self.num_threads:
            torch.set_num_threads(int(self.num_threads))
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_name_or_path)
        self._model = AutoModelForSequenceClassification.from_pretrained(self.model_name_or_path)
        self._model.to(self.device).eval()
        self._entail_index = entailment_index(self._model.config.id2label, self.model_name_or_path)

    @property
    def entail_index(self) -> int:
        self._load()
        assert self._entail_index is not None
        return self._entail_index

    def _argmax_classes(self, premises: list[str], hypotheses: list[str]) -> np.ndarray:
        """Argmax class index of the NLI model for each (premise, hypothesis) pair."""
        import torch

        self._load()
        out = []
        for i in range(0, len(premises), self.batch_size):
            enc = self._tokenizer(premises[i:i + self.batch_size], hypotheses[i:i + self.batch_size],
                                  return_tensors="pt", padding=True, truncation=True)
            enc = {k: v.to(self.device) for k, v in enc.items()}
            with torch.no_grad():
                logits = self._model(**enc).logits
            out.append(logits.argmax(-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0, dtype=int)

    # -- interface ---------------------------------------------------------------------------
    def equivalent(self, question: str, a: str, b: str) -> bool:
        return self.equivalent_many(question, [(a, b)])[0]

    def equivalent_many(self, question: str, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        result: list[bool | None] = [None] * len(pairs)
        todo: list[int] = []
        for i, (a, b) in enumerate(pairs):
            if not (is_answer(a, self.normalise) and is_answer(b, self.normalise)):
                result[i] = False
            elif self.normalise(a) == self.normalise(b):
                result[i] = True
            elif (question, a, b) in self._memo:
                result[i] = self._memo[(question, a, b)]
            else:
                todo.append(i)
        if todo:
            premises, hypotheses = [], []
            for i in todo:
                a, b = pairs[i]
                # both directions of the pair, interleaved: (a => b), (b => a)
                premises += [self.PREMISE.format(question=question, answer=a),
                             self.PREMISE.format(question=question, answer=b)]
                hypotheses += [self.HYPOTHESIS.format(answer=b), self.HYPOTHESIS.format(answer=a)]
            cls = self._argmax_classes(premises, hypotheses).reshape(-1, 2)
            both = (cls == self.entail_index).all(axis=1)
            for i, ok in zip(todo, both):
                a, b = pairs[i]
                self._memo[(question, a, b)] = self._memo[(question, b, a)] = bool(ok)
                result[i] = bool(ok)
        return [bool(r) for r in result]


def entailment_index(id2label: dict, source: str = "model config") -> int:
    """Index of the entailment class in an NLI head's `id2label` (keys may be str or int)."""
    hits = [int(k) for k, v in id2label.items() if "entail" in str(v).lower()
            and "not" not in str(v).lower()]
    if len(hits) != 1:
        raise ValueError(f"{source}: cannot find exactly one entailment label in id2label={id2label}")
    return hits[0]


EQUIVALENCES: dict[str, Callable[..., Equivalence]] = {
    NormalisedMatch.name: NormalisedMatch,
    NLIEquivalence.name: NLIEquivalence,
}


def get_equivalence(name: str, **kwargs) -> Equivalence:
    """Build the equivalence registered as `name` ("normalised" or "nli") with `kwargs`."""
    try:
        factory = EQUIVALENCES[name]
    except KeyError:
        raise ValueError(f"unknown equivalence {name!r}; known: {sorted(EQUIVALENCES)}") from None
    return factory(**kwargs)
